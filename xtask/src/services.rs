//! Make sure Redis, MySQL/MariaDB, PostgreSQL, RabbitMQ and NATS answer, starting local ones that are
//! installed but down.

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::bail;

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
