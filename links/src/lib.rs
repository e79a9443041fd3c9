//! The links between a lab and its Redis, MySQL, RabbitMQ and NATS, each through a
//! fault-injection proxy of noxious (the core of noxious, a Rust port of
//! Toxiproxy) on a free local port, so a load run (`cargo xtask loadtest
//! --fault`) or a test can cut a link or slow it.
//!
//! - A cut stops the proxy: its listener goes (a new connection is refused,
//!   nothing listens on the port) and every connection through it is
//!   closed. Restoring starts a proxy on the same port again.
//! - Latency is noxious's `latency` toxic on the downstream direction
//!   (Redis or MySQL → the lab): every chunk an answer arrives in is held
//!   that long, so one request–answer round trip takes that much longer.
//!   noxious holds chunks one after another, so on a connection that
//!   pipelines (the lab's multiplexed Redis connection) answers queue
//!   behind each other: the link also carries fewer answers per second.
//!
//! The proxies run on a tokio runtime of their own, single-threaded on a
//! thread of its own; every method here is blocking and may be called from
//! any thread. Single-threaded because noxious 1.0.4 relinks the open
//! connections when a toxic comes or goes, and the task of a connection's
//! old links forgets the connection when it ends: on several threads it
//! can end after the new links were recorded and forget those, so the next
//! toxic change would miss that connection. On one thread the old task
//! ends first (tasks run in the order they were woken).
//!
//! noxious 1.0.4 also swaps the two directions of every open connection
//! each time it relinks them (`recreate_links` takes the answers' ends for
//! the requests' and the other way round), so a toxic added while a
//! connection is open would act on the wrong direction of it: latency meant
//! for the answers would delay the requests, and an answer held back would
//! be a request that never reached the server. Every toxic change here is
//! followed by one more relink, which swaps them back.
//!
//! A relink also drops what the old links held: a chunk the latency toxic
//! was delaying when the latency came or went is lost, and the connection
//! it was on waits for an answer that never comes, as behind a link that
//! swallowed a segment for good. What talks through a link must not wait
//! for ever on one connection: the lab bounds every step of its start
//! (`db::answered`) and every strategy call.

use std::net::TcpListener;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bmrng::RequestSender;
use noxious::proxy::{ProxyConfig, ProxyRunner, Runner, Toxics};
use noxious::signal::{Close, Stop, Stopper};
use noxious::socket::TcpListener as ProxyListener;
use noxious::state::{ProxyState, SharedProxyInfo};
use noxious::toxic::{
    StreamDirection, Toxic, ToxicEvent, ToxicEventKind, ToxicEventResult, ToxicKind,
};

/// Where the lab's Redis and MySQL/MariaDB listen (see `services.rs`).
pub const REDIS_UPSTREAM: &str = "127.0.0.1:6379";
pub const DATABASE_UPSTREAM: &str = "127.0.0.1:3306";
/// Where the lab's RabbitMQ and NATS listen.
pub const AMQP_UPSTREAM: &str = "127.0.0.1:5672";
pub const NATS_UPSTREAM: &str = "127.0.0.1:4222";

/// The name of the latency toxic a link carries while it is slowed.
const LATENCY_TOXIC: &str = "latency_downstream";

/// How long a cut waits for the proxy's connections to be closed, and
/// how long before it signals the stop a second time.
const CLOSE_LIMIT: Duration = Duration::from_secs(5);
const GRACE: Duration = Duration::from_millis(200);

/// One of the links a served lab talks through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Link {
    Redis,
    Database,
    Amqp,
    Nats,
}

impl Link {
    pub const ALL: [Link; 4] = [Link::Redis, Link::Database, Link::Amqp, Link::Nats];
}

impl Link {
    /// How a fault names the link: `redis`, `db`, `amqp` or `nats`.
    pub fn name(self) -> &'static str {
        match self {
            Link::Redis => "redis",
            Link::Database => "db",
            Link::Amqp => "amqp",
            Link::Nats => "nats",
        }
    }

    /// The service at the far end, for sentences.
    pub fn service(self) -> &'static str {
        match self {
            Link::Redis => "Redis",
            Link::Database => "MySQL",
            Link::Amqp => "RabbitMQ",
            Link::Nats => "NATS",
        }
    }
}

/// The proxies and the runtime they run on.
pub struct Links {
    runtime: tokio::runtime::Handle,
    /// Ends the runtime's thread.
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Every proxy's stop signal is forked from this one.
    root: Stop,
    root_stopper: Option<Stopper>,
    redis: Proxy,
    database: Proxy,
    amqp: Proxy,
    nats: Proxy,
}

/// One proxy: where it listens, where it forwards, and its running state
/// (`None` while the link is cut).
struct Proxy {
    link: Link,
    listen: String,
    upstream: String,
    running: Mutex<Option<Running>>,
    /// The toxics a cut proxy had, installed again when it is restored.
    toxics_when_cut: Mutex<Option<Toxics>>,
}

struct Running {
    info: SharedProxyInfo,
    stopper: Stopper,
    close: Close,
    events: RequestSender<ToxicEvent, ToxicEventResult>,
}

impl Links {
    /// Starts every link's proxy, each on a free port of 127.0.0.1,
    /// forwarding to Redis at `redis_upstream` (`host:port`:
    /// [`REDIS_UPSTREAM`], or a Redis of the run's own), to
    /// [`DATABASE_UPSTREAM`], [`AMQP_UPSTREAM`] and [`NATS_UPSTREAM`].
    pub fn start_to(redis_upstream: &str) -> anyhow::Result<Links> {
        Self::start_to_redis_and_nats(redis_upstream, NATS_UPSTREAM)
    }

    /// The same, forwarding to NATS at `nats_upstream` (a NATS server of
    /// the run's own).
    pub fn start_to_redis_and_nats(
        redis_upstream: &str,
        nats_upstream: &str,
    ) -> anyhow::Result<Links> {
        Self::start_to_all(redis_upstream, DATABASE_UPSTREAM, nats_upstream)
    }

    /// The same, the database link forwarding to `database_upstream`
    /// (PostgreSQL's `127.0.0.1:5432`, say).
    pub fn start_to_database(
        redis_upstream: &str,
        database_upstream: &str,
    ) -> anyhow::Result<Links> {
        Self::start_to_all(redis_upstream, database_upstream, NATS_UPSTREAM)
    }

    fn start_to_all(
        redis_upstream: &str,
        database_upstream: &str,
        nats_upstream: &str,
    ) -> anyhow::Result<Links> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start the links' runtime")?;
        let handle = runtime.handle().clone();
        let (shutdown, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("couponlab-links".into())
            .spawn(move || {
                runtime.block_on(async {
                    let _ = stopped.await;
                });
            })?;
        let (root, root_stopper) = Stop::new();
        let links = Links {
            runtime: handle,
            shutdown: Some(shutdown),
            thread: Some(thread),
            root,
            root_stopper: Some(root_stopper),
            redis: Proxy::new(Link::Redis, redis_upstream)?,
            database: Proxy::new(Link::Database, database_upstream)?,
            amqp: Proxy::new(Link::Amqp, AMQP_UPSTREAM)?,
            nats: Proxy::new(Link::Nats, nats_upstream)?,
        };
        for link in Link::ALL {
            links.launch(link)?;
        }
        Ok(links)
    }

    /// `host:port` the link's proxy listens on.
    pub fn address(&self, link: Link) -> &str {
        &self.proxy(link).listen
    }

    /// `url` with the address of Redis, MySQL, RabbitMQ or NATS replaced by its link's:
    /// `mysql://root@127.0.0.1:3306/x` → `mysql://root@127.0.0.1:<port>/x`.
    /// Fails on a URL that points at neither.
    pub fn through(&self, url: &str) -> anyhow::Result<String> {
        for proxy in [&self.redis, &self.database, &self.amqp, &self.nats] {
            if let Some(position) = url.find(&proxy.upstream) {
                let (before, rest) = (&url[..position], &url[position + proxy.upstream.len()..]);
                let authority = before.ends_with('@') || before.ends_with("//");
                if authority && (rest.is_empty() || rest.starts_with(['/', '?'])) {
                    return Ok(format!("{before}{}{rest}", proxy.listen));
                }
            }
        }
        bail!(
            "{url} points at none of Redis ({}), MySQL ({}), RabbitMQ ({}) or NATS ({}): no link can carry it",
            self.redis.upstream,
            self.database.upstream,
            self.amqp.upstream,
            self.nats.upstream
        )
    }

    /// Connections open through the link now.
    pub fn connections(&self, link: Link) -> usize {
        self.proxy(link)
            .running
            .lock()
            .expect("links poisoned")
            .as_ref()
            .map_or(0, |running| proxy_clients(&running.info))
    }

    /// Whether the link is cut.
    pub fn is_cut(&self, link: Link) -> bool {
        self.proxy(link)
            .running
            .lock()
            .expect("links poisoned")
            .is_none()
    }

    /// Cuts the link: stops its proxy, which stops listening (new
    /// connections are refused) and closes every connection through it.
    /// Returns how many connections were open.
    pub fn cut(&self, link: Link) -> anyhow::Result<usize> {
        let proxy = self.proxy(link);
        let mut running = proxy.running.lock().expect("links poisoned");
        let Some(up) = running.take() else {
            bail!("the {} link is already cut", link.name())
        };
        let (open, toxics) = {
            let state = up.info.state.lock();
            (state.clients.len(), state.toxics.clone())
        };
        *proxy.toxics_when_cut.lock().expect("links poisoned") = Some(toxics);
        let state = up.info.state.clone();
        self.run(async move {
            up.stopper.clone().stop();
            // The listener is gone once the proxy says it closed; its
            // connections' tasks end a moment later.
            let _ = up.close.recv().await;
            if !closed(&state, GRACE).await {
                // A connection accepted as the stop came forked its links'
                // stop signal after it was sent and never heard it: a
                // second one reaches it. (Not at once: a signal sent twice
                // before a fork's relay has read the first is lost on it.)
                up.stopper.stop();
                closed(&state, CLOSE_LIMIT).await;
            }
        })?;
        let left = proxy_clients(&up.info);
        if left > 0 {
            bail!(
                "the {} link was cut but {left} connection(s) still open after {CLOSE_LIMIT:?}",
                link.name()
            );
        }
        Ok(open)
    }

    /// Ends a cut: a proxy listens on the same port again, with the toxics
    /// the link had.
    pub fn restore(&self, link: Link) -> anyhow::Result<()> {
        if !self.is_cut(link) {
            bail!("the {} link is not cut", link.name());
        }
        self.launch(link)
    }

    /// Adds `ms` of latency on the link's downstream direction (see the
    /// module's documentation).
    pub fn add_latency(&self, link: Link, ms: u64) -> anyhow::Result<()> {
        let toxic = Toxic {
            kind: ToxicKind::Latency {
                latency: ms,
                jitter: 0,
            },
            name: LATENCY_TOXIC.to_string(),
            toxicity: 1.0,
            direction: StreamDirection::Downstream,
        };
        self.toxic_event(link, ToxicEventKind::AddToxic(toxic.clone()))
            .and_then(|()| self.toxic_event(link, ToxicEventKind::UpdateToxic(toxic)))
            .with_context(|| format!("cannot add {ms} ms of latency to the {} link", link.name()))
    }

    /// Takes the link's latency away.
    pub fn remove_latency(&self, link: Link) -> anyhow::Result<()> {
        // Removing every toxic of a link that has none left relinks once
        // more (see the module's documentation).
        self.toxic_event(link, ToxicEventKind::RemoveToxic(LATENCY_TOXIC.into()))
            .and_then(|()| self.toxic_event(link, ToxicEventKind::RemoveAllToxics))
            .with_context(|| format!("cannot remove the {} link's latency", link.name()))
    }

    fn toxic_event(&self, link: Link, kind: ToxicEventKind) -> anyhow::Result<()> {
        let proxy = self.proxy(link);
        let events = match proxy.running.lock().expect("links poisoned").as_ref() {
            Some(running) => running.events.clone(),
            None => bail!("the link is cut"),
        };
        let event = ToxicEvent::new(link.name().to_string(), kind);
        self.run(async move { events.send_receive(event).await })?
            .map_err(|_| anyhow::anyhow!("the proxy is not running"))?
            .map_err(|err| anyhow::anyhow!("{err}"))
    }

    /// Starts the link's proxy on its port.
    fn launch(&self, link: Link) -> anyhow::Result<()> {
        let proxy = self.proxy(link);
        let toxics = proxy
            .toxics_when_cut
            .lock()
            .expect("links poisoned")
            .take()
            .unwrap_or_else(Toxics::empty);
        let config = ProxyConfig {
            name: link.name().to_string(),
            listen: proxy.listen.clone(),
            upstream: proxy.upstream.clone(),
            enabled: true,
            rand_seed: None,
        };
        let root = self.root.clone();
        let running = self.run(async move {
            let (listener, info) =
                ProxyRunner::initialize_proxy::<ProxyListener>(config, toxics).await?;
            let (stop, stopper) = root.fork();
            let (close, closer) = Close::new();
            let (events, receiver) = bmrng::channel(2);
            tokio::spawn(ProxyRunner::run_proxy(
                listener,
                info.clone(),
                receiver,
                stop,
                closer,
            ));
            Ok::<_, std::io::Error>(Running {
                info,
                stopper,
                close,
                events,
            })
        });
        let running = running?.with_context(|| {
            format!(
                "cannot start the {} proxy on {} (to {})",
                link.name(),
                proxy.listen,
                proxy.upstream
            )
        })?;
        *proxy.running.lock().expect("links poisoned") = Some(running);
        Ok(())
    }

    /// Runs `work` on the links' runtime and waits for it.
    fn run<T: Send + 'static>(
        &self,
        work: impl std::future::Future<Output = T> + Send + 'static,
    ) -> anyhow::Result<T> {
        self.runtime
            .block_on(self.runtime.spawn(work))
            .context("the links' runtime is gone")
    }

    fn proxy(&self, link: Link) -> &Proxy {
        match link {
            Link::Redis => &self.redis,
            Link::Database => &self.database,
            Link::Amqp => &self.amqp,
            Link::Nats => &self.nats,
        }
    }
}

impl Drop for Links {
    fn drop(&mut self) {
        if let Some(stopper) = self.root_stopper.take() {
            stopper.stop();
        }
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Proxy {
    /// A proxy on a port of 127.0.0.1 that was free a moment ago.
    fn new(link: Link, upstream: &str) -> anyhow::Result<Proxy> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        Ok(Proxy {
            link,
            listen: format!("127.0.0.1:{port}"),
            upstream: upstream.to_string(),
            running: Mutex::new(None),
            toxics_when_cut: Mutex::new(None),
        })
    }
}

/// Waits until the proxy has no connection left, `limit` at most; whether
/// it has none.
async fn closed(state: &ProxyState, limit: Duration) -> bool {
    let since = Instant::now();
    while !state.lock().clients.is_empty() {
        if since.elapsed() >= limit {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    true
}

fn proxy_clients(info: &SharedProxyInfo) -> usize {
    info.state.lock().clients.len()
}

impl std::fmt::Debug for Links {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for proxy in [&self.redis, &self.database, &self.amqp, &self.nats] {
            write!(
                f,
                "{} {} → {}{}; ",
                proxy.link.name(),
                proxy.listen,
                proxy.upstream,
                if self.is_cut(proxy.link) {
                    " (cut)"
                } else {
                    ""
                }
            )?;
        }
        Ok(())
    }
}

/// Against the real Redis and MariaDB: PING and the server's greeting only,
/// no data read or written.
#[cfg(test)]
mod tests {
    use std::io::{ErrorKind, Read, Write};
    use std::net::TcpStream;

    use super::*;

    const LATENCY_MS: u64 = 200;

    fn connect(links: &Links, link: Link) -> std::io::Result<TcpStream> {
        let stream = TcpStream::connect(links.address(link))?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        Ok(stream)
    }

    /// One PING round trip; how long it took.
    fn ping(stream: &mut TcpStream) -> Duration {
        let sent = Instant::now();
        stream.write_all(b"*1\r\n$4\r\nPING\r\n").unwrap();
        let mut answer = [0u8; 7];
        stream.read_exact(&mut answer).unwrap();
        assert_eq!(&answer, b"+PONG\r\n");
        sent.elapsed()
    }

    /// Connects and reads the MySQL greeting (protocol version 10, or an
    /// error packet 0xff when the server refuses the host); how long the
    /// greeting took.
    fn greeting(links: &Links) -> Duration {
        let connected = Instant::now();
        let mut stream = connect(links, Link::Database).unwrap();
        let mut head = [0u8; 5];
        stream.read_exact(&mut head).unwrap();
        assert!(
            matches!(head[4], 10 | 0xff),
            "not a MySQL greeting: {head:?}"
        );
        connected.elapsed()
    }

    /// The link is closed for this stream: what was on its way may still
    /// arrive, then end of file or a reset.
    fn assert_closed(stream: &mut TcpStream) {
        let mut rest = [0u8; 256];
        loop {
            match stream.read(&mut rest) {
                Ok(0) => return,
                Ok(_) => continue,
                Err(err) if !matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return;
                }
                Err(err) => panic!("the connection is still open: {err}"),
            }
        }
    }

    #[test]
    fn redis_answers_through_the_link_and_not_while_it_is_cut() {
        let links = Links::start_to(REDIS_UPSTREAM).unwrap();
        let mut before = connect(&links, Link::Redis).unwrap();
        ping(&mut before);
        assert_eq!(links.connections(Link::Redis), 1);

        assert_eq!(links.cut(Link::Redis).unwrap(), 1);
        assert!(links.is_cut(Link::Redis));
        assert_closed(&mut before);
        let refused = connect(&links, Link::Redis).unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::ConnectionRefused, "{refused}");
        assert!(links.cut(Link::Redis).is_err(), "cut twice");

        links.restore(Link::Redis).unwrap();
        let mut after = connect(&links, Link::Redis).unwrap();
        ping(&mut after);
        assert!(links.restore(Link::Redis).is_err(), "restored twice");
    }

    /// When a SET sent through `stream` lands in Redis (seen on a direct
    /// connection), and when its answer arrives, from the send.
    fn landing_and_answer(stream: &mut TcpStream, key: &str) -> (Duration, Duration) {
        let mut direct = TcpStream::connect(REDIS_UPSTREAM).unwrap();
        let command = |args: &[&str]| {
            let mut out = format!("*{}\r\n", args.len());
            for arg in args {
                out.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
            }
            out.into_bytes()
        };
        let sent = Instant::now();
        stream.write_all(&command(&["SET", key, "1"])).unwrap();
        let landed = loop {
            direct.write_all(&command(&["EXISTS", key])).unwrap();
            let mut answer = [0u8; 4];
            direct.read_exact(&mut answer).unwrap();
            if &answer == b":1\r\n" {
                break sent.elapsed();
            }
        };
        let mut ok = [0u8; 5];
        stream.read_exact(&mut ok).unwrap();
        let answered = sent.elapsed();
        direct.write_all(&command(&["DEL", key])).unwrap();
        (landed, answered)
    }

    #[test]
    fn latency_holds_the_answers_not_the_requests_of_open_and_new_connections() {
        let links = Links::start_to(REDIS_UPSTREAM).unwrap();
        let mut open = connect(&links, Link::Redis).unwrap();
        ping(&mut open);
        let latency = Duration::from_millis(LATENCY_MS);
        links.add_latency(Link::Redis, LATENCY_MS).unwrap();
        let mut fresh = connect(&links, Link::Redis).unwrap();
        for (stream, which) in [(&mut open, "open"), (&mut fresh, "new")] {
            let key = format!("couponlab-links-test:{which}:{}", std::process::id());
            let (landed, answered) = landing_and_answer(stream, &key);
            assert!(
                landed < latency / 2,
                "{which}: the request was held {landed:?}"
            );
            assert!(answered >= latency, "{which}: answered after {answered:?}");
        }
    }

    #[test]
    fn redis_latency_slows_each_round_trip_while_it_lasts() {
        let links = Links::start_to(REDIS_UPSTREAM).unwrap();
        let mut stream = connect(&links, Link::Redis).unwrap();
        let latency = Duration::from_millis(LATENCY_MS);
        assert!(ping(&mut stream) < latency);

        // The connection open before is slowed too (noxious relinks it).
        links.add_latency(Link::Redis, LATENCY_MS).unwrap();
        for _ in 0..2 {
            let slowed = ping(&mut stream);
            assert!(slowed >= latency, "{slowed:?} with {latency:?} of latency");
        }
        let mut fresh = connect(&links, Link::Redis).unwrap();
        let slowed = ping(&mut fresh);
        assert!(slowed >= latency, "a new connection: {slowed:?}");

        links.remove_latency(Link::Redis).unwrap();
        for stream in [&mut stream, &mut fresh] {
            let fast = ping(stream);
            assert!(fast < latency, "{fast:?} once the latency is gone");
        }
        assert!(links.remove_latency(Link::Redis).is_err(), "removed twice");
    }

    #[test]
    fn mysql_greets_through_the_link_slowed_and_not_while_it_is_cut() {
        let links = Links::start_to(REDIS_UPSTREAM).unwrap();
        let latency = Duration::from_millis(LATENCY_MS);
        assert!(greeting(&links) < latency);

        links.add_latency(Link::Database, LATENCY_MS).unwrap();
        let slowed = greeting(&links);
        assert!(slowed >= latency, "{slowed:?} with {latency:?} of latency");
        // A cut keeps the link's latency for when it comes back.
        let mut open = connect(&links, Link::Database).unwrap();
        links.cut(Link::Database).unwrap();
        assert_closed(&mut open);
        let refused = connect(&links, Link::Database).unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::ConnectionRefused, "{refused}");
        assert!(
            links.add_latency(Link::Database, 1).is_err(),
            "slowed while cut"
        );
        links.restore(Link::Database).unwrap();
        assert!(greeting(&links) >= latency);

        links.remove_latency(Link::Database).unwrap();
        assert!(greeting(&links) < latency);
    }

    #[test]
    fn urls_are_rewritten_to_go_through_the_links() {
        let links = Links::start_to(REDIS_UPSTREAM).unwrap();
        let redis = links.address(Link::Redis).to_string();
        let db = links.address(Link::Database).to_string();
        assert_eq!(
            links.through("redis://127.0.0.1:6379/10").unwrap(),
            format!("redis://{redis}/10")
        );
        assert_eq!(
            links
                .through("mysql://root@127.0.0.1:3306/couponlab_x")
                .unwrap(),
            format!("mysql://root@{db}/couponlab_x")
        );
        let amqp = links.address(Link::Amqp).to_string();
        assert_eq!(
            links
                .through("amqp://guest:guest@127.0.0.1:5672/%2f")
                .unwrap(),
            format!("amqp://guest:guest@{amqp}/%2f")
        );
        let nats = links.address(Link::Nats).to_string();
        assert_eq!(
            links.through("nats://127.0.0.1:4222").unwrap(),
            format!("nats://{nats}")
        );
        assert!(links.through("mysql://root@127.0.0.1:33060/x").is_err());
        assert!(links.through("redis://10.0.0.1:6379/0").is_err());
    }
}
