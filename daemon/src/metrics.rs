//! Figures for a monitoring stack: `migd --metrics ADDR` serves them over
//! HTTP in Prometheus's text format (OpenMetrics), at `/metrics`.
//!
//! Two kinds. Every daemon counts what passes through it ([`Counters`]:
//! messages and bytes routed, moves out and in with their durations,
//! checkpoint images written with their sizes and durations, the consensus
//! term it follows and whether it leads); the daemon's loop adds to them
//! (atomics, no lock). The daemon that is the master adds the virtual
//! machine's state as its master answers `mig` (hosts and their state,
//! processors offered, VPs and jobs by state, slots, switch lateness, loop
//! turns, owners): asked on each scrape through the local control socket,
//! so a scrape costs the master one `mig hosts`, `ps`, `jobs` and `stats`,
//! and costs nothing between scrapes. Workers leave those out, so a sum
//! over every daemon scraped counts each thing once; after a failover the
//! new master serves them.
//!
//! What lives here: the counters, the scrape's figures and the small HTTP
//! server on a thread of its own (a request at a time, each bounded in
//! size and time; a bearer token where one is set). What does not: where
//! the loop counts (its handlers call [`Counters`]), the control requests'
//! answers (the master).

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use libmig::msg::{HostInfo, JobInfo, OwnerState, Request, Response, StatsInfo, VpInfo};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// What one daemon counts, shared between its loop and the server thread.
/// Cloning shares the figures.
#[derive(Debug, Clone)]
pub struct Counters(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    messages_local: AtomicU64,
    messages_remote: AtomicU64,
    bytes_local: AtomicU64,
    bytes_remote: AtomicU64,
    moves_out: Counter,
    moves_failed: Counter,
    moves_in: Counter,
    move_seconds: Histogram,
    checkpoints: Counter,
    checkpoint_bytes: Histogram,
    checkpoint_seconds: Histogram,
    term: AtomicU64,
    leader: AtomicI64,
    placement: Family<Vec<(String, String)>, Counter>,
}

impl Default for Counters {
    fn default() -> Counters {
        Counters(Arc::new(Inner {
            messages_local: AtomicU64::new(0),
            messages_remote: AtomicU64::new(0),
            bytes_local: AtomicU64::new(0),
            bytes_remote: AtomicU64::new(0),
            moves_out: Counter::default(),
            moves_failed: Counter::default(),
            moves_in: Counter::default(),
            // 1 ms to about 65 s.
            move_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 17)),
            checkpoints: Counter::default(),
            // 4 KiB to 16 GiB.
            checkpoint_bytes: Histogram::new(exponential_buckets(4096.0, 4.0, 12)),
            checkpoint_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 17)),
            term: AtomicU64::new(0),
            leader: AtomicI64::new(0),
            placement: Family::default(),
        }))
    }
}

impl Counters {
    /// A message of `bytes` routed by this daemon: to a VP here (`local`)
    /// or on to another host.
    pub fn routed(&self, local: bool, bytes: usize) {
        let (n, b) = if local {
            (&self.0.messages_local, &self.0.bytes_local)
        } else {
            (&self.0.messages_remote, &self.0.bytes_remote)
        };
        n.fetch_add(1, Ordering::Relaxed);
        b.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// A VP left this host for another (or its disk): from the master's
    /// word to its image handed on, `took`.
    pub fn moved_out(&self, took: Duration) {
        self.0.moves_out.inc();
        self.0.move_seconds.observe(took.as_secs_f64());
    }

    /// A move of a VP off this host failed (it stays where it was).
    pub fn move_failed(&self) {
        self.0.moves_failed.inc();
    }

    /// A VP moved here runs.
    pub fn moved_in(&self) {
        self.0.moves_in.inc();
    }

    /// A VP here wrote a job checkpoint image of `bytes` in `took`.
    pub fn checkpoint(&self, bytes: u64, took: Duration) {
        self.0.checkpoints.inc();
        self.0.checkpoint_bytes.observe(bytes as f64);
        self.0.checkpoint_seconds.observe(took.as_secs_f64());
    }

    /// A message of the placements that travel between daemons went out:
    /// `kind` is `ask` or `bid` (bidding, nres), `rate_ask`,
    /// `rate_answer` or `give_away` (roc).
    pub fn placement_sent(&self, kind: &str) {
        self.0
            .placement
            .get_or_create(&labels(&[("kind", kind)]))
            .inc();
    }

    /// The consensus term this daemon follows, and whether it leads it.
    pub fn consensus(&self, term: u64, leader: bool) {
        self.0.term.store(term, Ordering::Relaxed);
        self.0.leader.store(i64::from(leader), Ordering::Relaxed);
    }

    /// Register this daemon's own figures.
    fn register(&self, r: &mut Registry) {
        let c = &self.0;
        let by_route = |local: &AtomicU64, remote: &AtomicU64| {
            let f = Family::<Vec<(String, String)>, Counter>::default();
            for (route, n) in [("local", local), ("remote", remote)] {
                f.get_or_create(&labels(&[("route", route)]))
                    .inc_by(n.load(Ordering::Relaxed));
            }
            f
        };
        r.register(
            "mig_messages_routed",
            "Messages this daemon routed: to a VP here (local) or on to another host (remote)",
            by_route(&c.messages_local, &c.messages_remote),
        );
        r.register(
            "mig_message_bytes_routed",
            "Bytes of the messages this daemon routed",
            by_route(&c.bytes_local, &c.bytes_remote),
        );
        r.register(
            "mig_moves_out",
            "VPs that left this host (for another, or parked on its disk)",
            c.moves_out.clone(),
        );
        r.register(
            "mig_moves_failed",
            "Moves of VPs off this host that failed (the VP stayed)",
            c.moves_failed.clone(),
        );
        r.register(
            "mig_moves_in",
            "VPs moved to this host that run here",
            c.moves_in.clone(),
        );
        r.register(
            "mig_move_seconds",
            "Time from the master's word to move a VP to its image handed on",
            c.move_seconds.clone(),
        );
        r.register(
            "mig_checkpoints",
            "Job checkpoint images VPs of this host wrote",
            c.checkpoints.clone(),
        );
        r.register(
            "mig_checkpoint_bytes",
            "Sizes of the job checkpoint images VPs of this host wrote",
            c.checkpoint_bytes.clone(),
        );
        r.register(
            "mig_checkpoint_seconds",
            "How long VPs of this host took to write a job checkpoint image",
            c.checkpoint_seconds.clone(),
        );
        r.register(
            "mig_placement_messages",
            "Messages of the placements that travel between daemons this daemon sent \
             (ask, bid: bidding and nres; rate_ask, rate_answer, give_away: roc)",
            c.placement.clone(),
        );
        let term = Gauge::<i64, AtomicI64>::default();
        term.set(i64::try_from(c.term.load(Ordering::Relaxed)).unwrap_or(i64::MAX));
        r.register(
            "mig_consensus_term",
            "The consensus term of the master this daemon follows",
            term,
        );
        let leader = Gauge::<i64, AtomicI64>::default();
        leader.set(c.leader.load(Ordering::Relaxed));
        r.register(
            "mig_consensus_leader",
            "1 if this daemon leads the consensus (it is the master)",
            leader,
        );
    }
}

fn labels(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// What a scrape shows of the virtual machine, as its master answers.
#[derive(Debug, Default)]
pub struct Cluster {
    /// `mig hosts`.
    pub hosts: Vec<HostInfo>,
    /// `mig ps`.
    pub vps: Vec<VpInfo>,
    /// `mig jobs`.
    pub jobs: Vec<JobInfo>,
    /// `mig stats`.
    pub stats: Option<StatsInfo>,
}

type Labelled = Family<Vec<(String, String)>, Gauge<f64, AtomicU64>>;

/// A gauge family filled from `(labels, value)` pairs; pairs with the same
/// labels add up.
fn gauges<'a>(items: impl IntoIterator<Item = (Vec<(&'a str, String)>, f64)>) -> Labelled {
    let mut sums: BTreeMap<Vec<(String, String)>, f64> = BTreeMap::new();
    for (l, v) in items {
        let l = l.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        *sums.entry(l).or_default() += v;
    }
    let f = Labelled::default();
    for (l, v) in sums {
        f.get_or_create(&l).set(v);
    }
    f
}

/// The word a state is counted under (`mig ps`'s state up to its first
/// space or parenthesis: `stopped (owner back ...)` is `stopped`).
fn state_word(s: &str) -> String {
    s.split([' ', '(', ':'])
        .next()
        .filter(|w| !w.is_empty())
        .unwrap_or("unknown")
        .to_string()
}

fn owner_word(s: &OwnerState) -> String {
    state_word(&format!("{s:?}").to_lowercase())
}

impl Cluster {
    /// Register the virtual machine's figures.
    fn register(&self, r: &mut Registry) {
        let hosts = &self.hosts;
        r.register(
            "mig_hosts",
            "Hosts of the virtual machine: alive (answering heartbeats) or not",
            gauges(hosts.iter().map(|h| {
                let state = if h.alive { "alive" } else { "lost" };
                (vec![("state", state.to_string())], 1.0)
            })),
        );
        r.register(
            "mig_host_up",
            "1 if the host answers heartbeats",
            gauges(
                hosts
                    .iter()
                    .map(|h| (host(h), if h.alive { 1.0 } else { 0.0 })),
            ),
        );
        r.register(
            "mig_host_master",
            "1 on the master's host",
            gauges(
                hosts
                    .iter()
                    .map(|h| (host(h), f64::from(u8::from(h.master)))),
            ),
        );
        r.register(
            "mig_host_voter",
            "1 on a host that keeps the master's replicated state",
            gauges(
                hosts
                    .iter()
                    .map(|h| (host(h), f64::from(u8::from(h.voter)))),
            ),
        );
        r.register(
            "mig_host_processors",
            "Processors each host has",
            gauges(
                hosts
                    .iter()
                    .map(|h| (host(h), f64::from(h.facts.processors))),
            ),
        );
        r.register(
            "mig_processors_offered",
            "Processors of hosts alive and offered to VPs by their owners",
            gauges(std::iter::once((
                vec![],
                hosts
                    .iter()
                    .filter(|h| h.alive && h.facts.offered)
                    .map(|h| f64::from(h.facts.processors))
                    .sum(),
            ))),
        );
        r.register(
            "mig_host_vps",
            "VPs running on each host",
            gauges(hosts.iter().map(|h| (host(h), f64::from(h.vps)))),
        );
        r.register(
            "mig_host_owner",
            "Each host's owner state (1 for the state it is in)",
            gauges(hosts.iter().filter_map(|h| {
                let o = h.owner.as_ref()?;
                let mut l = host(h);
                l.push(("state", owner_word(&o.state)));
                Some((l, 1.0))
            })),
        );
        r.register(
            "mig_host_free_memory_bytes",
            "Memory available on each host at its last report",
            gauges(
                hosts
                    .iter()
                    .filter_map(|h| Some((host(h), h.free_memory_mb? as f64 * 1024.0 * 1024.0))),
            ),
        );
        r.register(
            "mig_host_state_free_bytes",
            "Space free in each host's state directory at its last report",
            gauges(
                hosts
                    .iter()
                    .filter_map(|h| Some((host(h), h.state_free_mb? as f64 * 1024.0 * 1024.0))),
            ),
        );
        r.register(
            "mig_vps",
            "VPs by state, as mig ps says it",
            gauges(
                self.vps
                    .iter()
                    .map(|v| (vec![("state", state_word(&v.state))], 1.0)),
            ),
        );
        r.register(
            "mig_jobs",
            "Jobs by state, as mig jobs says it",
            gauges(
                self.jobs
                    .iter()
                    .map(|j| (vec![("state", state_word(&j.state))], 1.0)),
            ),
        );
        if let Some(s) = &self.stats {
            self.register_stats(r, s);
        }
    }

    fn register_stats(&self, r: &mut Registry, s: &StatsInfo) {
        r.register(
            "mig_slots",
            "Time slots per round of the gang schedule",
            gauges(std::iter::once((vec![], f64::from(s.slots)))),
        );
        r.register(
            "mig_quantum_seconds",
            "Length of a time slot (0: slicing off)",
            gauges(std::iter::once((vec![], s.quantum_ms / 1000.0))),
        );
        let quantiles = |v: [f64; 3]| {
            [("0.5", v[0]), ("0.99", v[1]), ("1", v[2])]
                .into_iter()
                .map(|(q, ms)| (q, ms / 1000.0))
        };
        r.register(
            "mig_switch_late_seconds",
            "How late each host's recent slot switches began (quantile 1: the latest)",
            gauges(s.hosts.iter().flat_map(|h| {
                quantiles(h.late_ms).map(|(q, v)| {
                    (
                        vec![("host", h.host.clone()), ("quantile", q.to_string())],
                        v,
                    )
                })
            })),
        );
        r.register(
            "mig_switch_lost_ratio",
            "Time lost to slot switching, as a fraction of the time covered",
            gauges(
                s.hosts
                    .iter()
                    .map(|h| (vec![("host", h.host.clone())], h.lost)),
            ),
        );
        r.register(
            "mig_switch_skew_seconds",
            "How far apart hosts switched at the same slot boundary",
            gauges(quantiles(s.skew_ms).map(|(q, v)| (vec![("quantile", q.to_string())], v))),
        );
        r.register(
            "mig_loop_turn_longest_seconds",
            "Each daemon's longest loop turn in its recent window",
            gauges(s.loop_turns.iter().map(|t| {
                (
                    vec![("host", t.host.clone())],
                    t.turns.window_longest_us as f64 / 1e6,
                )
            })),
        );
        r.register(
            "mig_loop_turn_p99_seconds",
            "The loop turn 99% of each daemon's recent turns took no longer than",
            gauges(s.loop_turns.iter().map(|t| {
                (
                    vec![("host", t.host.clone())],
                    t.turns.window_p99_us as f64 / 1e6,
                )
            })),
        );
    }
}

fn host(h: &HostInfo) -> Vec<(&'static str, String)> {
    vec![("host", h.facts.name.clone())]
}

/// The page a scrape gets: this daemon's counters, `up`, and, from the
/// master, the virtual machine's figures.
pub fn page(name: &str, counters: &Counters, cluster: Option<&Cluster>) -> String {
    let mut r = Registry::default();
    counters.register(&mut r);
    let info = Family::<Vec<(String, String)>, Gauge<i64, AtomicI64>>::default();
    info.get_or_create(&labels(&[
        ("host", name),
        ("version", env!("CARGO_PKG_VERSION")),
    ]))
    .set(1);
    r.register(
        "mig_daemon",
        "This daemon: its host name and mig's version",
        info,
    );
    let master = Gauge::<i64, AtomicI64>::default();
    master.set(i64::from(cluster.is_some()));
    r.register(
        "mig_master",
        "1 if this daemon is the master (it alone serves the mig_hosts..., mig_vps and mig_jobs figures)",
        master,
    );
    if let Some(c) = cluster {
        c.register(&mut r);
    }
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = encode(&mut out, &r);
    out
}

/// How a scrape reaches this daemon's figures.
#[derive(Debug, Clone)]
pub struct Source {
    /// This host's name.
    pub name: String,
    /// The daemon's counters.
    pub counters: Counters,
    /// Its control socket (to ask for the virtual machine's figures).
    pub control: PathBuf,
}

/// How long a scrape waits for the daemon's answers.
const ASK_TIMEOUT: Duration = Duration::from_secs(5);

impl Source {
    /// The virtual machine's figures when this daemon is the master (its
    /// own answer says so); `None` on a worker or when it does not answer.
    fn cluster(&self) -> Option<Cluster> {
        let mut c = libmig::control::Client::connect(&self.control).ok()?;
        let mut ask = |req: Request| {
            c.send(&req).ok()?;
            c.recv(Some(ASK_TIMEOUT)).ok()
        };
        let Some(Response::Hosts(hosts)) = ask(Request::Hosts) else {
            return None;
        };
        if !hosts.iter().any(|h| h.master && h.facts.name == self.name) {
            return None;
        }
        let vps = if let Some(Response::Ps(v)) = ask(Request::Ps) {
            v
        } else {
            Vec::new()
        };
        let jobs = if let Some(Response::Jobs(j)) = ask(Request::Jobs) {
            j
        } else {
            Vec::new()
        };
        let stats = if let Some(Response::Stats(s)) = ask(Request::Stats) {
            Some(s)
        } else {
            None
        };
        Some(Cluster {
            hosts,
            vps,
            jobs,
            stats,
        })
    }
}

/// Where the metrics are served and who may read them.
#[derive(Debug, Clone)]
pub struct Serve {
    /// The address to listen on.
    pub addr: SocketAddr,
    /// A bearer token scrapes must give (`Authorization: Bearer ...`).
    pub token: Option<String>,
}

/// Most bytes of a request's head that are read.
const HEAD_MAX: usize = 8 * 1024;
/// How long a client may take to send its request or read the answer.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

/// Listen on `serve.addr` and answer scrapes on a thread of its own, for
/// the daemon's life. Returns the bound address.
pub fn start(serve: &Serve, source: Source) -> io::Result<SocketAddr> {
    let listener = TcpListener::bind(serve.addr)?;
    let addr = listener.local_addr()?;
    let token = serve.token.clone();
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || {
            for conn in listener.incoming() {
                match conn {
                    Ok(s) => {
                        if let Err(e) = answer(s, token.as_deref(), &source) {
                            crate::debug!("metrics: a scrape broke off: {e}");
                        }
                    }
                    Err(e) => {
                        crate::warn!("metrics: accepting a scrape: {e}");
                        std::thread::sleep(Duration::from_millis(100));
                    }
                }
            }
        })?;
    Ok(addr)
}

/// What a request asked, once its head is read.
#[derive(Debug, PartialEq, Eq)]
pub enum Asked {
    /// `GET /metrics` (with the token, where one is set).
    Metrics,
    /// Another path.
    NotFound,
    /// Another method than GET or HEAD.
    Method,
    /// No token or the wrong one.
    Unauthorized,
    /// Not an HTTP request.
    Bad,
}

/// Read a request's head (`head`: the bytes up to the blank line) and
/// decide what it asked.
pub fn asked(head: &[u8], token: Option<&str>) -> Asked {
    let Ok(text) = std::str::from_utf8(head) else {
        return Asked::Bad;
    };
    let mut lines = text.split("\r\n");
    let mut first = lines.next().unwrap_or("").split(' ');
    let (Some(method), Some(target), Some(version)) = (first.next(), first.next(), first.next())
    else {
        return Asked::Bad;
    };
    if !version.starts_with("HTTP/1.") || first.next().is_some() {
        return Asked::Bad;
    }
    if method != "GET" && method != "HEAD" {
        return Asked::Method;
    }
    let path = target.split('?').next().unwrap_or("");
    if path != "/metrics" {
        return Asked::NotFound;
    }
    let Some(token) = token else {
        return Asked::Metrics;
    };
    let given = lines.find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case("authorization")
            .then(|| v.trim())
    });
    match given.and_then(|v| v.strip_prefix("Bearer ")) {
        Some(t) if same(t.trim().as_bytes(), token.as_bytes()) => Asked::Metrics,
        _ => Asked::Unauthorized,
    }
}

/// Equal, in a time that does not tell how much of the token was right.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

fn answer(mut s: TcpStream, token: Option<&str>, source: &Source) -> io::Result<()> {
    s.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    s.set_write_timeout(Some(CLIENT_TIMEOUT))?;
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    let asked = loop {
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            break asked(&head[..end], token);
        }
        if head.len() > HEAD_MAX {
            break Asked::Bad;
        }
        let n = s.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    };
    let head_only = head.starts_with(b"HEAD ");
    let (status, kind, body) = match asked {
        Asked::Metrics => {
            let cluster = source.cluster();
            (
                "200 OK",
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                page(&source.name, &source.counters, cluster.as_ref()),
            )
        }
        Asked::NotFound => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "mig's metrics are at /metrics\n".to_string(),
        ),
        Asked::Method => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "only GET\n".to_string(),
        ),
        Asked::Unauthorized => (
            "401 Unauthorized",
            "text/plain; charset=utf-8",
            "give the metrics token: Authorization: Bearer TOKEN\n".to_string(),
        ),
        Asked::Bad => (
            "400 Bad Request",
            "text/plain; charset=utf-8",
            "not an HTTP request\n".to_string(),
        ),
    };
    let mut reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if asked == Asked::Unauthorized {
        reply.push_str("WWW-Authenticate: Bearer\r\n");
    }
    reply.push_str("\r\n");
    if !head_only {
        reply.push_str(&body);
    }
    s.write_all(reply.as_bytes())?;
    s.flush()?;
    // What the client still sends is read and dropped for a moment before
    // the socket closes: closed with unread bytes, it would be reset, and
    // the client could lose the answer.
    s.shutdown(std::net::Shutdown::Write)?;
    s.set_read_timeout(Some(Duration::from_millis(500)))?;
    let mut left = HEAD_MAX * 8;
    while left > 0 {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => left = left.saturating_sub(n),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_read_for_its_path_method_and_token() {
        let get = |extra: &str| format!("GET /metrics HTTP/1.1\r\nHost: x{extra}");
        assert_eq!(asked(get("").as_bytes(), None), Asked::Metrics);
        assert_eq!(
            asked(b"GET /metrics?x=1 HTTP/1.0\r\nHost: x", None),
            Asked::Metrics
        );
        assert_eq!(asked(b"GET / HTTP/1.1", None), Asked::NotFound);
        assert_eq!(asked(b"POST /metrics HTTP/1.1", None), Asked::Method);
        assert_eq!(asked(b"\x00\xff\x13 garbage", None), Asked::Bad);
        assert_eq!(asked(b"GET /metrics", None), Asked::Bad);
        assert_eq!(asked(b"GET /metrics SMTP/1.1", None), Asked::Bad);
        assert_eq!(
            asked(get("").as_bytes(), Some("s3cret")),
            Asked::Unauthorized
        );
        assert_eq!(
            asked(
                get("\r\nauthorization: Bearer s3cret").as_bytes(),
                Some("s3cret")
            ),
            Asked::Metrics
        );
        assert_eq!(
            asked(
                get("\r\nAuthorization: Bearer s3cre").as_bytes(),
                Some("s3cret")
            ),
            Asked::Unauthorized
        );
        assert_eq!(
            asked(
                get("\r\nAuthorization: Basic s3cret").as_bytes(),
                Some("s3cret")
            ),
            Asked::Unauthorized
        );
    }

    #[test]
    fn the_page_counts_what_the_daemon_did_and_the_masters_view() {
        let c = Counters::default();
        c.routed(true, 10);
        c.routed(true, 20);
        c.routed(false, 5);
        c.moved_out(Duration::from_millis(3));
        c.checkpoint(1 << 20, Duration::from_millis(40));
        c.consensus(7, true);
        let worker = page("h1", &c, None);
        for line in [
            "mig_messages_routed_total{route=\"local\"} 2",
            "mig_messages_routed_total{route=\"remote\"} 1",
            "mig_message_bytes_routed_total{route=\"local\"} 30",
            "mig_moves_out_total 1",
            "mig_move_seconds_count 1",
            "mig_checkpoint_bytes_sum 1048576.0",
            "mig_consensus_term 7",
            "mig_consensus_leader 1",
            "mig_master 0",
        ] {
            assert!(worker.lines().any(|l| l == line), "{line} in:\n{worker}");
        }
        assert!(
            !worker.lines().any(|l| l.starts_with("mig_hosts")),
            "a worker serves no figures of the whole machine:\n{worker}"
        );
        assert!(worker.ends_with("# EOF\n"));
    }

    #[test]
    fn states_are_counted_by_their_first_word() {
        assert_eq!(state_word("running"), "running");
        assert_eq!(state_word("stopped (owner back; its program)"), "stopped");
        assert_eq!(state_word("moving to h2"), "moving");
        assert_eq!(state_word(""), "unknown");
        let f = gauges([
            (vec![("state", "running".to_string())], 1.0),
            (vec![("state", "running".to_string())], 1.0),
            (vec![("state", "waiting".to_string())], 1.0),
        ]);
        let mut r = Registry::default();
        r.register("x", "x", f);
        let mut out = String::new();
        encode(&mut out, &r).expect("encode");
        assert!(out.contains("x{state=\"running\"} 2.0"), "{out}");
        assert!(out.contains("x{state=\"waiting\"} 1.0"), "{out}");
    }
}
