//! The scenarios.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use durable_runtime::storage::{
    AlarmChange, AlarmClaim, AlarmKey, AlarmPage, AlarmRecord, CommitError, IdPage, KvUsage,
    Loaded, MemoryStorage, ObjectKey, ObjectWrite, Storage, StorageError, truncate_to_micros,
};
use durable_runtime::{AlarmSettings, ObjectOptions, Runtime};
use hdrhistogram::Histogram;
use sqlx::{ConnectOptions, Connection};
use stats_alloc::Region;

use crate::baseline::{self, RawPool};
use crate::objects::{BenchCounter, FIRED, Ringer};
use crate::report::{Figure, MedianLatency, median, peak_rss_mib};
use crate::{BackendKind, GLOBAL, Settings};

/// A backend opened for one run, with what must outlive it.
pub(crate) struct Opened {
    pub(crate) store: Arc<dyn Storage>,
    _dir: Option<tempfile::TempDir>,
    /// A Postgres schema to drop when done.
    schema: Option<(sqlx::PgPool, String)>,
}

impl Opened {
    /// A store, and the directory holding its files.
    pub(crate) fn new(store: Arc<dyn Storage>, dir: Option<tempfile::TempDir>) -> Self {
        Self {
            store,
            _dir: dir,
            schema: None,
        }
    }

    /// Removes what the run created in a shared database.
    pub(crate) async fn close(self) {
        if let Some((pool, schema)) = self.schema {
            let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "DROP SCHEMA IF EXISTS {schema} CASCADE"
            )))
            .execute(&pool)
            .await;
        }
    }
}

pub(crate) async fn open(settings: &Settings) -> Result<Opened, String> {
    let kind = settings.backend;
    Ok(match kind {
        BackendKind::Memory => Opened {
            store: Arc::new(MemoryStorage::new()),
            _dir: None,
            schema: None,
        },
        BackendKind::Sqlite | BackendKind::SqliteNormal => {
            let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
            let store = sqlite_store(settings, &dir.path().join("bench.db")).await?;
            Opened {
                store: Arc::new(store),
                _dir: Some(dir),
                schema: None,
            }
        }
        BackendKind::Postgres => {
            use std::sync::atomic::{AtomicU32, Ordering};
            static NEXT: AtomicU32 = AtomicU32::new(0);
            let url = database_url()?;
            let schema = format!(
                "bench_{}_{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            );
            let store = durable_sqlx::PostgresStore::builder(&url)
                .schema(&schema)
                .connect()
                .await
                .map_err(|e| e.to_string())?;
            let pool = store.pool().clone();
            Opened {
                store: Arc::new(store),
                _dir: None,
                schema: Some((pool, schema)),
            }
        }
    })
}

/// A second store on the Postgres schema of `first` (dropped with `first` only).
pub(crate) async fn reopen(first: &Opened) -> Result<Opened, String> {
    let Some((_, schema)) = &first.schema else {
        return Err("only a Postgres store can be opened twice".into());
    };
    let store = durable_sqlx::PostgresStore::builder(&database_url()?)
        .schema(schema)
        .connect()
        .await
        .map_err(|e| e.to_string())?;
    Ok(Opened {
        store: Arc::new(store),
        _dir: None,
        schema: None,
    })
}

/// A SQLite store at `path` with the run's settings.
pub(crate) async fn sqlite_store(
    settings: &Settings,
    path: &std::path::Path,
) -> Result<durable_sqlx::SqliteStore, String> {
    let synchronous = if settings.backend == BackendKind::Sqlite {
        durable_sqlx::Synchronous::Full
    } else {
        durable_sqlx::Synchronous::Normal
    };
    let mut builder = durable_sqlx::SqliteStore::builder(path)
        .synchronous(synchronous)
        .page_size(settings.page_size)
        .wal_autocheckpoint(settings.wal_autocheckpoint)
        .background_checkpoints(!settings.inline_checkpoints);
    if let Some(bytes) = settings.cache_size {
        builder = builder.cache_size(bytes);
    }
    if let Some(bytes) = settings.mmap_size {
        builder = builder.mmap_size(bytes);
    }
    if let Some(from) = settings.compress_states_from {
        builder = builder.compress_states_from(from);
    }
    builder.open().await.map_err(|e| e.to_string())
}

fn database_url() -> Result<String, String> {
    std::env::var("DATABASE_URL").map_err(|_| "the postgres backend needs DATABASE_URL".into())
}

/// Runs one scenario `settings.runs` times.
pub(crate) async fn run(name: &str, settings: &Settings) -> Result<Vec<Figure>, String> {
    let backend = settings.backend;
    match name {
        "raw-commit" | "raw-batch" => raw(name, settings).await,
        "seq" => calls(settings, "seq", Op::Increment, 1, 1).await,
        "hot" => calls(settings, "hot", Op::Increment, 64, 1).await,
        "spread" => match backend {
            BackendKind::Sqlite | BackendKind::SqliteNormal => spread(settings).await,
            BackendKind::Memory | BackendKind::Postgres => {
                calls(
                    settings,
                    "spread",
                    Op::Increment,
                    SPREAD_CALLERS,
                    SPREAD_OBJECTS,
                )
                .await
            }
        },
        "spread-alarm" => {
            calls(
                settings,
                "spread-alarm",
                Op::Touch,
                SPREAD_CALLERS,
                SPREAD_OBJECTS,
            )
            .await
        }
        "read" => {
            // Persistence is not involved: always in memory.
            let memory = Settings {
                backend: BackendKind::Memory,
                ..settings.clone()
            };
            let mut figures = Vec::new();
            for (name, peer_name, validated_name, callers, objects) in [
                ("read-1", "kameo-read-1", "read-validated-1", 1, 1),
                ("read-64", "kameo-read-64", "read-validated-64", 64, 1_000),
            ] {
                let peer = peer_reads(&memory, peer_name, callers, objects).await?;
                let mut figure = calls(&memory, name, Op::Get, callers, objects)
                    .await?
                    .remove(0);
                figure
                    .extra
                    .push(("× kameo", figure.median() / peer.median()));
                // A validated read asks storage for the version: on the chosen backend.
                let mut validated =
                    calls(settings, validated_name, Op::ValidatedGet, callers, objects)
                        .await?
                        .remove(0);
                validated
                    .extra
                    .push(("× read", validated.median() / figure.median()));
                figures.push(peer);
                figures.push(figure);
                figures.push(validated);
            }
            Ok(figures)
        }
        "kv" => kv(settings).await,
        "cold" => cold(settings).await,
        "memory" => memory(settings).await,
        "alarms" => alarms(settings).await,
        "alarms-scale" => crate::alarms_scale::alarms_scale(settings).await,
        "outside-alarms" => crate::outside::outside_alarms(settings).await,
        "fsm" => crate::fsm::run(settings).await,
        "fsm-claim" => crate::fsm_claim::run(settings).await,
        "fsm-insert" => crate::fsm_insert::run(settings).await,
        "gateway" => crate::gateway::gateway(settings).await,
        "forward" => crate::forward::forward(settings).await,
        "scale" => crate::scale::run(settings).await,
        other => Err(format!("unknown scenario `{other}` on {}", backend.name())),
    }
}

async fn raw(name: &str, settings: &Settings) -> Result<Vec<Figure>, String> {
    let backend = settings.backend;
    let unit = if name == "raw-commit" {
        "commits/s"
    } else {
        "rows/s"
    };
    let mut figure = Figure::new(name, backend.name(), unit);
    for run in 0..settings.runs {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let pool = match backend {
            BackendKind::Memory => return Ok(Vec::new()),
            BackendKind::Sqlite | BackendKind::SqliteNormal => {
                RawPool::sqlite(
                    &dir.path().join("raw.db"),
                    backend == BackendKind::Sqlite,
                    settings.page_size,
                    settings.wal_autocheckpoint,
                )
                .await?
            }
            BackendKind::Postgres => {
                RawPool::postgres(
                    &database_url()?,
                    format!("bench_raw_{}_{run}", std::process::id()),
                )
                .await?
            }
        };
        if name == "raw-commit" {
            let (rate, histogram) = baseline::raw_commit(&pool, settings.secs).await?;
            figure.runs.push(rate);
            figure.set_latency(&histogram);
        } else {
            figure
                .runs
                .push(baseline::raw_batch(&pool, settings.secs).await?);
        }
        pool.cleanup().await;
    }
    figure.peak_rss_mib = peak_rss_mib();
    Ok(vec![figure])
}

/// What each caller does.
#[derive(Clone, Copy)]
pub(crate) enum Op {
    Increment,
    Get,
    /// `Get` on a runtime with validated reads: each read checks the stored version first.
    ValidatedGet,
    Touch,
    /// Puts one 1 KiB value.
    KvPut,
    /// Reads a cached key.
    KvGet,
}

/// The callers of `spread` and `spread-alarm`.
const SPREAD_CALLERS: usize = 64;
/// The objects `spread` and `spread-alarm` call at random.
const SPREAD_OBJECTS: usize = 10_000;

/// A runtime on a fresh backend whose objects have all been called once.
pub(crate) struct CallRun {
    opened: Opened,
    pub(crate) rt: Runtime,
    pub(crate) ids: Arc<Vec<String>>,
}

impl CallRun {
    /// `exposed`: the runtime also exposes `BenchCounter` to be called by name.
    pub(crate) async fn start(
        settings: &Settings,
        op: Op,
        objects: usize,
        exposed: bool,
    ) -> Result<Self, String> {
        let opened = open(settings).await?;
        let mut builder = Runtime::builder(Arc::clone(&opened.store));
        if let Op::ValidatedGet = op {
            builder = builder.validate_reads();
        }
        if exposed {
            builder = builder.expose::<BenchCounter>();
        }
        let rt = builder.build();
        let ids: Arc<Vec<String>> = Arc::new((0..objects).map(|i| format!("obj-{i}")).collect());
        // Warm up: every object activated once, outside the measurement.
        for chunk in ids.chunks(256) {
            let calls = chunk.iter().map(|id| BenchCounter::get(&rt, id));
            for result in futures_join_all(calls).await {
                result.map_err(|e| e.to_string())?;
            }
        }
        Ok(Self { opened, rt, ids })
    }

    pub(crate) async fn finish(self) {
        self.rt.shutdown().await;
        self.opened.close().await;
    }
}

/// Key-value storage: `kv-put`, 64 callers each putting one 1 KiB value in one of 10,000
/// objects per call; `kv-read`, 64 callers reading a cached key of one of 1,000 objects.
async fn kv(settings: &Settings) -> Result<Vec<Figure>, String> {
    let mut figures = calls(
        settings,
        "kv-put",
        Op::KvPut,
        SPREAD_CALLERS,
        SPREAD_OBJECTS,
    )
    .await?;
    let mut figure = Figure::new("kv-read", settings.backend.name(), "calls/s");
    let mut latency = MedianLatency::default();
    let objects = if settings.smoke { 100 } else { 1_000 };
    for _ in 0..settings.runs {
        let run = CallRun::start(settings, Op::KvGet, objects, false).await?;
        // Every object holds the key and has read it once: cached.
        for chunk in run.ids.chunks(256) {
            let puts = chunk.iter().map(|id| BenchCounter::put_value(&run.rt, id));
            for result in futures_join_all(puts).await {
                result.map_err(|e| e.to_string())?;
            }
            let reads = chunk.iter().map(|id| BenchCounter::read_value(&run.rt, id));
            for result in futures_join_all(reads).await {
                result.map_err(|e| e.to_string())?;
            }
        }
        let (rate, histogram) =
            drive(&run.rt, Op::KvGet, SPREAD_CALLERS, &run.ids, settings.secs).await?;
        run.finish().await;
        latency.offer(&mut figure, rate, histogram);
    }
    latency.finish(&mut figure);
    figures.push(figure);
    Ok(figures)
}

/// `callers` concurrent callers over `objects` objects for `settings.secs`.
async fn calls(
    settings: &Settings,
    name: &str,
    op: Op,
    callers: usize,
    objects: usize,
) -> Result<Vec<Figure>, String> {
    let mut figure = Figure::new(name, settings.backend.name(), "calls/s");
    let mut latency = MedianLatency::default();
    for _ in 0..settings.runs {
        let run = CallRun::start(settings, op, objects, false).await?;
        let (rate, histogram) = drive(&run.rt, op, callers, &run.ids, settings.secs).await?;
        run.finish().await;
        latency.offer(&mut figure, rate, histogram);
    }
    latency.finish(&mut figure);
    Ok(vec![figure])
}

/// `spread` on SQLite next to `raw-spread`, its same-work baseline, run by run: each run of
/// `spread` records the batches group commit formed (from the runtime's commit metrics), then
/// `raw-spread` commits batches of the same sizes of random rows of a 10,000-row table with
/// plain sqlx, on a store opened with the same settings. `spread` is reported as a ratio to it
/// (the median of the runs' ratios), with how long its commits took and how much of the run the
/// store spent committing.
async fn spread(settings: &Settings) -> Result<Vec<Figure>, String> {
    let backend = settings.backend.name();
    let mut raw = Figure::new("raw-spread", backend, "rows/s");
    let mut raw_latency = MedianLatency::default();
    let mut figure = Figure::new("spread", backend, "calls/s");
    let mut latency = MedianLatency::default();
    let mut ratios = Vec::new();
    let mut writes_per_sec = Vec::new();
    let mut mean_batches = Vec::new();
    let mut mean_commit_us = Vec::new();
    let mut committing = Vec::new();
    for _ in 0..settings.runs {
        let run = CallRun::start(settings, Op::Increment, SPREAD_OBJECTS, false).await?;
        crate::commits::start()?;
        let started = Instant::now();
        let (rate, histogram) = drive(
            &run.rt,
            Op::Increment,
            SPREAD_CALLERS,
            &run.ids,
            settings.secs,
        )
        .await?;
        let commits = crate::commits::take()?;
        let elapsed = started.elapsed().as_secs_f64();
        run.finish().await;
        let written: u64 = commits.sizes.iter().map(|&n| u64::from(n)).sum();
        let batches = commits.sizes.len().max(1) as f64;
        let seconds: f64 = commits.seconds.iter().sum();
        writes_per_sec.push(written as f64 / elapsed);
        mean_batches.push(written as f64 / batches);
        mean_commit_us.push(seconds * 1e6 / commits.seconds.len().max(1) as f64);
        committing.push(seconds / elapsed);
        latency.offer(&mut figure, rate, histogram);

        let (raw_rate, raw_histogram) = raw_spread(settings, &commits.sizes).await?;
        raw_latency.offer(&mut raw, raw_rate, raw_histogram);
        ratios.push(rate / raw_rate);
    }
    raw_latency.finish(&mut raw);
    latency.finish(&mut figure);
    figure.extra.extend([
        ("writes/s", median(&mut writes_per_sec)),
        ("writes per batch (mean)", median(&mut mean_batches)),
        ("µs per commit (mean)", median(&mut mean_commit_us)),
        ("share of the run spent committing", median(&mut committing)),
        ("× raw-spread", median(&mut ratios)),
    ]);
    Ok(vec![raw, figure])
}

/// One run of `raw-spread` with the batch sizes of a `spread` run.
async fn raw_spread(settings: &Settings, sizes: &[u32]) -> Result<(f64, Histogram<u64>), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let store = sqlite_store(settings, &dir.path().join("raw.db")).await?;
    populate(&store, "BenchCounter", SPREAD_OBJECTS).await?;
    let ids: Vec<String> = (0..SPREAD_OBJECTS).map(|i| format!("obj-{i}")).collect();
    // A connection of its own made from the pool's options, as the store's writer is.
    let mut conn = store
        .pool()
        .connect_options()
        .connect()
        .await
        .map_err(|e| e.to_string())?;
    let result = baseline::raw_spread(
        &mut conn,
        "BenchCounter",
        &ids,
        sizes,
        &|count| format!(r#"{{"count":{count}}}"#),
        settings.secs,
    )
    .await;
    let _ = conn.close().await;
    store.pool().close().await;
    result.map(|(rate, _, histogram)| (rate, histogram))
}

/// The `read` calls as kameo asks to in-memory actors: the baseline `read` is compared with.
async fn peer_reads(
    settings: &Settings,
    name: &str,
    callers: usize,
    objects: usize,
) -> Result<Figure, String> {
    let mut figure = Figure::new(name, "none", "calls/s");
    let mut latency = MedianLatency::default();
    for _ in 0..settings.runs {
        let actors = crate::peer::spawn(objects);
        let (rate, histogram) = crate::peer::drive(&actors, callers, settings.secs).await?;
        crate::peer::stop(actors).await;
        latency.offer(&mut figure, rate, histogram);
    }
    latency.finish(&mut figure);
    Ok(figure)
}

async fn futures_join_all<F: std::future::Future>(
    futures: impl Iterator<Item = F>,
) -> Vec<F::Output> {
    let mut out = Vec::new();
    let handles: Vec<_> = futures.collect();
    for future in handles {
        out.push(future.await);
    }
    out
}

pub(crate) async fn drive(
    rt: &Runtime,
    op: Op,
    callers: usize,
    ids: &Arc<Vec<String>>,
    duration: Duration,
) -> Result<(f64, Histogram<u64>), String> {
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = tokio::task::JoinSet::new();
    for caller in 0..callers {
        let rt = rt.clone();
        let ids = Arc::clone(ids);
        tasks.spawn(async move {
            let mut histogram = crate::report::histogram();
            let mut pick = crate::pick::Picker::for_caller(caller as u64);
            let mut done = 0u64;
            while Instant::now() < deadline {
                let id = &ids[pick.below(ids.len())];
                let t = Instant::now();
                let result = match op {
                    Op::Increment => BenchCounter::increment(&rt, id).await,
                    Op::Get | Op::ValidatedGet => BenchCounter::get(&rt, id).await,
                    Op::Touch => BenchCounter::touch(&rt, id).await,
                    Op::KvPut => BenchCounter::put_value(&rt, id).await,
                    Op::KvGet => BenchCounter::read_value(&rt, id)
                        .await
                        .map(|len| len as i64),
                };
                result.map_err(|e| e.to_string())?;
                histogram.saturating_record(t.elapsed().as_nanos() as u64);
                done += 1;
            }
            Ok::<_, String>((done, histogram))
        });
    }
    let (total, histogram) = crate::report::gather(&mut tasks).await?;
    Ok((total as f64 / started.elapsed().as_secs_f64(), histogram))
}

/// Stores `count` objects directly (batches of 1000), without a runtime.
pub(crate) async fn populate(
    store: &dyn Storage,
    object_type: &str,
    count: usize,
) -> Result<(), String> {
    let ids: Vec<usize> = (0..count).collect();
    for chunk in ids.chunks(1000) {
        let batch: Vec<ObjectWrite> = chunk
            .iter()
            .map(|i| ObjectWrite {
                key: ObjectKey::new(object_type, format!("obj-{i}")),
                expected_version: 0,
                state: Some(br#"{"count":7}"#.to_vec()),
                alarms: Vec::new(),
                kv: Vec::new(),
                idempotency: None,
                fsm: Default::default(),
            })
            .collect();
        store.commit(&batch).await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// First call of many stored objects: activations/s.
async fn cold(settings: &Settings) -> Result<Vec<Figure>, String> {
    let count = if settings.smoke { 2_000 } else { 100_000 };
    let mut figure = Figure::new("cold", settings.backend.name(), "activations/s");
    for _ in 0..settings.runs {
        let opened = open(settings).await?;
        populate(opened.store.as_ref(), "BenchCounter", count).await?;
        let rt = Runtime::new(Arc::clone(&opened.store));
        let started = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        let callers = 64;
        for caller in 0..callers {
            let rt = rt.clone();
            tasks.spawn(async move {
                for i in (caller..count).step_by(callers) {
                    let value = BenchCounter::get(&rt, &format!("obj-{i}"))
                        .await
                        .map_err(|e| e.to_string())?;
                    if value != 7 {
                        return Err(format!("obj-{i} loaded {value}, expected 7"));
                    }
                }
                Ok::<_, String>(())
            });
        }
        while let Some(result) = tasks.join_next().await {
            result.map_err(|e| e.to_string())??;
        }
        figure
            .runs
            .push(count as f64 / started.elapsed().as_secs_f64());
        rt.shutdown().await;
        opened.close().await;
    }
    figure.peak_rss_mib = peak_rss_mib();
    Ok(vec![figure])
}

/// A storage that keeps nothing, so that the `memory` scenario counts only the runtime's
/// own memory per object.
struct NullStorage;

#[async_trait::async_trait]
impl Storage for NullStorage {
    async fn load(&self, _: &ObjectKey) -> Result<Loaded, StorageError> {
        Ok(Loaded::Absent)
    }
    async fn commit(&self, _: &[ObjectWrite]) -> Result<(), CommitError> {
        Ok(())
    }
    async fn delete(&self, _: &ObjectKey) -> Result<bool, StorageError> {
        Ok(false)
    }
    async fn list_ids(&self, _: &str, _: Option<&str>, _: usize) -> Result<IdPage, StorageError> {
        Ok(IdPage::default())
    }
    async fn list_alarms(&self, _: &ObjectKey) -> Result<Vec<AlarmRecord>, StorageError> {
        Ok(Vec::new())
    }
    async fn list_object_types(&self) -> Result<Vec<String>, StorageError> {
        Ok(Vec::new())
    }
    async fn list_dead_alarms(
        &self,
        _: Option<&str>,
        _: Option<&AlarmKey>,
        _: usize,
    ) -> Result<AlarmPage, StorageError> {
        Ok(AlarmPage::default())
    }
    async fn next_alarm_due(&self) -> Result<Option<SystemTime>, StorageError> {
        Ok(None)
    }
    async fn claim_due_alarms(
        &self,
        _: SystemTime,
        _: SystemTime,
        _: SystemTime,
        _: usize,
    ) -> Result<Vec<AlarmRecord>, StorageError> {
        Ok(Vec::new())
    }
    async fn renew_alarm_claims(
        &self,
        _: &[AlarmClaim],
        _: SystemTime,
    ) -> Result<usize, StorageError> {
        Ok(0)
    }
    async fn finish_alarm(
        &self,
        _: &ObjectKey,
        _: &str,
        _: SystemTime,
    ) -> Result<bool, StorageError> {
        Ok(false)
    }
    async fn fail_alarm(
        &self,
        _: &ObjectKey,
        _: &str,
        _: SystemTime,
        _: u32,
        _: &str,
        _: Option<SystemTime>,
    ) -> Result<bool, StorageError> {
        Ok(false)
    }
    async fn release_alarm(
        &self,
        _: &ObjectKey,
        _: &str,
        _: SystemTime,
    ) -> Result<bool, StorageError> {
        Ok(false)
    }

    async fn kv_get(&self, _: &ObjectKey, _: &str) -> Result<Option<Vec<u8>>, StorageError> {
        Ok(None)
    }

    async fn kv_list(
        &self,
        _: &ObjectKey,
        _: &str,
        _: Option<&str>,
        _: usize,
    ) -> Result<Vec<(String, Vec<u8>)>, StorageError> {
        Ok(Vec::new())
    }

    async fn kv_usage(&self, _: &ObjectKey) -> Result<KvUsage, StorageError> {
        Ok(KvUsage::default())
    }

    async fn load_idempotent_reply(
        &self,
        _: &ObjectKey,
        _: &str,
    ) -> Result<Option<durable_runtime::storage::IdempotentReply>, StorageError> {
        Ok(None)
    }
    async fn sweep_idempotency(&self, _: SystemTime, _: usize) -> Result<usize, StorageError> {
        Ok(0)
    }
}

/// Heap bytes per live and per hibernated object, and the resident memory (RSS) they hold,
/// at each object count.
async fn memory(settings: &Settings) -> Result<Vec<Figure>, String> {
    let counts: &[usize] = if settings.smoke {
        &[10_000]
    } else {
        &settings.memory_objects
    };
    let mut figures = Vec::new();
    for &count in counts {
        figures.extend(memory_at(count).await?);
    }
    Ok(figures)
}

/// The `memory` figures of `count` objects. Resident memory is measured first, from where
/// it settled before any of them started (freed memory of an earlier, smaller count may be
/// reused: it makes a later figure lower, not higher), through their calls, hibernation and
/// shutdown, each right away and settled; then the heap each live object holds.
async fn memory_at(count: usize) -> Result<Vec<Figure>, String> {
    let ids: Arc<Vec<String>> = Arc::new((0..count).map(|i| format!("obj-{i:07}")).collect());
    let per_object = |bytes: f64| bytes / count as f64;
    // Hibernated: every object called once, then idle past `hibernate_after` (with many
    // objects, the first hibernate while the last are called, as they would in service).
    let hibernate_after = Duration::from_millis(500);
    let rt = Runtime::builder(NullStorage)
        .default_options(ObjectOptions::new().with_hibernate_after(hibernate_after))
        .build();
    // Settled first: what an earlier count freed may still be going back to the system.
    let rss_before = settled_resident_bytes().await;
    let region = Region::new(GLOBAL);
    touch_all(&rt, &ids).await?;
    tokio::time::sleep(hibernate_after * 3).await;
    let hibernated = region.change();
    let hibernated_bytes =
        per_object(hibernated.bytes_allocated as f64 - hibernated.bytes_deallocated as f64);
    let hibernated_rss = per_object(resident_bytes() - rss_before);
    // An allocator may hand freed pages back over time (jemalloc's decay: 10 s).
    let hibernated_settled_rss = per_object(settled_resident_bytes().await - rss_before);
    rt.shutdown().await;
    drop(rt);
    let shut_down_rss = per_object(resident_bytes() - rss_before);
    let shut_down_settled_rss = per_object(settled_resident_bytes().await - rss_before);
    // Live: nothing hibernates while the objects are created and measured.
    let live_bytes = {
        let rt = Runtime::builder(NullStorage)
            .default_options(ObjectOptions::new().with_hibernate_after(Duration::from_secs(3600)))
            .build();
        let region = Region::new(GLOBAL);
        touch_all(&rt, &ids).await?;
        // Idle: an object idle for a second gives its task back, staying active.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let live = region.change();
        rt.shutdown().await;
        per_object(live.bytes_allocated as f64 - live.bytes_deallocated as f64)
    };
    let allocator = crate::ALLOCATOR_NAME;
    let mut live_figure = Figure::new(format!("memory-live-{count}"), allocator, "bytes/object");
    live_figure.runs.push(live_bytes);
    live_figure.extra.push(("objects", count as f64));
    live_figure.peak_rss_mib = peak_rss_mib();
    let mut hibernated_figure =
        Figure::new(format!("memory-hib-{count}"), allocator, "bytes/object");
    hibernated_figure.runs.push(hibernated_bytes);
    hibernated_figure
        .extra
        .push(("rss bytes/hibernated object", hibernated_rss));
    hibernated_figure.extra.push((
        "rss bytes/hibernated object, settled",
        hibernated_settled_rss,
    ));
    hibernated_figure
        .extra
        .push(("rss bytes/object after shutdown", shut_down_rss));
    hibernated_figure.extra.push((
        "rss bytes/object after shutdown, settled",
        shut_down_settled_rss,
    ));
    hibernated_figure.peak_rss_mib = peak_rss_mib();
    Ok(vec![live_figure, hibernated_figure])
}

/// The process's resident memory in bytes, from `/proc/self/statm` (Linux; zero elsewhere).
fn resident_bytes() -> f64 {
    // The second field counts resident pages, of 4 KiB on the Linux targets this runs on.
    const PAGE: f64 = 4096.0;
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|statm| statm.split_whitespace().nth(1)?.parse::<f64>().ok())
        .map_or(0.0, |pages| pages * PAGE)
}

/// The process's resident memory once the allocator has given back what it returns over
/// time: jemalloc returns freed pages along its decay curve, within 10 s by default (its
/// purging starts slowly, so a pause in the fall says nothing), mimalloc after a delay, as its
/// threads next allocate or free; the system allocator returns nothing over time.
async fn settled_resident_bytes() -> f64 {
    let settle = if cfg!(any(feature = "jemalloc", feature = "mimalloc")) {
        Duration::from_secs(12)
    } else {
        Duration::from_secs(1)
    };
    tokio::time::sleep(settle).await;
    resident_bytes()
}

/// Calls every object once (64 callers), starting each.
async fn touch_all(rt: &Runtime, ids: &Arc<Vec<String>>) -> Result<(), String> {
    let mut tasks = tokio::task::JoinSet::new();
    for caller in 0..64 {
        let rt = rt.clone();
        let ids = Arc::clone(ids);
        tasks.spawn(async move {
            for i in (caller..ids.len()).step_by(64) {
                BenchCounter::increment(&rt, &ids[i])
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Ok::<_, String>(())
        });
    }
    while let Some(result) = tasks.join_next().await {
        result.map_err(|e| e.to_string())??;
    }
    Ok(())
}

/// Many alarms due within one second: lateness and alarms/s.
async fn alarms(settings: &Settings) -> Result<Vec<Figure>, String> {
    let count = if settings.smoke { 500 } else { 10_000 };
    let mut figure = Figure::new("alarms", settings.backend.name(), "alarms/s");
    let mut lateness = crate::report::histogram();
    for _ in 0..settings.runs {
        FIRED.lock().unwrap_or_else(|p| p.into_inner()).clear();
        let opened = open(settings).await?;
        let start = truncate_to_micros(SystemTime::now() + Duration::from_secs(2));
        let spacing = Duration::from_secs(1) / count as u32;
        let due: Vec<SystemTime> = (0..count).map(|i| start + spacing * i as u32).collect();
        let writes: Vec<ObjectWrite> = due
            .iter()
            .enumerate()
            .map(|(i, due_at)| ObjectWrite {
                key: ObjectKey::new("Ringer", format!("ringer-{i}")),
                expected_version: 0,
                state: Some(br#"{"rung":0}"#.to_vec()),
                alarms: vec![AlarmChange::Set {
                    name: "ring".to_owned(),
                    due_at: *due_at,
                    payload: None,
                }],
                kv: Vec::new(),
                idempotency: None,
                fsm: Default::default(),
            })
            .collect();
        for chunk in writes.chunks(1000) {
            opened
                .store
                .commit(chunk)
                .await
                .map_err(|e| e.to_string())?;
        }
        let rt = Runtime::builder(Arc::clone(&opened.store))
            .alarm_settings(AlarmSettings::default())
            .register::<Ringer>()
            .build();
        crate::objects::wait_for_fired(count, Duration::from_secs(60)).await?;
        let fired = std::mem::take(&mut *FIRED.lock().unwrap_or_else(|p| p.into_inner()));
        let mut last = start;
        for (id, at) in &fired {
            let index: usize = id["ringer-".len()..]
                .parse()
                .map_err(|_| "bad id".to_owned())?;
            let late = at.duration_since(due[index]).unwrap_or_default();
            lateness.saturating_record(late.as_nanos() as u64);
            last = last.max(*at);
        }
        let span = last.duration_since(start).unwrap_or(Duration::from_secs(1));
        figure.runs.push(count as f64 / span.as_secs_f64().max(1.0));
        rt.shutdown().await;
        opened.close().await;
    }
    figure.set_latency(&lateness);
    figure.extra.push(("alarms due within 1 s", count as f64));
    figure.peak_rss_mib = peak_rss_mib();
    Ok(vec![figure])
}
