//! Test fixture TEST_HOSTILE: a component that tries, one request at a
//! time, what a component must not be able to do. The request's idempotency
//! key names the attack; the answer is ISSUED with what happened when the
//! attack went through, or UNAVAILABLE with the error that stopped it.

use couponlab_sdk::channels::{Renewal, Subscription};
use couponlab_sdk::redis::{self, Connection};
use couponlab_sdk::sql::{self, IsolationLevel};
use couponlab_sdk::{
    Confirmation, IssueResult, Outcome, Reply, args, keys, named_lock, params, process_lock,
};

couponlab_sdk::world!("async-issuer", "../../../wit");

use couponlab::strategy::jobs;
use exports::couponlab::strategy::{job_runner, strategy};

couponlab_sdk::strategy! {
    struct Hostile: strategy::Guest { method: "TEST_HOSTILE", claims: [], summary: "tries what a component must not do (test fixture)" }
    fn issue(request) {
        let attack = request.idempotency_key.clone().unwrap_or_default();
        match attack_with(&attack, request.coupon_id) {
            Ok(done) => IssueResult::issued().detail(done),
            Err(stopped) => IssueResult::of(Outcome::Unavailable).detail(stopped),
        }
    }
}

impl job_runner::Guest for Hostile {
    fn run_job(_payload: String) -> Confirmation {
        IssueResult::of(Outcome::Unavailable).confirmation(0, 0)
    }
}

type Attempt = Result<String, String>;

fn redis_says(reply: Result<Reply, redis::RedisError>) -> Attempt {
    reply
        .map(|reply| reply.to_string())
        .map_err(|err| err.message().to_string())
}

fn sql_says<T: std::fmt::Debug>(result: Result<T, sql::SqlError>) -> Attempt {
    result
        .map(|done| format!("{done:?}"))
        .map_err(|err| err.message())
}

fn attack_with(attack: &str, coupon_id: u64) -> Attempt {
    let script = |source: &str, keys: &[String]| redis_says(redis::eval(source, keys, &[]));
    match attack {
        "flushdb" => redis_says(redis::execute("FLUSHDB", &[])),
        "eval-flushdb" => script("return redis.call('FLUSHDB')", &[]),
        "lua-del-total" => script(
            "return redis.call('DEL', KEYS[1])",
            &args![keys::total(coupon_id)],
        ),
        "set-outside" => redis_says(redis::execute("SET", &args!["victim:outside", 1])),
        "lua-set-outside" => script("return redis.call('SET', 'victim:outside', '1')", &[]),
        "keys" => redis_says(redis::execute("KEYS", &args!["*"])),
        // Read-only and endless: Redis serves nobody else while it runs,
        // until the host kills it at the call's deadline. Its one key
        // places it on the coupon's node of a cluster.
        "lua-loop" => script(
            "local n = 0 while true do n = n + 1 end",
            &args![keys::total(coupon_id)],
        ),
        // Writes once, then loops: Redis refuses to kill a script that
        // wrote, so only SHUTDOWN NOSAVE ends it.
        "lua-write-loop" => script(
            "redis.call('SET', KEYS[1], 'hostile') local n = 0 while true do n = n + 1 end",
            &args![format!("coupon:hostile:{}", keys::tag(coupon_id))],
        ),
        // Another database of the same server: the ACL allows the lab's
        // own database only.
        "lua-select" => script(
            "redis.call('SELECT', 0) return redis.call('SET', 'coupon:zz', 'owned')",
            &[],
        ),
        "select" => redis_says(redis::execute("SELECT", &args![0])),
        "script-flush" => redis_says(redis::execute("SCRIPT", &args!["FLUSH"])),
        "xread-block" => redis_says(redis::execute(
            "XREAD",
            &args!["BLOCK", 0, "STREAMS", keys::issue_stream(coupon_id), "$"],
        )),
        "client-pause" => on_dedicated(&["CLIENT", "PAUSE", "10000"]),
        "reset" => on_dedicated(&["RESET"]),
        "auth" => on_dedicated(&["AUTH", "default", "anything"]),
        "big-reply" => script("return string.rep('x', 100 * 1024 * 1024)", &[]),
        "many-connections" => {
            let mut held = Vec::new();
            for n in 0..16 {
                match Connection::open() {
                    Ok(conn) => held.push(conn),
                    Err(err) => return Err(format!("connection {}: {}", n + 1, err.message())),
                }
            }
            Ok(format!("held {} dedicated connections", held.len()))
        }
        "drop-table" => sql_says(sql::execute("DROP TABLE coupon_issues", &[])),
        "truncate" => sql_says(sql::execute("TRUNCATE TABLE members", &[])),
        "create-user" => sql_says(sql::execute("CREATE USER evil IDENTIFIED BY 'evil'", &[])),
        "read-mysql-user" => sql_says(sql::query("SELECT COUNT(*) FROM mysql.user", &[])),
        "raise-total" => sql_says(sql::execute(
            "UPDATE coupons SET total_count = total_count + 1000 WHERE id = ?",
            &params![coupon_id],
        )),
        "insert-member" => sql_says(sql::execute(
            "INSERT INTO members (name) VALUES ('evil')",
            &[],
        )),
        "set-session" => sql_says(sql::execute(
            "SET SESSION innodb_lock_wait_timeout = 1000",
            &[],
        )),
        "autocommit-off" => sql_says(sql::execute("SET autocommit = 0", &[])),
        // Allowed — but its connection must not reach the next borrower.
        "get-lock" => sql_says(sql::query("SELECT GET_LOCK('couponlab-hostile', 0)", &[])),
        "sleep" => sql_says(sql::query("SELECT SLEEP(1000)", &[])),
        "big-result" => sql_says(sql::query("SELECT REPEAT('x', 9000000)", &[])),
        // PostgreSQL's own ways out of the lab's tables.
        "pg-read-file" => sql_says(sql::query("SELECT pg_read_file('/etc/passwd')", &[])),
        "pg-authid" => sql_says(sql::query("SELECT rolname FROM pg_authid", &[])),
        "pg-create-role" => sql_says(sql::execute("CREATE ROLE evil LOGIN SUPERUSER", &[])),
        "pg-terminate" => sql_says(sql::query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE usename = current_user AND pid <> pg_backend_pid()",
            &[],
        )),
        "pg-temp-table" => sql_says(sql::query("SELECT 1 AS x INTO TEMP evil", &[])),
        "pg-sleep" => sql_says(sql::query("SELECT pg_sleep(1000)", &[])),
        "many-transactions" => {
            let mut open = Vec::new();
            for n in 0..16 {
                match sql::begin(IsolationLevel::ReadCommitted) {
                    Ok(tx) => open.push(tx),
                    Err(err) => return Err(format!("transaction {}: {}", n + 1, err.message())),
                }
            }
            Ok(format!("held {} transactions", open.len()))
        }
        "big-payload" => match jobs::submit(&"x".repeat(1 << 20)) {
            Ok(()) => Ok("queued a 1 MiB job".into()),
            Err(err) => Err(format!("refused: {err:?}")),
        },
        // A process lock outside the lab's names, and more than a call may hold.
        "lock-outside" => process_lock::acquire("couponlab:hosts", 10).map(|got| got.to_string()),
        "many-locks" => {
            for n in 0..16 {
                process_lock::acquire(&format!("{}:{n}", keys::lock(coupon_id)), 10)
                    .map_err(|err| format!("lock {}: {err}", n + 1))?;
            }
            Ok("held 16 process locks".into())
        }
        // MySQL's named locks outside the lab's names, and too many.
        "named-lock-outside" => {
            sql_says(named_lock::acquire("couponlab_hostile", 10)).map(|got| got.to_string())
        }
        "many-named-locks" => {
            for n in 0..16 {
                named_lock::acquire(&format!("{}:{n}", keys::lock(coupon_id)), 10)
                    .map_err(|err| format!("named lock {}: {}", n + 1, err.message()))?;
            }
            Ok("held 16 named locks".into())
        }
        // A channel outside the lab's, which the server refuses to let the
        // listener hear, and SUBSCRIBE sent as a command.
        "subscribe-outside" => Subscription::subscribe("victim:outside")
            .map(|_| "subscribed".to_string())
            .map_err(|err| err.message().to_string()),
        "subscribe-command" => redis_says(redis::execute(
            "SUBSCRIBE",
            &args![keys::lock_channel(coupon_id)],
        )),
        "many-subscriptions" => {
            let mut held = Vec::new();
            for n in 0..16 {
                let channel = format!("{}:{n}", keys::lock_channel(coupon_id));
                match Subscription::subscribe(&channel) {
                    Ok(subscription) => held.push(subscription),
                    Err(err) => return Err(format!("subscription {}: {}", n + 1, err.message())),
                }
            }
            Ok(format!("held {} subscriptions", held.len()))
        }
        "many-renewals" => {
            let mut held = Vec::new();
            for n in 0..16 {
                match Renewal::start("return 0", &args![keys::lock(coupon_id)], &[], 1_000) {
                    Ok(renewal) => held.push(renewal),
                    Err(err) => return Err(format!("renewal {}: {}", n + 1, err.message())),
                }
            }
            Ok(format!("held {} renewals", held.len()))
        }
        other => Err(format!("no attack named {other:?}")),
    }
}

fn on_dedicated(command: &[&str]) -> Attempt {
    let conn = Connection::open().map_err(|err| err.message().to_string())?;
    let args: Vec<String> = command[1..].iter().map(|s| s.to_string()).collect();
    redis_says(conn.execute(command[0], &args))
}
