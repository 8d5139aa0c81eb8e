//! The multi-process cluster harness: node processes and their faults ([`cluster`]), a TCP
//! proxy that black-holes a node's database ([`proxy`]), a client that records histories
//! ([`client`]) and the checker that judges them ([`checker`]).

#![allow(
    dead_code,
    unreachable_pub,
    reason = "a module of the test binary; each scenario uses part of the harness"
)]

pub mod checker;
pub mod client;
pub mod cluster;
pub mod proxy;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use durable_runtime::cluster::shard_of;

use self::checker::{Kind, Outcome};
use self::client::{Client, Rng, counter_id};
use self::cluster::SHARDS;

/// Whether the full-size runs were asked for (`CHAOS_FULL=1`).
pub fn full_size() -> bool {
    std::env::var("CHAOS_FULL").is_ok_and(|value| !value.is_empty() && value != "0")
}

/// Whether every call with an unknown outcome and the harness's timings are printed
/// (`CHAOS_VERBOSE=1`).
pub fn verbose() -> bool {
    std::env::var_os("CHAOS_VERBOSE").is_some()
}

/// `ci` normally, `full` under `CHAOS_FULL=1`.
pub fn scaled(ci: u64, full: u64) -> u64 {
    if full_size() { full } else { ci }
}

/// The shard of counter `index`.
pub fn shard_of_counter(index: usize) -> u32 {
    shard_of("Counter", &counter_id(index), SHARDS)
}

/// The counters among `0..counters` whose shard `owners` gives to `node`.
pub fn counters_of(
    owners: &HashMap<u32, (String, i64)>,
    node: &str,
    counters: usize,
) -> Vec<usize> {
    (0..counters)
        .filter(|&counter| {
            owners
                .get(&shard_of_counter(counter))
                .is_some_and(|(owner, _)| owner == node)
        })
        .collect()
}

/// How many of a node's counters [`served_again`] times.
pub const PROBED: usize = 16;

/// Measures when the counters of `counters` are served again after `since` (a fault): for
/// each of the first [`PROBED`], a read is started through a random node of `nodes` every
/// 100 ms, without waiting for the earlier ones (a read sent to a frozen owner hangs until
/// the client's deadline), and the counter counts as served from the start of its first
/// acknowledged read. Returns the latest of those times; then checks that every other
/// counter of `counters` is served too. Fails the test after `deadline`.
pub async fn served_again(
    nodes: &[SocketAddr],
    counters: &[usize],
    since: Instant,
    deadline: Duration,
) -> Duration {
    // A client of its own: the probe's reads are no part of the load's figures.
    let client = Client::new(nodes.to_vec());
    let probes = counters.iter().take(PROBED).map(|&counter| {
        let client = client.clone();
        async move {
            let mut reads = tokio::task::JoinSet::new();
            let mut rng = Rng::new(counter as u64);
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            loop {
                tokio::select! {
                    _ = tick.tick() => {
                        assert!(
                            since.elapsed() < deadline,
                            "counter {counter} not served again within {deadline:?}"
                        );
                        let nodes = client.nodes();
                        let node = nodes[rng.below(nodes.len())];
                        let client = client.clone();
                        reads.spawn(async move {
                            let started = Instant::now();
                            let attempt = client.attempt(node, &counter_id(counter), "get", None).await;
                            (started, matches!(attempt, client::Attempt::Ok(_)))
                        });
                    }
                    Some(Ok((started, true))) = reads.join_next() => {
                        return started.saturating_duration_since(since);
                    }
                }
            }
        }
    });
    let mut times = futures_util::future::join_all(probes).await;
    times.sort_unstable();
    if verbose() {
        eprintln!("served again after {times:?}");
    }
    let latest = times.last().copied().unwrap_or_default();
    // A read is harmless: one cut off by the client's deadline is simply sent again.
    let mut rng = Rng::new(0x5EED);
    for &counter in counters.iter().skip(PROBED) {
        loop {
            assert!(
                since.elapsed() < deadline,
                "counter {counter} not served again within {deadline:?}"
            );
            let (outcome, ..) = client
                .call_handler(&mut rng, None, &counter_id(counter), "get", None)
                .await;
            if acknowledged(outcome) {
                break;
            }
        }
    }
    latest
}

/// Sends `depth` concurrent increments to each of `counters` at `node` (each call retried
/// elsewhere if refused, recorded like any other). Returns once the first is answered, the
/// others still in flight, or after `deadline` if none is.
pub async fn burst(
    client: &Client,
    node: SocketAddr,
    counters: &[usize],
    depth: usize,
) -> tokio::task::JoinSet<()> {
    let mut calls = tokio::task::JoinSet::new();
    for (n, &counter) in counters.iter().enumerate() {
        for k in 0..depth {
            let client = client.clone();
            calls.spawn(async move {
                let mut rng = Rng::new((n * 1000 + k) as u64);
                client
                    .call_via(&mut rng, Some(node), counter, Kind::Increment)
                    .await;
            });
        }
    }
    calls
}

/// The final check of a load run: every counter read, the history checked; panics with
/// every violation. Returns the checker's summary line.
pub async fn check_history(client: &Client, counters: usize) -> checker::Summary {
    let finals = client.finals(counters).await;
    let history = client.history();
    match checker::check(&history, &finals) {
        Ok(summary) => summary,
        Err(violations) => {
            let mut shown: Vec<String> = violations
                .iter()
                .take(20)
                .map(ToString::to_string)
                .collect();
            // The calls of the first counter read stale, in order, with the node each was sent to.
            if let Some(checker::Violation::Stale { counter, .. }) = violations
                .iter()
                .find(|v| matches!(v, checker::Violation::Stale { .. }))
            {
                let origin = history.iter().map(|op| op.start).min().expect("a call");
                let mut ops: Vec<_> = history.iter().filter(|op| op.counter == *counter).collect();
                ops.sort_by_key(|op| op.start);
                for op in ops {
                    shown.push(format!(
                        "  {:?}..{:?} {:?} {:?} via {:?}",
                        op.start - origin,
                        op.end - origin,
                        op.kind,
                        op.outcome,
                        op.node
                    ));
                }
            }
            panic!(
                "the history of {} calls breaks {} rules:\n{}",
                history.len(),
                violations.len(),
                shown.join("\n")
            );
        }
    }
}

/// Whether an outcome was acknowledged.
pub fn acknowledged(outcome: Outcome) -> bool {
    matches!(outcome, Outcome::Ok(_))
}

/// Prints one scenario's figures in a fixed form, to be quoted.
pub fn summary(scenario: &str, client: &Client, checked: &checker::Summary, extra: &str) {
    println!(
        "[chaos] {scenario}: {}; history: {} increments acknowledged, {} unknown, {} gave up, \
         {} reads; {extra}",
        client.stats.line(),
        checked.acknowledged,
        checked.unknown,
        checked.failed,
        checked.reads,
    );
}
