//! The harness's client: calls `Counter` handlers through the public gateway of random nodes,
//! classifies every answer, and records the history the checker reads.
//!
//! An attempt ends in one of three ways. Acknowledged: `200` and the JSON reply. Nothing
//! applied: the connection was refused, the node answered `421 Misdirected Request`, or an
//! error body says `"retryable": true` (`unavailable` while a shard moves, `shutting_down`,
//! `overloaded`, `conflict`) — the call is sent again, to another random node, until its
//! budget runs out. Unknown: anything else (`504 timeout`, `outcome_unknown`, a connection
//! reset after the request went out, no answer within the call deadline) — the call may have
//! been applied, so it is never retried; the checker counts it as maybe applied.
//!
//! A node draining on shutdown answers `503 shutting_down` with `Connection: close`: the
//! client then sends nothing more to it, as a load balancer takes a node out once it stops
//! being ready (the node closes its listener after its drain).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::checker::{Kind, Op, Outcome};

/// How long one attempt may take before the client gives up on it (outcome unknown).
pub const CALL_DEADLINE: Duration = Duration::from_secs(3);
/// How long a call keeps retrying attempts that applied nothing.
pub const CALL_BUDGET: Duration = Duration::from_secs(15);
/// How many final reads run at once.
const FINAL_READS_AT_ONCE: usize = 8;

/// How one attempt ended.
#[derive(Debug)]
pub enum Attempt {
    /// `200`, with the reply.
    Ok(Value),
    /// Refused with nothing applied (the reason, for the log).
    NotApplied(String),
    /// Refused with nothing applied by a node that is shutting down.
    Draining,
    /// Maybe applied.
    Unknown(String),
}

/// Counts over a run, by attempt and by call.
#[derive(Debug, Default)]
pub struct Stats {
    /// Calls acknowledged.
    pub ok: AtomicU64,
    /// Attempts refused with nothing applied (each was retried, or its call gave up).
    pub retryable: AtomicU64,
    /// Calls with an unknown outcome.
    pub unknown: AtomicU64,
    /// Calls that gave up after their budget, nothing applied.
    pub failed: AtomicU64,
    /// Attempts refused by a draining node (a subset of the refused ones).
    pub draining: AtomicU64,
    /// Attempts cut off by [`CALL_DEADLINE`] (a subset of the unknown ones).
    pub timeouts: AtomicU64,
    /// The longest refused attempt, in microseconds: how fast failures are.
    pub slowest_refusal_us: AtomicU64,
}

impl Stats {
    fn refused(&self, took: Duration) {
        self.retryable.fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.slowest_refusal_us.fetch_max(micros, Ordering::Relaxed);
    }

    /// One line for the scenario's summary.
    pub fn line(&self) -> String {
        format!(
            "calls ok {} / retryable refusals {} (draining {}) / unknown {} (timeouts {}) / \
             gave up {}; slowest refusal {:?}",
            self.ok.load(Ordering::Relaxed),
            self.retryable.load(Ordering::Relaxed),
            self.draining.load(Ordering::Relaxed),
            self.unknown.load(Ordering::Relaxed),
            self.timeouts.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
            Duration::from_micros(self.slowest_refusal_us.load(Ordering::Relaxed)),
        )
    }
}

/// A small, seedable random source (xorshift64*): the harness needs no quality, only spread.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (any value).
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// A number below `n`.
    pub fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let value = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11;
        usize::try_from(value % n as u64).unwrap_or(0)
    }
}

/// The id of counter `index`.
pub fn counter_id(index: usize) -> String {
    format!("c{index}")
}

/// Calls nodes of one cluster.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    nodes: Arc<Mutex<Vec<SocketAddr>>>,
    /// What every call did.
    pub stats: Arc<Stats>,
    history: Arc<Mutex<Vec<Op>>>,
}

impl Client {
    /// A client of the nodes at `nodes`.
    pub fn new(nodes: Vec<SocketAddr>) -> Self {
        let http = reqwest::Client::builder()
            // A connection per request: a refused connection then always means "not sent",
            // never a pooled connection the server closed under a request.
            .pool_max_idle_per_host(0)
            .timeout(CALL_DEADLINE)
            .build()
            .expect("HTTP client");
        Self {
            http,
            nodes: Arc::new(Mutex::new(nodes)),
            stats: Arc::default(),
            history: Arc::default(),
        }
    }

    /// Makes `address` one of the nodes calls go to.
    pub fn add_node(&self, address: SocketAddr) {
        self.nodes.lock().expect("nodes").push(address);
    }

    /// Sends nothing more to `address` (unless it is the last node).
    pub fn forget_node(&self, address: SocketAddr) {
        let mut nodes = self.nodes.lock().expect("nodes");
        if nodes.len() > 1 {
            nodes.retain(|node| *node != address);
        }
    }

    /// The nodes calls go to.
    pub fn nodes(&self) -> Vec<SocketAddr> {
        self.nodes.lock().expect("nodes").clone()
    }

    /// One attempt: `handler` of counter `id` at `node`, with `args` as its JSON body.
    pub async fn attempt(
        &self,
        node: SocketAddr,
        id: &str,
        handler: &str,
        args: Option<&Value>,
    ) -> Attempt {
        let url = format!("http://{node}/v1/objects/Counter/{id}/call/{handler}");
        let mut request = self.http.post(url);
        if let Some(args) = args {
            request = request.json(args);
        }
        let response = match request.send().await {
            Ok(response) => response,
            Err(error) if error.is_connect() => return Attempt::NotApplied(error.to_string()),
            Err(error) => {
                if error.is_timeout() {
                    self.stats.timeouts.fetch_add(1, Ordering::Relaxed);
                }
                return Attempt::Unknown(error_chain(&error));
            }
        };
        let status = response.status().as_u16();
        let closing = response
            .headers()
            .get(reqwest::header::CONNECTION)
            .is_some_and(|value| value == "close");
        let body = match response.bytes().await {
            Ok(body) => body,
            Err(error) => {
                if error.is_timeout() {
                    self.stats.timeouts.fetch_add(1, Ordering::Relaxed);
                }
                return Attempt::Unknown(format!("{status}, body cut: {}", error_chain(&error)));
            }
        };
        let value: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        match status {
            // `{"result": <the handler's output>}`
            200 => Attempt::Ok(value["result"].clone()),
            421 => Attempt::NotApplied("421 misdirected".to_owned()),
            503 if closing && value["error"]["code"] == "shutting_down" => Attempt::Draining,
            _ if value["error"]["retryable"] == Value::Bool(true) => {
                Attempt::NotApplied(format!("{status} {}", value["error"]["code"]))
            }
            _ => Attempt::Unknown(format!("{status} {value}")),
        }
    }

    /// One call: attempts at random nodes until one is acknowledged or unknown, or the
    /// budget runs out. Recorded in the history when `counter` is given.
    pub async fn call(
        &self,
        rng: &mut Rng,
        counter: usize,
        kind: Kind,
    ) -> (Outcome, Option<Value>) {
        self.call_via(rng, None, counter, kind).await
    }

    /// [`call`](Self::call), its first attempt sent to `first` if given.
    pub async fn call_via(
        &self,
        rng: &mut Rng,
        first: Option<SocketAddr>,
        counter: usize,
        kind: Kind,
    ) -> (Outcome, Option<Value>) {
        let id = counter_id(counter);
        let handler = match kind {
            Kind::Increment => "increment",
            Kind::Read => "get",
        };
        let (outcome, reply, start, end, node) =
            self.call_handler(rng, first, &id, handler, None).await;
        let outcome = match (outcome, &reply) {
            (Outcome::Ok(_), Some(value)) => Outcome::Ok(
                value
                    .as_u64()
                    .unwrap_or_else(|| panic!("{handler} of {id} returned {value}, not a count")),
            ),
            (outcome, _) => outcome,
        };
        self.history.lock().expect("history").push(Op {
            counter,
            kind,
            start,
            end,
            outcome,
            node: Some(node),
        });
        (outcome, reply)
    }

    /// Calls `handler` of counter `id` with `args` like [`call`](Self::call), unrecorded.
    /// Returns the outcome (`Ok(0)` for any acknowledged reply), the reply, and when the
    /// answered attempt started and ended, and the node it was sent to.
    pub async fn call_handler(
        &self,
        rng: &mut Rng,
        mut first: Option<SocketAddr>,
        id: &str,
        handler: &str,
        args: Option<&Value>,
    ) -> (Outcome, Option<Value>, Instant, Instant, SocketAddr) {
        let began = Instant::now();
        let mut pause = Duration::from_millis(10);
        loop {
            let nodes = self.nodes();
            let node = first
                .take()
                .unwrap_or_else(|| nodes[rng.below(nodes.len())]);
            let start = Instant::now();
            let attempt = self.attempt(node, id, handler, args).await;
            let end = Instant::now();
            match attempt {
                Attempt::Ok(value) => {
                    self.stats.ok.fetch_add(1, Ordering::Relaxed);
                    return (Outcome::Ok(0), Some(value), start, end, node);
                }
                Attempt::Unknown(why) => {
                    self.stats.unknown.fetch_add(1, Ordering::Relaxed);
                    tracing_line(&format!("{handler} {id} at {node}: unknown: {why}"));
                    return (Outcome::Unknown, None, start, end, node);
                }
                Attempt::NotApplied(_) | Attempt::Draining => {
                    if matches!(attempt, Attempt::Draining) {
                        self.stats.draining.fetch_add(1, Ordering::Relaxed);
                        self.forget_node(node);
                    }
                    self.stats.refused(end - start);
                    if began.elapsed() > CALL_BUDGET {
                        self.stats.failed.fetch_add(1, Ordering::Relaxed);
                        return (Outcome::Failed, None, start, end, node);
                    }
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(200));
                }
            }
        }
    }

    /// The history recorded so far.
    pub fn history(&self) -> Vec<Op> {
        self.history.lock().expect("history").clone()
    }

    /// Reads the final value of counters `0..counters`, each from a call started after
    /// everything else ended, a few at a time. Fails the test if one cannot be read within
    /// its budget.
    pub async fn finals(&self, counters: usize) -> Vec<u64> {
        use futures_util::StreamExt;
        futures_util::stream::iter(0..counters)
            .map(|counter| async move {
                let mut rng = Rng::new(0xF1_4A15 + counter as u64);
                let id = counter_id(counter);
                let (outcome, reply, ..) =
                    self.call_handler(&mut rng, None, &id, "get", None).await;
                match (outcome, reply) {
                    (Outcome::Ok(_), Some(value)) => value.as_u64().expect("a count"),
                    (outcome, _) => panic!("final read of {id}: {outcome:?}"),
                }
            })
            .buffered(FINAL_READS_AT_ONCE)
            .collect()
            .await
    }

    /// GETs `path` from `node`: the body, or `None` if the node does not answer.
    pub async fn get_text(&self, node: SocketAddr, path: &str) -> Option<String> {
        let response = self
            .http
            .get(format!("http://{node}{path}"))
            .send()
            .await
            .ok()?;
        response.text().await.ok()
    }
}

/// The error and its causes: reqwest's own message says little ("error sending request").
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// Unknown outcomes are rare and each worth seeing when a scenario is debugged.
fn tracing_line(line: &str) {
    if super::verbose() {
        eprintln!("{line}");
    }
}

/// Load: `workers` tasks calling random counters (`reads` in 10 a read, the rest increments)
/// until stopped or `limit` calls were made.
pub struct Load {
    stop: Arc<AtomicBool>,
    workers: Vec<tokio::task::JoinHandle<()>>,
    /// Calls made so far.
    pub issued: Arc<AtomicU64>,
}

impl Load {
    /// Starts the load.
    pub fn start(
        client: &Client,
        counters: usize,
        workers: usize,
        reads: usize,
        limit: u64,
    ) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let issued = Arc::new(AtomicU64::new(0));
        let workers = (0..workers)
            .map(|worker| {
                let (client, stop, issued) =
                    (client.clone(), Arc::clone(&stop), Arc::clone(&issued));
                tokio::spawn(async move {
                    let mut rng = Rng::new(worker as u64 + 1);
                    while !stop.load(Ordering::Relaxed)
                        && issued.fetch_add(1, Ordering::Relaxed) < limit
                    {
                        let counter = rng.below(counters);
                        let kind = if rng.below(10) < reads {
                            Kind::Read
                        } else {
                            Kind::Increment
                        };
                        client.call(&mut rng, counter, kind).await;
                    }
                })
            })
            .collect();
        Self {
            stop,
            workers,
            issued,
        }
    }

    /// Waits for the load to reach its limit, failing the test after `deadline`.
    pub async fn finish(self, deadline: Duration) {
        let all = futures_util::future::join_all(self.workers);
        tokio::time::timeout(deadline, all)
            .await
            .unwrap_or_else(|_| panic!("the load did not finish within {deadline:?}"));
    }

    /// Stops the load and waits for the calls in flight (each bounded by its budget).
    pub async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.finish(CALL_BUDGET + CALL_DEADLINE * 2).await;
    }
}

/// The sum of the samples of metric `name` in a Prometheus text page, over the series whose
/// labels contain `label` (all when empty).
pub fn metric(page: &str, name: &str, label: &str) -> f64 {
    page.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (metric, labels) = series.split_once('{').unwrap_or((series, ""));
            (metric == name && labels.contains(label)).then(|| value.parse::<f64>().ok())?
        })
        .sum()
}
