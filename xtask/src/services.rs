//! Make sure Redis, MySQL/MariaDB, PostgreSQL, RabbitMQ and NATS answer, starting local ones that are
//! installed but down; and the Debian tools the tests and the bench use.

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::run;

struct Service {
    name: &'static str,
    address: String,
    /// The installed program that means "we can start it here".
    program: &'static str,
    start: &'static [&'static str],
    /// Only some methods need it: a lab without it serves the others.
    optional: bool,
}

/// `cargo xtask services [--galera] [--sentinel]`: the services, then with
/// `--galera` the local Galera cluster, with `--sentinel` the local Redis
/// Sentinels and their primary and replicas.
pub fn main(args: &[String]) -> anyhow::Result<()> {
    let (mut galera, mut sentinel) = (false, false);
    for arg in args {
        match arg.as_str() {
            "--galera" => galera = true,
            "--sentinel" => sentinel = true,
            _ => bail!("usage: cargo xtask services [--galera] [--sentinel]"),
        }
    }
    ensure()?;
    if galera {
        crate::galera::up()?;
    }
    if sentinel {
        crate::sentinel::up()?;
    }
    Ok(())
}

pub fn ensure() -> anyhow::Result<()> {
    let services = [
        Service {
            name: "MySQL/MariaDB",
            address: address_of("DATABASE_URL", "127.0.0.1:3306"),
            program: "/usr/sbin/mariadbd",
            start: &[
                "start-stop-daemon",
                "--start",
                "--oknodo",
                "--background",
                "--exec",
                "/usr/sbin/mariadbd",
            ],
            optional: false,
        },
        Service {
            name: "Redis",
            address: address_of("REDIS_URL", "127.0.0.1:6379"),
            program: "/usr/bin/redis-server",
            start: &[
                "redis-server",
                "--daemonize",
                "yes",
                "--bind",
                "127.0.0.1",
                "-::1",
                "--port",
                "6379",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            optional: false,
        },
        // The second engine (`DATABASE_URL=postgres://…`), which the tests
        // run the components and the isolation cases on.
        Service {
            name: "PostgreSQL",
            address: "127.0.0.1:5432".to_string(),
            program: "/usr/bin/pg_ctlcluster",
            start: &["pg_ctlcluster", "15", "main", "start"],
            optional: false,
        },
        // The brokers of REDIS_LUA_RABBITMQ and REDIS_LUA_JETSTREAM.
        Service {
            name: "RabbitMQ",
            address: "127.0.0.1:5672".to_string(),
            program: "/usr/sbin/rabbitmq-server",
            start: &["rabbitmq-server", "-detached"],
            optional: true,
        },
        Service {
            name: "NATS",
            address: "127.0.0.1:4222".to_string(),
            program: "/usr/sbin/nats-server",
            start: &[
                "start-stop-daemon",
                "--start",
                "--oknodo",
                "--background",
                "--exec",
                "/usr/sbin/nats-server",
                "--",
                "-a",
                "127.0.0.1",
                "-p",
                "4222",
                "-js",
                "-sd",
                "/var/lib/nats-server",
            ],
            optional: true,
        },
    ];
    for service in &services {
        if answers(&service.address) {
            continue;
        }
        let installed = std::path::Path::new(service.program).exists();
        if !installed && service.optional {
            println!(
                "{} does not answer at {} and is not installed here: its methods will answer 503",
                service.name, service.address
            );
            continue;
        }
        if !installed {
            bail!(
                "{} does not answer at {} and is not installed here; start one (for example `docker compose up -d mysql redis rabbitmq nats`)",
                service.name,
                service.address
            );
        }
        println!(
            "{} is down at {}; starting it",
            service.name, service.address
        );
        run(Command::new(service.start[0]).args(&service.start[1..]))?;
        let started = Instant::now();
        while !answers(&service.address) {
            if started.elapsed() > Duration::from_secs(60) {
                bail!(
                    "{} did not come up at {} within 60 s",
                    service.name,
                    service.address
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
    Ok(())
}

/// host:port of a service URL in `var`, or `default`.
fn address_of(var: &str, default: &str) -> String {
    let Ok(url) = std::env::var(var) else {
        return default.to_string();
    };
    let after_scheme = url.split_once("://").map_or(url.as_str(), |(_, rest)| rest);
    let after_credentials = after_scheme
        .rsplit_once('@')
        .map_or(after_scheme, |(_, rest)| rest);
    let host_port = after_credentials
        .split(['/', '?'])
        .next()
        .unwrap_or(default);
    if host_port.contains(':') {
        host_port.to_string()
    } else {
        format!(
            "{host_port}:{}",
            &default[default.rfind(':').unwrap_or(0) + 1..]
        )
    }
}

fn answers(address: &str) -> bool {
    let addresses: Vec<SocketAddr> = match address.to_socket_addrs() {
        Ok(addresses) => addresses.collect(),
        Err(_) => return false,
    };
    addresses
        .iter()
        .any(|a| TcpStream::connect_timeout(a, Duration::from_millis(500)).is_ok())
}

/// `binary` (under `/usr/bin`), installed from Debian's `package` when
/// missing: `wrk` for the bench, `promtool` and `prometheus` for the
/// metrics tests.
pub fn ensure_debian(binary: &str, package: &str) -> anyhow::Result<std::path::PathBuf> {
    let path = std::path::Path::new("/usr/bin").join(binary);
    if !path.exists() {
        println!("installing {binary}");
        install_debian(package)?;
    }
    Ok(path)
}

/// `apt-get install package`. Its output is shown only if it fails: it
/// runs beside the build, whose output it would bury.
pub fn install_debian(package: &str) -> anyhow::Result<()> {
    println!("apt-get install {package}");
    let install = || apt_get(&["install", "-y", "-q", package]);
    if install().is_err() {
        // Package lists older than the archive name files it no longer has.
        apt_get(&["update", "-q"])?;
        install()?;
    }
    Ok(())
}

/// `apt-get args`, its output kept and printed only when it fails.
fn apt_get(args: &[&str]) -> anyhow::Result<()> {
    let mut command = Command::new("apt-get");
    command.args(args).env("DEBIAN_FRONTEND", "noninteractive");
    let shown = format!("{command:?}");
    let output = command
        .output()
        .with_context(|| format!("cannot start {shown}"))?;
    if !output.status.success() {
        print!("{}", String::from_utf8_lossy(&output.stdout));
        eprint!("{}", String::from_utf8_lossy(&output.stderr));
        bail!("{shown} failed with {}", output.status);
    }
    Ok(())
}

/// A new virtual environment at `dir` from Debian's python3 (with
/// python3-venv, which Debian ships apart).
pub fn fresh_venv(dir: &std::path::Path) -> anyhow::Result<()> {
    let python = ensure_debian("python3", "python3")?;
    let has_venv = Command::new(&python)
        .args(["-c", "import ensurepip, venv"])
        .output()
        .is_ok_and(|output| output.status.success());
    if !has_venv {
        install_debian("python3-venv")?;
    }
    std::fs::remove_dir_all(dir).ok();
    run(Command::new(python).args(["-m", "venv"]).arg(dir))
}
