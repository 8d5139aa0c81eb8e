//! `gateway`: calls through the HTTP gateway next to the same calls in process.
//!
//! Callers over 1,000 objects, each caller on its own keep-alive HTTP/1.1 connection to a
//! gateway on a loopback port with token authorization, every request a `POST
//! /v1/objects/BenchCounter/{id}/call/increment`. Each run first drives the same calls in
//! process on a fresh store (the baseline), then through the gateway on another fresh store,
//! so the overhead is measured against a same-work figure of the same run. Client and server
//! share the machine's cores, as a sidecar or a local client would.
//!
//! Three shapes: 64 callers as fast as they can (`gateway-64`: throughput, where both sides
//! are saturated and latency is in-flight calls over throughput); 64 callers paced to 10,000
//! calls/s in all (`gateway-64-at-10k`: the latency at the same offered load on both sides,
//! measured from when each call was due, so a side that falls behind pays for it); and one
//! caller (`gateway-1`: what a call pays for crossing HTTP when nothing else waits).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::Settings;
use crate::objects::BenchCounter;
use crate::report::{Figure, MedianLatency, median};
use crate::scenarios::{CallRun, Op, drive};

/// Objects the callers pick from at random.
const OBJECTS: usize = 1_000;
/// The bearer token of the run; the gateway knows only its hash.
const TOKEN: &str = "bench-token";

/// The offered load of `gateway-64-at-10k`, in calls per second.
const PACED_RATE: f64 = 10_000.0;

/// The gateway figures, each next to its in-process twin.
pub(crate) async fn gateway(settings: &Settings) -> Result<Vec<Figure>, String> {
    let mut figures = compare(settings, "64", 64, None).await?;
    let interval = Duration::from_secs_f64(64.0 / PACED_RATE);
    figures.extend(compare(settings, "64-at-10k", 64, Some(interval)).await?);
    figures.extend(compare(settings, "1", 1, None).await?);
    Ok(figures)
}

/// `callers` callers in process, then through the gateway, run by run; each caller sends a
/// call every `pace` if given, else as soon as the last one returned.
async fn compare(
    settings: &Settings,
    label: &str,
    callers: usize,
    pace: Option<Duration>,
) -> Result<Vec<Figure>, String> {
    let backend = settings.backend.name();
    let mut inproc = Figure::new(format!("gateway-inproc-{label}"), backend, "calls/s");
    let mut inproc_latency = MedianLatency::default();
    let mut figure = Figure::new(format!("gateway-{label}"), backend, "calls/s");
    let mut latency = MedianLatency::default();
    let (mut p50_overheads, mut p99_overheads, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..settings.runs {
        let run = CallRun::start(settings, Op::Increment, OBJECTS, false).await?;
        let (base_rate, base) = match pace {
            None => drive(&run.rt, Op::Increment, callers, &run.ids, settings.secs).await?,
            Some(pace) => paced_in_process(&run, callers, pace, settings.secs).await?,
        };
        run.finish().await;

        let run = CallRun::start(settings, Op::Increment, OBJECTS, true).await?;
        let (rate, histogram) = through_gateway(&run, callers, pace, settings.secs).await?;
        run.finish().await;

        let us = |h: &hdrhistogram::Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        p50_overheads.push(us(&histogram, 0.5) - us(&base, 0.5));
        p99_overheads.push(us(&histogram, 0.99) - us(&base, 0.99));
        ratios.push(rate / base_rate);
        inproc_latency.offer(&mut inproc, base_rate, base);
        latency.offer(&mut figure, rate, histogram);
    }
    inproc_latency.finish(&mut inproc);
    latency.finish(&mut figure);
    figure.extra.extend([
        ("× in process", median(&mut ratios)),
        ("p50 overhead µs", median(&mut p50_overheads)),
        ("p99 overhead µs", median(&mut p99_overheads)),
    ]);
    Ok(vec![inproc, figure])
}

/// When the `n`th call of `caller` is due, with `callers` callers spread evenly over `pace`.
fn due(started: Instant, caller: usize, callers: usize, n: u32, pace: Duration) -> Instant {
    started + pace.mul_f64(caller as f64 / callers as f64) + pace * n
}

/// Picks the next object at random (xorshift).
fn next_id<'a>(ids: &'a [String], seed: &mut u64) -> &'a str {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    &ids[(*seed % ids.len() as u64) as usize]
}

/// `callers` in-process callers, each calling every `pace`; latency counts from when each
/// call was due.
async fn paced_in_process(
    run: &CallRun,
    callers: usize,
    pace: Duration,
    duration: Duration,
) -> Result<(f64, hdrhistogram::Histogram<u64>), String> {
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = tokio::task::JoinSet::new();
    for caller in 0..callers {
        let rt = run.rt.clone();
        let ids = Arc::clone(&run.ids);
        tasks.spawn(async move {
            let mut histogram = crate::report::histogram();
            let mut seed = (caller as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let mut done = 0u32;
            loop {
                let due = due(started, caller, callers, done, pace);
                if due >= deadline {
                    break;
                }
                tokio::time::sleep_until(due.into()).await;
                BenchCounter::increment(&rt, next_id(&ids, &mut seed))
                    .await
                    .map_err(|e| e.to_string())?;
                histogram.saturating_record(due.elapsed().as_nanos() as u64);
                done += 1;
            }
            Ok::<_, String>((u64::from(done), histogram))
        });
    }
    let (total, histogram) = crate::report::gather(&mut tasks).await?;
    Ok((total as f64 / started.elapsed().as_secs_f64(), histogram))
}

/// Serves `run`'s runtime on a loopback port and drives it with `callers` connections, each
/// sending a call every `pace` if given (latency then counts from when the call was due),
/// else as soon as the last one returned.
async fn through_gateway(
    run: &CallRun,
    callers: usize,
    pace: Option<Duration>,
    duration: Duration,
) -> Result<(f64, hdrhistogram::Histogram<u64>), String> {
    let config = durable_server::ServerConfig::from_toml_str(&format!(
        r#"
        [[principals]]
        name = "bench"
        tokens_sha256 = ["{}"]
          [[principals.grants]]
          types = ["BenchCounter"]
          handlers = ["*"]
          ops = ["call"]
        "#,
        durable_server::auth::hash_token(TOKEN)
    ))
    .map_err(|e| e.to_string())?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let address = listener.local_addr().map_err(|e| e.to_string())?;
    let stop = tokio_util::sync::CancellationToken::new();
    let server = tokio::spawn(durable_server::serve_with_shutdown(
        run.rt.clone(),
        config,
        listener,
        stop.clone().cancelled_owned(),
    ));

    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = tokio::task::JoinSet::new();
    for caller in 0..callers {
        let ids = Arc::clone(&run.ids);
        tasks.spawn(async move {
            let stream = TcpStream::connect(address)
                .await
                .map_err(|e| e.to_string())?;
            stream.set_nodelay(true).map_err(|e| e.to_string())?;
            let (mut sender, connection) =
                hyper::client::conn::http1::handshake(TokioIo::new(stream))
                    .await
                    .map_err(|e| e.to_string())?;
            tokio::spawn(connection);
            let mut histogram = crate::report::histogram();
            let mut seed = (caller as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            let mut done = 0u32;
            let authorization = format!("Bearer {TOKEN}");
            loop {
                let due = match pace {
                    Some(pace) => due(started, caller, callers, done, pace),
                    None => Instant::now(),
                };
                if due >= deadline {
                    break;
                }
                if pace.is_some() {
                    tokio::time::sleep_until(due.into()).await;
                }
                let id = next_id(&ids, &mut seed);
                let request =
                    Request::post(format!("/v1/objects/BenchCounter/{id}/call/increment"))
                        .header("host", "bench")
                        .header("authorization", &authorization)
                        .header("content-type", "application/json")
                        .body(Full::new(Bytes::from_static(b"{}")))
                        .map_err(|e| e.to_string())?;
                sender.ready().await.map_err(|e| e.to_string())?;
                let response = sender
                    .send_request(request)
                    .await
                    .map_err(|e| e.to_string())?;
                let status = response.status();
                let body = response
                    .into_body()
                    .collect()
                    .await
                    .map_err(|e| e.to_string())?
                    .to_bytes();
                if !status.is_success() {
                    return Err(format!(
                        "the gateway answered {status}: {}",
                        String::from_utf8_lossy(&body)
                    ));
                }
                histogram.saturating_record(due.elapsed().as_nanos() as u64);
                done += 1;
            }
            Ok::<_, String>((u64::from(done), histogram))
        });
    }
    let mut total = 0;
    let mut histogram = crate::report::histogram();
    let mut failure = None;
    while let Some(result) = tasks.join_next().await {
        match result.map_err(|e| e.to_string()).and_then(|r| r) {
            Ok((done, h)) => {
                total += done;
                histogram.add(h).map_err(|e| e.to_string())?;
            }
            Err(error) => failure = Some(error),
        }
    }
    let rate = total as f64 / started.elapsed().as_secs_f64();
    stop.cancel();
    server
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
    match failure {
        Some(error) => Err(error),
        None => Ok((rate, histogram)),
    }
}
