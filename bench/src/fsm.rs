//! The FSM engine's scenario (`fsm`): trivial steps per second through the engine's workers,
//! with group commit and with one transaction per outcome, and, on SQLite and Postgres, the
//! latency of the pick with a million runnable rows.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use durable_runtime::fsm::store::FsmStore;
use durable_runtime::fsm::{Engine, MemoryFsmStore, Outcome, durable_fsm};

use crate::report::{Figure, MedianLatency, histogram, peak_rss_mib};
use crate::{BackendKind, Settings};

/// Steps per instance.
const STEPS: u32 = 5;

/// Final steps run, across runs.
static FINISHED: AtomicU64 = AtomicU64::new(0);

/// Counts down in trivial steps, then ends.
#[durable_fsm(name = "bench.countdown", result = u32)]
pub struct Countdown {
    left: u32,
}

#[durable_fsm]
impl Countdown {
    #[step(initial)]
    fn tick(&mut self) -> Outcome<Self> {
        if self.left == 0 {
            FINISHED.fetch_add(1, Ordering::Relaxed);
            return Outcome::done(STEPS);
        }
        self.left -= 1;
        Outcome::next(Self::TICK)
    }
}

/// An FSM store opened for one run, with the database it lives in.
pub(crate) struct Opened {
    pub(crate) store: Arc<dyn FsmStore>,
    database: Database,
}

/// Where an FSM store's rows live, to fill them in and remove them afterwards.
enum Database {
    Memory,
    /// The file's pool, and its directory, removed when dropped.
    Sqlite {
        pool: sqlx::SqlitePool,
        _dir: tempfile::TempDir,
    },
    /// The schema to drop.
    Postgres(sqlx::PgPool, String),
}

impl Opened {
    pub(crate) async fn open(settings: &Settings) -> Result<Self, String> {
        match settings.backend {
            BackendKind::Memory => Ok(Self {
                store: Arc::new(MemoryFsmStore::new()),
                database: Database::Memory,
            }),
            BackendKind::Sqlite | BackendKind::SqliteNormal => {
                let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
                let store =
                    crate::scenarios::sqlite_store(settings, &dir.path().join("bench.db")).await?;
                Ok(Self {
                    store: Arc::new(store.fsm()),
                    database: Database::Sqlite {
                        pool: store.pool().clone(),
                        _dir: dir,
                    },
                })
            }
            BackendKind::Postgres => {
                static NEXT: AtomicU64 = AtomicU64::new(0);
                let url = std::env::var("DATABASE_URL")
                    .map_err(|_| "the postgres backend needs DATABASE_URL".to_owned())?;
                let schema = format!(
                    "bench_fsm_{}_{}",
                    std::process::id(),
                    NEXT.fetch_add(1, Ordering::Relaxed)
                );
                let store = durable_sqlx::PostgresStore::builder(&url)
                    .schema(&schema)
                    .max_connections(16)
                    .connect()
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(Self {
                    database: Database::Postgres(store.pool().clone(), schema),
                    store: Arc::new(store.fsm()),
                })
            }
        }
    }

    /// Inserts `rows` runnable countdowns, eligible over the last `rows` milliseconds, in
    /// four priorities, with one statement, and refreshes the planner's statistics.
    async fn fill(&self, rows: u64) -> Result<(), String> {
        match &self.database {
            Database::Memory => Err("the pick figure needs SQLite or Postgres".to_owned()),
            Database::Sqlite { pool, .. } => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_err(|e| e.to_string())?
                    .as_micros();
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {rows})
                     INSERT INTO durable_fsm (fsm, step, queue, priority, eligible_at,
                                              inserted_at, updated_at)
                     SELECT 'bench.countdown', 'tick', 'default', i % 4, {now} - i * 1000,
                            {now}, {now}
                     FROM n;
                     ANALYZE;"
                )))
                .execute(pool)
                .await
                .map(drop)
                .map_err(|e| e.to_string())
            }
            Database::Postgres(pool, schema) => sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "INSERT INTO {schema}.durable_fsm (fsm, step, queue, priority, eligible_at)
                 SELECT 'bench.countdown', 'tick', 'default', (i % 4)::int2,
                        now() - (i || ' milliseconds')::interval
                 FROM generate_series(1, {rows}) AS i;
                 ANALYZE {schema}.durable_fsm;"
            )))
            .execute(pool)
            .await
            .map(drop)
            .map_err(|e| e.to_string()),
        }
    }

    pub(crate) async fn close(self) {
        if let Database::Postgres(pool, schema) = self.database {
            let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "DROP SCHEMA IF EXISTS {schema} CASCADE"
            )))
            .execute(&pool)
            .await;
        }
    }
}

pub(crate) async fn run(settings: &Settings) -> Result<Vec<Figure>, String> {
    let instances: u64 = match (settings.smoke, settings.backend) {
        (true, _) => 200,
        (false, BackendKind::Memory) => 2_000,
        (false, _) => 20_000,
    };
    let mut figures = Vec::new();
    for (name, batch) in [("fsm-steps", 256), ("fsm-steps-1tx", 1)] {
        let mut figure = Figure::new(name, settings.backend.name(), "steps/s");
        for _ in 0..settings.runs {
            figure.runs.push(steps(settings, instances, batch).await?);
        }
        figure.extra.push(("instances", instances as f64));
        figure.peak_rss_mib = peak_rss_mib();
        figures.push(figure);
    }
    if settings.backend != BackendKind::Memory {
        figures.push(pick(settings).await?);
    }
    Ok(figures)
}

/// Runs `instances` countdowns through an engine committing `batch` outcomes per transaction
/// at most; returns steps per second, from the start of the workers to the last commit.
async fn steps(settings: &Settings, instances: u64, batch: usize) -> Result<f64, String> {
    let opened = Opened::open(settings).await?;
    let client = Engine::builder(Arc::clone(&opened.store))
        .no_reaper()
        .no_gc()
        .build()
        .map_err(|e| e.to_string())?;
    for chunk in (0..instances).collect::<Vec<_>>().chunks(5_000) {
        client
            .insert_all(chunk.iter().map(|_| Countdown { left: STEPS - 1 }))
            .await
            .map_err(|e| e.to_string())?;
    }
    let target = FINISHED.load(Ordering::Relaxed) + instances;
    let started = Instant::now();
    let engine = Engine::builder(Arc::clone(&opened.store))
        .register::<Countdown>()
        .queue("default", 64)
        .pick_batch(64)
        .commit_batch(batch)
        .commit_concurrency(if batch == 1 { 8 } else { 2 })
        .poll_interval(Duration::from_millis(1), Duration::from_millis(20))
        .no_gc()
        .build()
        .map_err(|e| e.to_string())?;
    let deadline = started + Duration::from_secs(600);
    while FINISHED.load(Ordering::Relaxed) < target {
        if Instant::now() > deadline {
            return Err("the countdowns did not finish within 10 minutes".to_owned());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // Shutting down waits for the last outcomes' commits.
    engine.shutdown().await;
    let took = started.elapsed();
    client.shutdown().await;
    opened.close().await;
    Ok((instances * u64::from(STEPS)) as f64 / took.as_secs_f64())
}

/// The latency of the pick (32 rows) with a million runnable rows in the table.
async fn pick(settings: &Settings) -> Result<Figure, String> {
    let rows: u64 = if settings.smoke { 20_000 } else { 1_000_000 };
    let picks = if settings.smoke { 50 } else { 2_000 };
    let mut figure = Figure::new("fsm-pick", settings.backend.name(), "picks/s");
    let mut median_latency = MedianLatency::default();
    for _ in 0..settings.runs {
        let opened = Opened::open(settings).await?;
        opened.fill(rows).await?;
        let mut latencies = histogram();
        let started = Instant::now();
        for _ in 0..picks {
            let now = std::time::SystemTime::now();
            let one = Instant::now();
            let claimed = opened
                .store
                .pick(
                    "default",
                    "bench",
                    now,
                    now + Duration::from_secs(60),
                    32,
                    now,
                )
                .await
                .map_err(|e| e.to_string())?;
            latencies
                .record(one.elapsed().as_nanos() as u64)
                .map_err(|e| e.to_string())?;
            if claimed.len() != 32 {
                return Err(format!("a pick claimed {} rows, not 32", claimed.len()));
            }
        }
        let rate = picks as f64 / started.elapsed().as_secs_f64();
        median_latency.offer(&mut figure, rate, latencies);
        opened.close().await;
    }
    median_latency.finish(&mut figure);
    figure.extra.push(("runnable rows", rows as f64));
    figure.peak_rss_mib = peak_rss_mib();
    Ok(figure)
}
