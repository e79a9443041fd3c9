//! `cargo xtask bench --instructions`: what one request costs each server
//! in instructions, counted by callgrind, so the figure repeats whatever
//! else the machine is doing (times on a shared two-core machine do not).
//!
//! The lab (REDIS_LUA, traces on) and the native twin each run under
//! `valgrind --tool=callgrind` in turn. After a warm-up, the counters are
//! zeroed, a fixed number of requests is sent one after another on one
//! kept-alive connection, and the counts are dumped (`callgrind_control`);
//! then the same length of time at rest is counted and taken off, so what
//! the server does on its own timers is not charged to the requests.
//! callgrind counts user-space instructions: the kernel's share (the
//! sockets) is in neither figure.
//!
//! Both servers' instructions are then split by whose code ran
//! ([`stages`]) and set side by side: what the lab spends more, part by
//! part, and how that compares with wasmtime's own work for the call.

mod stages;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use serde_json::json;

use super::{REDIS_URL, create_coupon, database_url, sold_out_coupon, start_twin};
use crate::api::Api;
use crate::launcher::Launched;
use crate::paths::{profiling_binary, strategy_dir, target_dir};
use crate::server::{Serve, Server};
use crate::spread::Spread;

/// Requests counted per pair and server.
const SOLD_OUT_REQUESTS: u32 = 2_000;
const ISSUE_REQUESTS: u32 = 1_000;
/// Requests sent before counting: the connection open, the instance pool,
/// the caches and the allocator warm.
const WARM_UP: u32 = 200;

/// One server's count for one pair.
struct Counted {
    /// Instructions per request, the server's rest taken off.
    per_request: u64,
    /// The dump of the requests, for the split by stage.
    dump: PathBuf,
}

/// One round: each server's count of each pair, the lab's and the twin's.
struct Round {
    sold_out: [Counted; 2],
    issue: [Counted; 2],
}

pub fn main(rounds: u32) -> anyhow::Result<()> {
    let out = dumps_dir();
    std::fs::create_dir_all(&out)?;
    // Dumps of earlier runs would only pile up: each run's are its own.
    for entry in std::fs::read_dir(&out)? {
        let path = entry?.path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if name.starts_with("couponlab.") || name.starts_with("native-twin.") {
            std::fs::remove_file(&path)?;
        }
    }
    let database = database_url()?;
    let mut counted = Vec::new();
    for round in 1..=rounds {
        println!("round {round} of {rounds}");
        counted.push(count_round(&database, &out, round)?);
    }
    for pair in ["sold out", "issue"] {
        let counts = |round: &Round| match pair {
            "sold out" => [round.sold_out[0].per_request, round.sold_out[1].per_request],
            _ => [round.issue[0].per_request, round.issue[1].per_request],
        };
        let spread = |figure: fn([u64; 2]) -> u64| {
            Spread::of(counted.iter().map(|round| figure(counts(round)))).context("no round")
        };
        let lab = spread(|[lab, _]| lab)?;
        let twin = spread(|[_, twin]| twin)?;
        let extra = spread(|[lab, twin]| lab.saturating_sub(twin))?;
        // The split of the round whose lab count is the median.
        let median = counted
            .iter()
            .find(|round| counts(round)[0] == lab.median)
            .context("no round")?;
        let [lab_dump, twin_dump] = match pair {
            "sold out" => &median.sold_out,
            _ => &median.issue,
        };
        let split = stages::split(&lab_dump.dump, lab_dump.per_request)?;
        let twin_split = stages::split(&twin_dump.dump, twin_dump.per_request)?;
        let own = stages::wasmtime_own(&split);
        let over = match rounds {
            1 => "1 round".to_string(),
            rounds => format!("{rounds} rounds"),
        };
        println!(
            "\n{pair}, instructions per request over {over} (median, min–max): couponlab {}, \
             native twin {}, the lab's extra {}; in the median round the extra is \
             {:.2}× wasmtime's own {own}, and the component's code ran {}",
            lab.show(|n| n),
            twin.show(|n| n),
            extra.show(|n| n),
            extra.median as f64 / own.max(1) as f64,
            stages::guest(&split),
        );
        println!("{}", stages::table(&split, &twin_split));
    }
    Ok(())
}

/// Both pairs on the lab, then on the twin, each server started afresh
/// under callgrind.
fn count_round(database: &str, out: &Path, round: u32) -> anyhow::Result<Round> {
    let lab = start_lab_under_callgrind(database, out)?;
    let api = Api::new(&lab.base_url())?;
    let (sold_out, first) = sold_out_coupon(&api)?;
    let members = api.post(
        "/lab/members",
        &json!({ "count": ISSUE_REQUESTS + WARM_UP }),
    )?;
    let pool = members["firstId"].as_u64().context("firstId")?;
    // Each server issues on a coupon of its own, to the same members.
    let lab_coupon = create_coupon(&api, 100_000_000)?;
    let twin_coupon = create_coupon(&api, 100_000_000)?;
    let sold_out_body = |_: u32| json!({ "memberId": first + 1, "method": "REDIS_LUA" });
    let issue_body = |n: u32| json!({ "memberId": pool + u64::from(n), "method": "REDIS_LUA" });
    // Both pairs on one server, its dumps named after it and the round.
    let pairs = |server: &Launched, issue_coupon: &str, who: &str| {
        let name = |pair: &str| format!("{who}-{pair}-{round}");
        let sold_out = count(
            server,
            &sold_out,
            SOLD_OUT_REQUESTS,
            sold_out_body,
            &name("sold-out"),
        )?;
        let issue = count(
            server,
            issue_coupon,
            ISSUE_REQUESTS,
            issue_body,
            &name("issue"),
        )?;
        anyhow::Ok((sold_out, issue))
    };

    let (lab_sold_out, lab_issue) = pairs(lab.process(), &lab_coupon, "lab")?;
    drop(lab);
    let twin = start_twin_under_callgrind(database, out)?;
    let (twin_sold_out, twin_issue) = pairs(&twin, &twin_coupon, "twin")?;
    Ok(Round {
        sold_out: [lab_sold_out, twin_sold_out],
        issue: [lab_issue, twin_issue],
    })
}

/// The lab serving only REDIS_LUA, with no canary and no watcher: only the
/// request path is counted.
fn start_lab_under_callgrind(database: &str, out: &Path) -> anyhow::Result<Server> {
    let components = out.join("strategies");
    std::fs::create_dir_all(&components)?;
    std::fs::copy(
        strategy_dir().join("redis_lua.wasm"),
        components.join("redis_lua.wasm"),
    )
    .context("REDIS_LUA's component is not installed: run `cargo xtask strategies`")?;
    let components = components.to_string_lossy().into_owned();
    let wrapper = under_callgrind(out, "couponlab")?;
    Server::start_with(Serve {
        database_url: Some(database),
        redis_url: Some(REDIS_URL),
        env: &[
            ("COUPONLAB_WATCH", "false"),
            ("COUPONLAB_CANARY", "off"),
            ("COUPONLAB_STRATEGY_DIR", &components),
            // valgrind cannot map the address space a pool of a thousand
            // slots reserves; the requests are sent one at a time anyway.
            ("COUPONLAB_MAX_INSTANCES", "2"),
            // Work on a timer runs as often under callgrind as at full speed
            // while the requests go fifty times slower: each snapshot would
            // be charged to fifty times fewer requests than it serves.
            ("COUPONLAB_SNAPSHOT_INTERVAL_MS", "600000"),
        ],
        binary: Some(&wrapper),
        ..Serve::default()
    })
}

fn start_twin_under_callgrind(database: &str, out: &Path) -> anyhow::Result<Launched> {
    let wrapper = under_callgrind(out, "native-twin")?;
    start_twin(database, &[], Some(wrapper))
}

/// A script that runs the binary `name`, built with line tables, under
/// callgrind with the arguments it is given: the launchers start it as
/// they start the binary. Its dumps go to `out`, named after the process.
fn under_callgrind(out: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let binary = profiling_binary(name);
    anyhow::ensure!(
        binary.exists(),
        "{} is not built: `cargo xtask bench --instructions` builds it \
         (cargo build --profile profiling -p couponlab --bins)",
        binary.display()
    );
    let script = out.join(format!("{name}-under-callgrind"));
    let dumps = out.join(format!("{name}.%p"));
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n# wasmtime writes its compiled code to memory it then runs.\nexec valgrind --tool=callgrind --smc-check=all-non-file --callgrind-out-file={} {} \"$@\"\n",
            dumps.display(),
            binary.display()
        ),
    )?;
    let mut permissions = std::fs::metadata(&script)?.permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    std::fs::set_permissions(&script, permissions)?;
    Ok(script)
}

/// Counts `requests` issue requests on `coupon`, the n-th with `body(n)`:
/// the warm-up first, then the counted requests, then the same time at rest.
fn count(
    server: &Launched,
    coupon: &str,
    requests: u32,
    body: impl Fn(u32) -> serde_json::Value,
    name: &str,
) -> anyhow::Result<Counted> {
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()?;
    let url = format!("{}/lab/coupons/{coupon}/issue", server.base_url());
    let send = |n: u32| -> anyhow::Result<()> {
        let status = client.post(&url).json(&body(n)).send()?.status();
        ensure!(
            status.is_success() || status.as_u16() == 409,
            "{name}: request {n} answered {status}"
        );
        Ok(())
    };
    for n in 0..WARM_UP {
        send(n)?;
    }
    let pid = server.pid();
    callgrind_control(pid, "--zero")?;
    let started = Instant::now();
    for n in WARM_UP..WARM_UP + requests {
        send(n)?;
    }
    let took = started.elapsed();
    let busy = dump(pid, &format!("{name}-requests"))?;
    callgrind_control(pid, "--zero")?;
    std::thread::sleep(took);
    let rest = dump(pid, &format!("{name}-rest"))?;
    let busy_total = stages::total(&busy)?;
    let rest_total = stages::total(&rest)?;
    println!(
        "{name}: {requests} requests in {took:.1?} under callgrind: {busy_total} instructions, {rest_total} at rest for as long"
    );
    Ok(Counted {
        per_request: busy_total.saturating_sub(rest_total) / u64::from(requests),
        dump: busy,
    })
}

/// Where the servers' dumps and their launch scripts go.
fn dumps_dir() -> PathBuf {
    target_dir().join("callgrind")
}

/// Dumps the process's counts; the dump's file.
fn dump(pid: u32, label: &str) -> anyhow::Result<PathBuf> {
    let out = dumps_dir();
    let before = dumps_of(&out, pid)?;
    callgrind_control(pid, &format!("--dump={label}"))?;
    let after = dumps_of(&out, pid)?;
    match after.into_iter().find(|file| !before.contains(file)) {
        Some(file) => Ok(file),
        None => bail!("callgrind wrote no dump for {label}"),
    }
}

fn dumps_of(out: &Path, pid: u32) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(out)? {
        let path = entry?.path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if name.contains(&format!(".{pid}.")) {
            files.push(path);
        }
    }
    Ok(files)
}

fn callgrind_control(pid: u32, option: &str) -> anyhow::Result<()> {
    let output = Command::new("callgrind_control")
        .arg(option)
        .arg(pid.to_string())
        .output()
        .context("cannot run callgrind_control (Debian's valgrind)")?;
    ensure!(
        output.status.success(),
        "callgrind_control {option} {pid} failed with {}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    );
    Ok(())
}
