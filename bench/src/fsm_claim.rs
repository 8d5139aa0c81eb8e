//! The claim latency of FSM instances with a concurrency key (`fsm-claim`, SQLite or Postgres), as the
//! executing set grows: the same pick (one row whose key is free, behind rows of saturated
//! keys) with 10 and with 10,000 executing rows holding keys. The claim takes its slot through
//! the unique index over executing rows' key slots, so its latency should not grow with them.

use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use crate::report::{Figure, MedianLatency, histogram, peak_rss_mib};
use crate::{BackendKind, Settings};
use durable_runtime::fsm::store::{Committed, FsmStore, Lease, OutcomeCommit, Transition};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

/// The executing set's sizes compared.
const EXECUTING: [u64; 2] = [10, 10_000];

/// Runnable rows of saturated keys ahead of the claimable ones: the pick passes over them.
const WAITING_ON_HELD_KEYS: u64 = 10;

pub(crate) async fn run(settings: &Settings) -> Result<Vec<Figure>, String> {
    if settings.backend == BackendKind::Memory {
        return Err("the fsm-claim scenario runs on sqlite or postgres, not memory".to_owned());
    }
    let claims: u64 = if settings.smoke { 50 } else { 2_000 };
    let mut figures: Vec<Figure> = Vec::new();
    // With each commit flushed (what a claim costs), then without the flush (the database
    // work alone, which the disk's variance otherwise hides).
    for flush in [true, false] {
        let suffix = if flush { "" } else { "-noflush" };
        let mut sized: Vec<(Figure, MedianLatency)> = EXECUTING
            .iter()
            .map(|executing| {
                let name = format!("fsm-claim-{executing}{suffix}");
                (
                    Figure::new(name, settings.backend.name(), "claims/s"),
                    MedianLatency::default(),
                )
            })
            .collect();
        // Sizes alternate run by run, so that a slower stretch of the disk hits both.
        for _ in 0..settings.runs {
            for (executing, (figure, latency)) in EXECUTING.iter().zip(&mut sized) {
                let (rate, latencies) = measure(settings, *executing, claims, flush).await?;
                latency.offer(figure, rate, latencies);
            }
        }
        let mut first: Option<[f64; 3]> = None;
        for (executing, (mut figure, latency)) in EXECUTING.iter().zip(sized) {
            latency.finish(&mut figure);
            figure.extra.push(("executing rows", *executing as f64));
            figure.peak_rss_mib = peak_rss_mib();
            match (first, figure.latency_us) {
                (None, latency) => first = latency,
                (Some([p50, p99, _]), Some([q50, q99, _])) => {
                    figure.extra.push(("p50 × 10 executing", q50 / p50));
                    figure.extra.push(("p99 × 10 executing", q99 / p99));
                }
                (Some(_), None) => {}
            }
            figures.push(figure);
        }
    }
    Ok(figures)
}

/// Where a run's rows live.
enum Database {
    /// The file's pool, and its directory, removed when dropped.
    Sqlite {
        pool: sqlx::SqlitePool,
        _dir: tempfile::TempDir,
    },
    /// The schema to drop.
    Postgres(sqlx::PgPool, String),
}

/// An FSM store of the run's backend, on a database of its own, its commits flushed or not
/// (SQLite's `synchronous` FULL or NORMAL; Postgres' `synchronous_commit`).
async fn open(settings: &Settings, flush: bool) -> Result<(Arc<dyn FsmStore>, Database), String> {
    if settings.backend != BackendKind::Postgres {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let store = durable_sqlx::SqliteStore::builder(dir.path().join("bench.db"))
            .synchronous(if flush {
                durable_sqlx::Synchronous::Full
            } else {
                durable_sqlx::Synchronous::Normal
            })
            .open()
            .await
            .map_err(|e| e.to_string())?;
        return Ok((
            Arc::new(store.fsm()),
            Database::Sqlite {
                pool: store.pool().clone(),
                _dir: dir,
            },
        ));
    }
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let url = std::env::var("DATABASE_URL")
        .map_err(|_| "the postgres backend needs DATABASE_URL".to_owned())?;
    let mut options = PgConnectOptions::from_str(&url).map_err(|e| e.to_string())?;
    if !flush {
        options = options.options([("synchronous_commit", "off")]);
    }
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .connect_with(options)
        .await
        .map_err(|e| e.to_string())?;
    let schema = format!(
        "bench_claim_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let store = durable_sqlx::PostgresStore::builder_with_pool(pool.clone())
        .schema(&schema)
        .connect()
        .await
        .map_err(|e| e.to_string())?;
    Ok((Arc::new(store.fsm()), Database::Postgres(pool, schema)))
}

/// Inserts `executing` rows executing under keys of their own, a few runnable rows of those
/// keys, then `claims` runnable rows with free keys behind them.
async fn fill(database: &Database, executing: u64, claims: u64) -> Result<(), String> {
    match database {
        Database::Sqlite { pool, .. } => {
            let now = SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_err(|e| e.to_string())?
                .as_micros();
            let series = |count: u64| {
                format!(
                    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {count})"
                )
            };
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "{held}
                 INSERT INTO durable_fsm
                     (fsm, step, queue, status, concurrency_key, concurrency_slot, locked_by,
                      lease_expires_at, eligible_at, inserted_at, updated_at)
                 SELECT 'bench.claim', 'tick', 'claim', 'executing', 'held:' || i, 0, 'bench',
                        {now} + 3600000000, {now}, {now}, {now}
                 FROM n;
                 {waiting}
                 INSERT INTO durable_fsm
                     (fsm, step, queue, concurrency_key, eligible_at, inserted_at, updated_at)
                 SELECT 'bench.claim', 'tick', 'claim', 'held:' || i,
                        {now} - 3600000000 + i * 1000, {now}, {now}
                 FROM n;
                 {free}
                 INSERT INTO durable_fsm
                     (fsm, step, queue, concurrency_key, eligible_at, inserted_at, updated_at)
                 SELECT 'bench.claim', 'tick', 'claim', 'free:' || i,
                        {now} - 1800000000 + i * 1000, {now}, {now}
                 FROM n;
                 ANALYZE;",
                held = series(executing),
                waiting = series(WAITING_ON_HELD_KEYS),
                free = series(claims),
            )))
            .execute(pool)
            .await
            .map(drop)
            .map_err(|e| e.to_string())
        }
        Database::Postgres(pool, schema) => sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
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
        .map(drop)
        .map_err(|e| e.to_string()),
    }
}

/// One run: `executing` rows executing under keys of their own, `claims` runnable rows with
/// free keys behind a few rows of held keys; claims them one pick at a time, ending each
/// claimed instance (untimed) so the executing set stays the same size. Returns claims per
/// second and the latency histogram.
async fn measure(
    settings: &Settings,
    executing: u64,
    claims: u64,
    flush: bool,
) -> Result<(f64, hdrhistogram::Histogram<u64>), String> {
    let (store, database) = open(settings, flush).await?;
    fill(&database, executing, claims).await?;
    let mut latencies = histogram();
    let mut claiming = Duration::ZERO;
    for _ in 0..claims {
        let now = SystemTime::now();
        let one = Instant::now();
        let mut claimed = store
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
        let committed = store
            .complete(&[done], SystemTime::now())
            .await
            .map_err(|e| e.to_string())?;
        if committed != [Committed::Applied] {
            return Err(format!("ending a claimed instance: {committed:?}"));
        }
    }
    if let Database::Postgres(pool, schema) = database {
        let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE"
        )))
        .execute(&pool)
        .await;
    }
    Ok((claims as f64 / claiming.as_secs_f64(), latencies))
}
