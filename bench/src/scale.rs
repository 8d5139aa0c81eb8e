//! `scale`: how the cost of a call grows with the number of stored objects and with the size
//! of their state.
//!
//! For each object count N (`--objects`, default 1,000, 10,000, 100,000 and 1,000,000), N
//! objects with a small state are stored directly in batches (not by N calls), every one is
//! activated once (outside the measurement), then 64 callers increment objects picked at
//! random. Then, for each state size (`--state-bytes`, default 16 B, 4 KiB and 64 KiB), the
//! same on `--state-objects` objects (default 10,000) whose state carries that many bytes.
//! Each figure gives calls/s, latency, the bytes the process wrote to disk per call (the
//! `write_bytes` of `/proc/self/io`: the WAL, the checkpoints' copies into the database file
//! and anything else written, counted by the kernel in cache pages as they are dirtied; and
//! its `wchar`, the bytes handed to `write` calls; SQLite only, since a Postgres server writes
//! in its own processes) and its ratio to the first figure of its series. `--plot PATH` draws
//! calls/s and p99 against N as an SVG, with the baseline's rows/s.
//!
//! On SQLite each run has its same-work baseline, measured right after it on the same database
//! (the runtime stopped, and started again for the next run): plain sqlx committing, through a
//! connection made from the store pool's options (page size, cache, memory map; the store's
//! checkpointer still running), batches of the sizes group commit formed in the run, of random
//! rows of the N-row table, with states of the same size (`raw-spread`'s work, see
//! `baseline.rs`). `× raw` is the median of the runs' ratios, each run over the baseline
//! replaying its batches; `raw × first` tells whether the baseline falls with N and state size
//! as the figure does. The same batches are then committed through the store's own `commit`,
//! without a runtime (`store-only rows/s`), to tell the store's SQL from the runtime.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use durable_runtime::storage::{ObjectKey, ObjectWrite, Storage};
use durable_runtime::{Runtime, durable_object};
use hdrhistogram::Histogram;

use crate::report::{Figure, MedianLatency, median};
use crate::scenarios::{Opened, open, sqlite_store};
use crate::{BackendKind, Settings};

/// The callers that call at once.
const CALLERS: usize = 64;

/// The options of `scale`.
#[derive(Clone, Debug)]
pub(crate) struct Options {
    /// Object counts, smallest first.
    objects: Vec<usize>,
    /// State sizes, in bytes of padding.
    state_bytes: Vec<usize>,
    /// Objects of the state-size series.
    state_objects: usize,
    /// Where to write the plot.
    plot: Option<PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            objects: vec![1_000, 10_000, 100_000, 1_000_000],
            state_bytes: vec![16, 4096, 65_536],
            state_objects: 10_000,
            plot: None,
        }
    }
}

impl Options {
    /// Takes `flag` and its value if it is one of `scale`'s; `Ok(false)` if it is not.
    pub(crate) fn parse(
        &mut self,
        flag: &str,
        args: &mut impl Iterator<Item = String>,
    ) -> Result<bool, String> {
        let mut next = || args.next().ok_or(format!("{flag} needs a value"));
        match flag {
            "--objects" => self.objects = list(flag, &next()?)?,
            "--state-bytes" => self.state_bytes = list(flag, &next()?)?,
            "--state-objects" => {
                self.state_objects = next()?.parse().map_err(|e| format!("{flag}: {e}"))?
            }
            "--plot" => self.plot = Some(PathBuf::from(next()?)),
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// A comma-separated list of counts, at least one, none zero, sorted.
pub(crate) fn list(flag: &str, text: &str) -> Result<Vec<usize>, String> {
    let mut values = text
        .split(',')
        .map(|v| v.trim().replace('_', "").parse::<usize>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{flag}: {e}"))?;
    if values.is_empty() || values.contains(&0) {
        return Err(format!("{flag}: positive counts, separated by commas"));
    }
    values.sort_unstable();
    values.dedup();
    Ok(values)
}

/// A counter with padding: the object `scale` calls.
#[durable_object]
pub(crate) struct ScaleCounter {
    count: i64,
    pad: String,
}

#[durable_object(expose)]
impl ScaleCounter {
    #[handler]
    fn handle_increment(&mut self) -> i64 {
        self.count += 1;
        self.count
    }

    #[handler]
    fn handle_get(&self) -> i64 {
        self.count
    }
}

/// The stored state of an object with `pad` bytes of padding: letters that do not repeat in a
/// pattern, as a real state's bytes would not, so that the bytes written are not flattered.
fn state(pad: usize, seed: u64) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({ "count": 0, "pad": padding(pad, seed) })).expect("JSON")
}

/// `pad` letters that do not repeat in a pattern.
fn padding(pad: usize, seed: u64) -> String {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..pad)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b'a' + (x % 26) as u8)
        })
        .collect()
}

pub(crate) async fn run(settings: &Settings) -> Result<Vec<Figure>, String> {
    let options = if settings.smoke {
        Options {
            objects: vec![100, 1_000],
            state_bytes: vec![16, 4096],
            state_objects: 200,
            plot: settings.scale.plot.clone(),
        }
    } else {
        settings.scale.clone()
    };
    let mut by_count = Vec::new();
    for &objects in &options.objects {
        by_count.push(measure(settings, objects, 16, "objects").await?);
    }
    relate(&mut by_count, "× smallest N");
    let mut by_state = Vec::new();
    for &bytes in &options.state_bytes {
        by_state.push(measure(settings, options.state_objects, bytes, "state").await?);
    }
    relate(&mut by_state, "× smallest state");
    if let Some(path) = &options.plot {
        plot(path, settings.backend.name(), &by_count)?;
        eprintln!("durable-bench: scale: plot written to {}", path.display());
    }
    by_count.extend(by_state);
    Ok(by_count)
}

/// Adds each figure's throughput and p99 relative to the first one's, and its baseline's
/// relative to the first one's baseline.
fn relate(figures: &mut [Figure], name: &'static str) {
    let Some(first) = figures.first() else { return };
    let (rate, p99) = (first.median(), first.latency_us.map_or(0.0, |l| l[1]));
    let raw = first.extra(RAW_RATE);
    for figure in figures.iter_mut() {
        let ratio = figure.median() / rate;
        figure.extra.push((name, ratio));
        if let Some([_, fig_p99, _]) = figure.latency_us {
            figure.extra.push(("p99 × first", fig_p99 / p99));
        }
        if let (Some(first), Some(this)) = (raw, figure.extra(RAW_RATE)) {
            figure.extra.push(("raw × first", this / first));
        }
    }
}

/// The baseline's rows/s.
const RAW_RATE: &str = "raw rows/s";

/// A store of `objects` objects of `pad` bytes of padding, its calls measured `settings.runs`
/// times.
async fn measure(
    settings: &Settings,
    objects: usize,
    pad: usize,
    series: &str,
) -> Result<Figure, String> {
    let name = match series {
        "objects" => format!("scale-{objects}"),
        _ => format!("scale-{pad}B"),
    };
    let mut figure = Figure::new(name, settings.backend.name(), "calls/s");
    let (opened, pool) = open_store(settings).await?;
    let started = Instant::now();
    populate(opened.store.as_ref(), objects, pad).await?;
    let populated = started.elapsed().as_secs_f64();
    let ids: Arc<Vec<String>> = Arc::new((0..objects).map(|i| format!("obj-{i}")).collect());
    let started = Instant::now();
    let mut rt = start_runtime(&opened, &ids).await?;
    let warmed = started.elapsed().as_secs_f64();
    let mut latency = MedianLatency::default();
    let mut bytes_per_call = Vec::new();
    let mut syscall_bytes_per_call = Vec::new();
    let mut raw = pool.as_ref().map(|_| RawBaseline::new(settings, pad));
    for run in 0..settings.runs {
        if run > 0 && raw.is_some() {
            // The baseline wrote the rows since the last run: every object is activated again,
            // outside the measurement.
            rt = start_runtime(&opened, &ids).await?;
        }
        // Each run starts with an empty WAL: what it writes is its own.
        if let Some(pool) = &pool {
            truncate_wal(pool).await?;
        }
        crate::commits::start()?;
        let before = written_bytes();
        let (rate, calls, histogram) = drive(&rt, &ids, settings.secs).await?;
        if let (Some(before), Some(after)) = (before, written_bytes()) {
            let calls = calls.max(1) as f64;
            bytes_per_call.push(after.0.saturating_sub(before.0) as f64 / calls);
            syscall_bytes_per_call.push(after.1.saturating_sub(before.1) as f64 / calls);
        }
        let sizes = crate::commits::take()?.sizes;
        latency.offer(&mut figure, rate, histogram);
        // The baseline of this run, right after it: the machine's disk and load change by the
        // minute. It writes the same rows with versions of its own, so the runtime, whose
        // objects hold the versions they committed, stops first.
        if let (Some(pool), Some(raw)) = (&pool, &mut raw) {
            rt.shutdown().await;
            raw.run(pool, &ids, rate, &sizes).await?;
            raw.through_store(opened.store.as_ref(), pool, &ids, &sizes)
                .await?;
        }
    }
    latency.finish(&mut figure);
    if raw.is_none() {
        rt.shutdown().await;
    }
    let raw = raw.map(RawBaseline::finish);
    let encoded = state(pad, 0).len() as f64;
    figure.extra.push(("objects", objects as f64));
    figure.extra.push(("encoded state bytes", encoded));
    if pool.is_some() && !bytes_per_call.is_empty() {
        let bytes = median(&mut bytes_per_call);
        figure.extra.push(("bytes written per call", bytes));
        figure
            .extra
            .push(("bytes written ÷ state", bytes / encoded));
        let bytes = median(&mut syscall_bytes_per_call);
        figure.extra.push(("bytes to write calls per call", bytes));
        figure
            .extra
            .push(("bytes to write calls ÷ state", bytes / encoded));
    }
    if let Some(raw) = raw {
        figure.extra.extend([
            (RAW_RATE, raw.rate),
            ("raw p99 µs", raw.p99_us),
            ("× raw", raw.ratio),
            ("raw writes per batch (mean)", raw.per_batch),
            ("store-only rows/s", raw.store_rate),
            ("store-only × raw", raw.store_rate / raw.rate),
        ]);
        if let Some(bytes) = raw.bytes_per_row {
            figure.extra.push(("raw bytes written per row", bytes));
        }
    }
    figure.extra.push(("populate s", populated));
    figure.extra.push(("activate s", warmed));
    opened.close().await;
    Ok(figure)
}

/// What the same-work baseline of one figure measured.
struct Raw {
    /// Median rows/s.
    rate: f64,
    /// p99 of a batch's commit, of the median run.
    p99_us: f64,
    /// Median of the runs' ratios, each run of the figure over its baseline.
    ratio: f64,
    /// Mean rows per batch, over the runs.
    per_batch: f64,
    /// Median bytes written per row, as `/proc/self/io` counts them.
    bytes_per_row: Option<f64>,
    /// Median rows/s of the same batches committed through the store without a runtime.
    store_rate: f64,
}

/// The runs of a figure's same-work baseline.
struct RawBaseline {
    duration: Duration,
    /// The padding of every state it writes.
    padding: String,
    figure: Figure,
    latency: MedianLatency,
    ratios: Vec<f64>,
    bytes: Vec<f64>,
    sizes: Vec<f64>,
    /// Rows/s of the same batches committed through the store, without a runtime.
    store_rates: Vec<f64>,
}

impl RawBaseline {
    fn new(settings: &Settings, pad: usize) -> Self {
        Self {
            duration: settings.secs,
            padding: padding(pad, u64::MAX),
            figure: Figure::new("raw", settings.backend.name(), "rows/s"),
            latency: MedianLatency::default(),
            ratios: Vec::new(),
            bytes: Vec::new(),
            sizes: Vec::new(),
            store_rates: Vec::new(),
        }
    }

    /// The same batches committed through the store's own `commit`, without a runtime, for as
    /// long as a run: what of the gap to the baseline is the store's SQL and what the
    /// runtime's. Rows/s.
    async fn through_store(
        &mut self,
        store: &dyn Storage,
        pool: &sqlx::SqlitePool,
        ids: &[String],
        sizes: &[u32],
    ) -> Result<(), String> {
        let versions: std::collections::HashMap<String, u64> = sqlx::query_as::<_, (String, i64)>(
            "SELECT object_id, version FROM durable_objects WHERE object_type = 'ScaleCounter'",
        )
        .fetch_all(pool)
        .await
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|(id, version)| (id, version as u64))
        .collect();
        let mut versions: Vec<u64> = ids
            .iter()
            .map(|id| {
                versions
                    .get(id)
                    .copied()
                    .ok_or(format!("`{id}` is not stored"))
            })
            .collect::<Result<_, _>>()?;
        let mut pick = crate::pick::Picker::new(0x2545_F491_4F6C_DD1D);
        truncate_wal(pool).await?;
        let started = Instant::now();
        let mut rows = 0u64;
        let mut picked = Vec::new();
        for &size in sizes.iter().cycle() {
            if started.elapsed() >= self.duration {
                break;
            }
            let size = (size as usize).clamp(1, ids.len());
            picked.clear();
            while picked.len() < size {
                let index = pick.below(ids.len());
                if !picked.contains(&index) {
                    picked.push(index);
                }
            }
            let batch: Vec<ObjectWrite> = picked
                .iter()
                .map(|&i| ObjectWrite {
                    key: ObjectKey::new("ScaleCounter", ids[i].clone()),
                    expected_version: versions[i],
                    state: Some(
                        format!(
                            r#"{{"count":{},"pad":"{}"}}"#,
                            pick.below(1_000_000),
                            self.padding
                        )
                        .into_bytes(),
                    ),
                    alarms: Vec::new(),
                    kv: Vec::new(),
                    idempotency: None,
                    fsm: Default::default(),
                })
                .collect();
            store.commit(&batch).await.map_err(|e| e.to_string())?;
            for &i in &picked {
                versions[i] += 1;
            }
            rows += size as u64;
        }
        self.store_rates
            .push(rows as f64 / started.elapsed().as_secs_f64());
        Ok(())
    }

    /// The baseline of a run of `rate` calls/s whose group commit formed batches of `sizes`:
    /// batches of those sizes of random rows of the store's `ids`, with states of the run's
    /// size, committed with plain sqlx for as long as a run, on a connection made from the
    /// store pool's options.
    async fn run(
        &mut self,
        pool: &sqlx::SqlitePool,
        ids: &[String],
        rate: f64,
        sizes: &[u32],
    ) -> Result<(), String> {
        use sqlx::{ConnectOptions, Connection};

        if sizes.is_empty() {
            return Err("scale: a run formed no batch to replay".to_owned());
        }
        let padding = &self.padding;
        let state = |count: usize| format!(r#"{{"count":{count},"pad":"{padding}"}}"#);
        let mut conn = pool
            .connect_options()
            .connect()
            .await
            .map_err(|e| e.to_string())?;
        truncate_wal(pool).await?;
        let before = written_bytes();
        let done = crate::baseline::raw_spread(
            &mut conn,
            "ScaleCounter",
            ids,
            sizes,
            &state,
            self.duration,
        )
        .await;
        let _ = conn.close().await;
        let (raw_rate, rows, histogram) = done?;
        if let (Some(before), Some(after)) = (before, written_bytes()) {
            self.bytes
                .push(after.0.saturating_sub(before.0) as f64 / rows.max(1) as f64);
        }
        self.ratios.push(rate / raw_rate);
        self.sizes.extend(sizes.iter().map(|&n| f64::from(n)));
        self.latency.offer(&mut self.figure, raw_rate, histogram);
        Ok(())
    }

    fn finish(mut self) -> Raw {
        self.latency.finish(&mut self.figure);
        Raw {
            rate: self.figure.median(),
            p99_us: self.figure.latency_us.map_or(0.0, |l| l[1]),
            ratio: median(&mut self.ratios),
            per_batch: self.sizes.iter().sum::<f64>() / self.sizes.len().max(1) as f64,
            bytes_per_row: (!self.bytes.is_empty()).then(|| median(&mut self.bytes)),
            store_rate: median(&mut self.store_rates),
        }
    }
}

/// A runtime on `opened`'s store with every object of `ids` activated.
async fn start_runtime(opened: &Opened, ids: &Arc<Vec<String>>) -> Result<Runtime, String> {
    let rt = Runtime::builder(Arc::clone(&opened.store))
        .expose::<ScaleCounter>()
        .build();
    warm(&rt, ids).await?;
    Ok(rt)
}

/// Checkpoints the whole WAL and starts it over, so that what a run writes is its own.
async fn truncate_wal(pool: &sqlx::SqlitePool) -> Result<(), String> {
    sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
        .execute(pool)
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

/// The backend, and its pool when it is SQLite.
pub(crate) async fn open_store(
    settings: &Settings,
) -> Result<(Opened, Option<sqlx::SqlitePool>), String> {
    match settings.backend {
        BackendKind::Sqlite | BackendKind::SqliteNormal => {
            let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
            let store = sqlite_store(settings, &dir.path().join("scale.db")).await?;
            let pool = store.pool().clone();
            Ok((Opened::new(Arc::new(store), Some(dir)), Some(pool)))
        }
        BackendKind::Memory | BackendKind::Postgres => Ok((open(settings).await?, None)),
    }
}

/// Stores `count` objects directly, in batches of up to 1,000 (or 4 MiB) per commit.
async fn populate(store: &dyn Storage, count: usize, pad: usize) -> Result<(), String> {
    let per_batch = (4 << 20) / (pad + 64);
    let per_batch = per_batch.clamp(1, 1000);
    let mut next = 0;
    while next < count {
        let end = (next + per_batch).min(count);
        let batch: Vec<ObjectWrite> = (next..end)
            .map(|i| ObjectWrite {
                key: ObjectKey::new("ScaleCounter", format!("obj-{i}")),
                expected_version: 0,
                state: Some(state(pad, i as u64)),
                alarms: Vec::new(),
                kv: Vec::new(),
                idempotency: None,
                fsm: Default::default(),
            })
            .collect();
        store.commit(&batch).await.map_err(|e| e.to_string())?;
        next = end;
    }
    Ok(())
}

/// Activates every object once, `CALLERS` at a time.
async fn warm(rt: &Runtime, ids: &Arc<Vec<String>>) -> Result<(), String> {
    let mut tasks = tokio::task::JoinSet::new();
    for caller in 0..CALLERS {
        let rt = rt.clone();
        let ids = Arc::clone(ids);
        tasks.spawn(async move {
            for id in ids.iter().skip(caller).step_by(CALLERS) {
                ScaleCounter::get(&rt, id)
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

/// `CALLERS` callers incrementing objects picked at random for `duration`: calls/s, calls, and
/// their latency.
async fn drive(
    rt: &Runtime,
    ids: &Arc<Vec<String>>,
    duration: Duration,
) -> Result<(f64, u64, Histogram<u64>), String> {
    let started = Instant::now();
    let deadline = started + duration;
    let mut tasks = tokio::task::JoinSet::new();
    for caller in 0..CALLERS {
        let rt = rt.clone();
        let ids = Arc::clone(ids);
        tasks.spawn(async move {
            let mut histogram = crate::report::histogram();
            let mut pick = crate::pick::Picker::for_caller(caller as u64 + 1);
            let mut done = 0u64;
            while Instant::now() < deadline {
                let id = &ids[pick.below(ids.len())];
                let t = Instant::now();
                ScaleCounter::increment(&rt, id)
                    .await
                    .map_err(|e| e.to_string())?;
                histogram.saturating_record(t.elapsed().as_nanos() as u64);
                done += 1;
            }
            Ok::<_, String>((done, histogram))
        });
    }
    let (total, histogram) = crate::report::gather(&mut tasks).await?;
    let rate = total as f64 / started.elapsed().as_secs_f64();
    Ok((rate, total, histogram))
}

/// Bytes this process has caused to be written to storage so far (`write_bytes` of
/// `/proc/self/io`, less `cancelled_write_bytes`: pages dirtied then truncated away), and bytes
/// it has passed to `write`-like system calls (`wchar`: exact, whether or not they reach the
/// disk; the kernel counts `write_bytes` by cache page, or larger folio, as each becomes
/// dirty, so a write into a page already dirty is not counted again); `None` where the kernel
/// does not tell.
fn written_bytes() -> Option<(u64, u64)> {
    let io = std::fs::read_to_string("/proc/self/io").ok()?;
    let field = |name: &str| {
        io.lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    let dirtied =
        field("write_bytes:")?.saturating_sub(field("cancelled_write_bytes:").unwrap_or(0));
    Some((dirtied, field("wchar:")?))
}

/// Draws calls/s (left axis) and p99 in ms (right axis) against N (log scale) to `path`, and
/// the same-work baseline's rows/s where it was measured.
fn plot(path: &std::path::Path, backend: &str, figures: &[Figure]) -> Result<(), String> {
    use plotters::prelude::*;

    let points: Vec<(f64, f64, f64)> = figures
        .iter()
        .filter_map(|f| {
            let n = f.extra("objects")?;
            Some((n, f.median(), f.latency_us?[1] / 1000.0))
        })
        .collect();
    if points.is_empty() {
        return Err("scale: nothing to plot".to_owned());
    }
    let err = |e: DrawingAreaErrorKind<_>| format!("scale: plot: {e}");
    let (low, high) = points.iter().fold((f64::MAX, f64::MIN), |(lo, hi), p| {
        (lo.min(p.0), hi.max(p.0))
    });
    let x = (low / 2.0)..(high * 2.0);
    let raw: Vec<(f64, f64)> = figures
        .iter()
        .filter_map(|f| Some((f.extra("objects")?, f.extra(RAW_RATE)?)))
        .collect();
    let max_rate = points
        .iter()
        .map(|p| p.1)
        .chain(raw.iter().map(|r| r.1))
        .fold(0.0, f64::max)
        * 1.15;
    let max_p99 = points.iter().map(|p| p.2).fold(0.0, f64::max).max(1.0) * 1.15;

    let root = SVGBackend::new(path, (800, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("durable-bench scale ({backend}, {CALLERS} callers, random objects)"),
            ("sans-serif", 20),
        )
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .right_y_label_area_size(60)
        .build_cartesian_2d(x.clone().log_scale(), 0.0..max_rate)
        .map_err(err)?
        .set_secondary_coord(x.log_scale(), 0.0..max_p99);
    chart
        .configure_mesh()
        .x_desc("objects (N, log scale)")
        .y_desc("calls/s")
        .x_label_formatter(&|n| format!("{n:.0}"))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()
        .map_err(err)?;
    chart
        .configure_secondary_axes()
        .y_desc("p99 latency, ms")
        .draw()
        .map_err(err)?;
    let blue = BLUE.stroke_width(2);
    chart
        .draw_series(LineSeries::new(points.iter().map(|p| (p.0, p.1)), blue))
        .map_err(err)?
        .label("calls/s")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], blue));
    chart
        .draw_series(
            points
                .iter()
                .map(|p| Circle::new((p.0, p.1), 4, BLUE.filled())),
        )
        .map_err(err)?;
    if !raw.is_empty() {
        let dashed = BLUE.mix(0.5).stroke_width(2);
        chart
            .draw_series(DashedLineSeries::new(raw.iter().copied(), 6, 4, dashed))
            .map_err(err)?
            .label("same-work baseline, rows/s")
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], dashed));
    }
    let red = RED.stroke_width(2);
    chart
        .draw_secondary_series(LineSeries::new(points.iter().map(|p| (p.0, p.2)), red))
        .map_err(err)?
        .label("p99, ms")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], red));
    chart
        .draw_secondary_series(
            points
                .iter()
                .map(|p| Circle::new((p.0, p.2), 4, RED.filled())),
        )
        .map_err(err)?;
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerLeft)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_are_parsed_sorted_and_checked() {
        assert_eq!(
            list("--objects", "10000,1_000").unwrap(),
            vec![1_000, 10_000]
        );
        assert!(list("--objects", "0").is_err());
        assert!(list("--objects", "a").is_err());
    }

    #[test]
    fn states_have_the_padding_asked_for() {
        let encoded = state(4096, 3);
        assert!(encoded.len() >= 4096 && encoded.len() < 4096 + 32);
        let value: serde_json::Value = serde_json::from_slice(&encoded).unwrap();
        assert_eq!(value["pad"].as_str().unwrap().len(), 4096);
    }
}
