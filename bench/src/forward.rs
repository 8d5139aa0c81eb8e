//! `forward` (Postgres only, outside `all`): calls by name through a two-node cluster in this
//! process, to objects the called node serves (local) next to objects the other node serves
//! (forwarded over HTTP/2 to its internal listener on a loopback port).
//!
//! Both nodes share one fresh schema; each has its own store and internal listener. One
//! caller calls `increment` on node `a` over 1,000 objects of each kind, one call at a time,
//! so the difference of the medians is what a forward adds to a call when nothing else waits.
//! Each run measures local calls, then forwarded ones by name, then forwarded typed calls
//! (`BenchCounter::increment(&rt, id)`, which encode their arguments and decode their reply
//! themselves).

use std::time::{Duration, Instant};

use durable_runtime::Runtime;
use durable_runtime::cluster::Route;
use durable_server::cluster::{ClusterSecret, ClusterSettings};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::objects::BenchCounter;
use crate::report::{Figure, MedianLatency, median};
use crate::{BackendKind, Settings};

/// Objects of each kind (local, forwarded) the caller picks from in turn.
const OBJECTS: usize = 1_000;
/// The cluster's shard count.
const SHARDS: u32 = 64;
/// How long the two nodes may take to split the shards.
const SETTLE: Duration = Duration::from_secs(30);

/// The figures `forward-local-1`, `forward-remote-1` and `forward-typed-remote-1`.
pub(crate) async fn forward(settings: &Settings) -> Result<Vec<Figure>, String> {
    if settings.backend != BackendKind::Postgres {
        return Err("the forward scenario runs on --backend postgres only".into());
    }
    let backend = settings.backend.name();
    let mut local = Figure::new("forward-local-1", backend, "calls/s");
    let mut local_latency = MedianLatency::default();
    let mut remote = Figure::new("forward-remote-1", backend, "calls/s");
    let mut remote_latency = MedianLatency::default();
    let mut typed = Figure::new("forward-typed-remote-1", backend, "calls/s");
    let mut typed_latency = MedianLatency::default();
    let (mut p50_overheads, mut p99_overheads) = (Vec::new(), Vec::new());
    let mut typed_p50_overheads = Vec::new();
    for _ in 0..settings.runs {
        let cluster = Cluster::start(settings).await?;
        let (local_ids, remote_ids) = cluster.split()?;
        let (rate, base) = sequential(&cluster.a, &local_ids, settings.secs, Via::Name).await?;
        local_latency.offer(&mut local, rate, base.clone());
        let (rate, histogram) =
            sequential(&cluster.a, &remote_ids, settings.secs, Via::Name).await?;
        let us = |h: &hdrhistogram::Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        p50_overheads.push(us(&histogram, 0.5) - us(&base, 0.5));
        p99_overheads.push(us(&histogram, 0.99) - us(&base, 0.99));
        remote_latency.offer(&mut remote, rate, histogram);
        let (rate, histogram) =
            sequential(&cluster.a, &remote_ids, settings.secs, Via::Typed).await?;
        typed_p50_overheads.push(us(&histogram, 0.5) - us(&base, 0.5));
        typed_latency.offer(&mut typed, rate, histogram);
        cluster.finish().await;
    }
    local_latency.finish(&mut local);
    remote_latency.finish(&mut remote);
    typed_latency.finish(&mut typed);
    remote.extra.extend([
        ("p50 overhead µs", median(&mut p50_overheads)),
        ("p99 overhead µs", median(&mut p99_overheads)),
    ]);
    typed
        .extra
        .push(("p50 overhead µs", median(&mut typed_p50_overheads)));
    Ok(vec![local, remote, typed])
}

/// Two nodes on one schema, each serving its internal listener.
struct Cluster {
    a: Runtime,
    b: Runtime,
    opened: Vec<crate::scenarios::Opened>,
    servers: Vec<Server>,
}

/// A node's listeners, served until `stop`.
type Server = (
    CancellationToken,
    tokio::task::JoinHandle<std::io::Result<()>>,
);

impl Cluster {
    async fn start(settings: &Settings) -> Result<Self, String> {
        let first = crate::scenarios::open(settings).await?;
        let second = crate::scenarios::reopen(&first).await?;
        let mut nodes = Vec::new();
        let mut servers = Vec::new();
        for (name, opened) in [("a", &first), ("b", &second)] {
            let internal = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .map_err(|e| e.to_string())?;
            let address = internal.local_addr().map_err(|e| e.to_string())?;
            let mut cluster =
                ClusterSettings::new(name, address, ClusterSecret::new("bench secret"));
            cluster.node.shards = SHARDS;
            cluster.node.lease_ttl = Duration::from_secs(2);
            let builder =
                Runtime::builder(std::sync::Arc::clone(&opened.store)).expose::<BenchCounter>();
            let rt = durable_server::cluster::join(builder, &cluster)
                .await
                .map_err(|e| e.to_string())?;
            let public = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .map_err(|e| e.to_string())?;
            let config = durable_server::ServerConfig {
                cluster: Some(cluster),
                ..durable_server::ServerConfig::default()
            };
            let stop = CancellationToken::new();
            servers.push((
                stop.clone(),
                tokio::spawn(durable_server::serve_cluster_with_shutdown(
                    rt.clone(),
                    config,
                    public,
                    internal,
                    stop.cancelled_owned(),
                )),
            ));
            nodes.push(rt);
        }
        let b = nodes.pop().ok_or("two nodes")?;
        let a = nodes.pop().ok_or("two nodes")?;
        let cluster = Self {
            a,
            b,
            opened: vec![first, second],
            servers,
        };
        cluster.settle().await?;
        Ok(cluster)
    }

    /// Waits until each node serves shards and knows the other's.
    async fn settle(&self) -> Result<(), String> {
        let started = Instant::now();
        loop {
            let served = |rt: &Runtime| rt.serving_shards().map_or(0, |s| s.len());
            let (a, b) = (served(&self.a), served(&self.b));
            let known = (0..200).all(|i| {
                let id = format!("c{i}");
                matches!(
                    (
                        self.a.route("BenchCounter", &id),
                        self.b.route("BenchCounter", &id)
                    ),
                    (Route::Local, Route::Remote(_)) | (Route::Remote(_), Route::Local)
                )
            });
            if a > 0 && b > 0 && a + b == SHARDS as usize && known {
                return Ok(());
            }
            if started.elapsed() > SETTLE {
                return Err("the two nodes did not split the shards in time".into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// `OBJECTS` ids node `a` serves, and as many it forwards to `b`.
    fn split(&self) -> Result<(Vec<String>, Vec<String>), String> {
        let (mut local, mut remote) = (Vec::new(), Vec::new());
        for i in 0.. {
            if local.len() >= OBJECTS && remote.len() >= OBJECTS {
                break;
            }
            let id = format!("c{i}");
            match self.a.route("BenchCounter", &id) {
                Route::Local if local.len() < OBJECTS => local.push(id),
                Route::Remote(_) if remote.len() < OBJECTS => remote.push(id),
                Route::Unavailable => return Err("a shard is between owners".into()),
                _ => {}
            }
        }
        Ok((local, remote))
    }

    async fn finish(self) {
        // Stopping each server shuts its runtime down.
        for (stop, server) in self.servers {
            stop.cancel();
            let _ = server.await;
        }
        for opened in self.opened {
            opened.close().await;
        }
    }
}

/// How the caller calls.
#[derive(Clone, Copy)]
enum Via {
    /// `Runtime::call_by_name`.
    Name,
    /// The typed client.
    Typed,
}

/// One caller calling `increment` on `ids` in turn, one call at a time, for `duration`.
async fn sequential(
    rt: &Runtime,
    ids: &[String],
    duration: Duration,
    via: Via,
) -> Result<(f64, hdrhistogram::Histogram<u64>), String> {
    let mut histogram = crate::report::histogram();
    let started = Instant::now();
    let mut done = 0u64;
    while started.elapsed() < duration {
        let id = &ids[done as usize % ids.len()];
        let sent = Instant::now();
        match via {
            Via::Name => rt
                .call_by_name("BenchCounter", id, "increment", json!({}))
                .await
                .map(drop)
                .map_err(|e| format!("increment of {id}: {e}"))?,
            Via::Typed => BenchCounter::increment(rt, id)
                .await
                .map(drop)
                .map_err(|e| format!("typed increment of {id}: {e}"))?,
        }
        histogram.saturating_record(sent.elapsed().as_nanos() as u64);
        done += 1;
    }
    Ok((done as f64 / started.elapsed().as_secs_f64(), histogram))
}
