//! The claim latency of FSM instances with a concurrency key (`fsm-claim`, Postgres), as the
//! executing set grows: the same pick (one row whose key is free, behind rows of saturated
//! keys) with 10 and with 10,000 executing rows holding keys. The claim takes its slot through
//! the unique index over executing rows' key slots, so its latency should not grow with them.

use std::time::{Duration, Instant, SystemTime};

use durable_runtime::fsm::store::{Committed, Lease, OutcomeCommit, Transition};

use crate::fsm::Opened;
use crate::report::{Figure, MedianLatency, histogram, peak_rss_mib};
use crate::{BackendKind, Settings};

/// The executing set's sizes compared.
const EXECUTING: [u64; 2] = [10, 10_000];

/// Runnable rows of saturated keys ahead of the claimable ones: the pick passes over them.
const WAITING_ON_HELD_KEYS: u64 = 10;

pub(crate) async fn run(settings: &Settings) -> Result<Vec<Figure>, String> {
    if settings.backend != BackendKind::Postgres {
        return Err(format!(
            "the fsm-claim scenario runs on postgres, not {}",
            settings.backend.name()
        ));
    }
    let claims: u64 = if settings.smoke { 50 } else { 2_000 };
    let mut figures: Vec<Figure> = Vec::new();
    for executing in EXECUTING {
        let mut figure = Figure::new(
            format!("fsm-claim-{executing}"),
            settings.backend.name(),
            "claims/s",
        );
        let mut median_latency = MedianLatency::default();
        for _ in 0..settings.runs {
            let (rate, latencies) = measure(settings, executing, claims).await?;
            median_latency.offer(&mut figure, rate, latencies);
        }
        median_latency.finish(&mut figure);
        figure.extra.push(("executing rows", executing as f64));
        figure.peak_rss_mib = peak_rss_mib();
        if let (Some(first), Some([p50, p99, _])) = (
            figures.first().and_then(|f| f.latency_us),
            figure.latency_us,
        ) {
            figure.extra.push(("p50 × 10 executing", p50 / first[0]));
            figure.extra.push(("p99 × 10 executing", p99 / first[1]));
        }
        figures.push(figure);
    }
    Ok(figures)
}

/// One run: `executing` rows executing under keys of their own, `claims` runnable rows with
/// free keys behind a few rows of held keys; claims them one pick at a time, ending each
/// claimed instance (untimed) so the executing set stays the same size. Returns claims per
/// second and the latency histogram.
async fn measure(
    settings: &Settings,
    executing: u64,
    claims: u64,
) -> Result<(f64, hdrhistogram::Histogram<u64>), String> {
    let opened = Opened::open(settings).await?;
    let Some((pool, schema)) = &opened.schema else {
        return Err("the claim figure needs Postgres".to_owned());
    };
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "INSERT INTO {schema}.durable_fsm
             (fsm, step, queue, status, concurrency_key, concurrency_slot, locked_by,
              lease_expires_at)
         SELECT 'bench.claim', 'tick', 'claim', 'executing', 'held:' || i, 0, 'bench',
                now() + interval '1 hour'
         FROM generate_series(1, {executing}) AS i;
         INSERT INTO {schema}.durable_fsm (fsm, step, queue, concurrency_key, eligible_at)
         SELECT 'bench.claim', 'tick', 'claim', 'held:' || i,
                now() - interval '1 hour' + (i || ' milliseconds')::interval
         FROM generate_series(1, {WAITING_ON_HELD_KEYS}) AS i;
         INSERT INTO {schema}.durable_fsm (fsm, step, queue, concurrency_key, eligible_at)
         SELECT 'bench.claim', 'tick', 'claim', 'free:' || i,
                now() - interval '30 minutes' + (i || ' milliseconds')::interval
         FROM generate_series(1, {claims}) AS i;
         ANALYZE {schema}.durable_fsm;"
    )))
    .execute(pool)
    .await
    .map_err(|e| e.to_string())?;
    let mut latencies = histogram();
    let mut claiming = Duration::ZERO;
    for _ in 0..claims {
        let now = SystemTime::now();
        let one = Instant::now();
        let mut claimed = opened
            .store
            .pick("claim", "bench", now, now + Duration::from_secs(60), 1, now)
            .await
            .map_err(|e| e.to_string())?;
        let took = one.elapsed();
        claiming += took;
        latencies
            .record(took.as_nanos() as u64)
            .map_err(|e| e.to_string())?;
        let Some(claimed) = claimed.pop() else {
            return Err("a pick claimed nothing".to_owned());
        };
        let done = OutcomeCommit {
            lease: Lease {
                id: claimed.id,
                token: claimed.token,
            },
            received: Vec::new(),
            transition: Transition::Done {
                result: "null".to_owned(),
            },
        };
        let committed = opened
            .store
            .complete(&[done], SystemTime::now())
            .await
            .map_err(|e| e.to_string())?;
        if committed != [Committed::Applied] {
            return Err(format!("ending a claimed instance: {committed:?}"));
        }
    }
    opened.close().await;
    Ok((claims as f64 / claiming.as_secs_f64(), latencies))
}
