//! `alarms-scale`: many alarms due within one second, next to many stored for much later.
//!
//! Each run stores `due` objects with one alarm each, due evenly within one second starting a
//! few seconds on, and `stored` alarms due a day later (a hundred per object), then starts a
//! runtime and waits until every due alarm has fired. It reports the alarms fired per second,
//! their lateness (from due time to the handler running: p50, p99, p999 and max), and the
//! process's CPU time and heap allocations per firing, which should not grow with the alarms
//! stored for later.
//!
//! On SQLite each run is followed by its same-work baseline (`baseline::raw_firing`): the same
//! alarms stored again in a new database with the same settings, fired with plain sqlx as they
//! become due, with only the storage work of a firing (claim, read of the object, its new state
//! committed with the alarm's deletion), claimed ahead as the scheduler claims and committed as
//! group commit batches writes (every due alarm held, up to its largest batch). When more
//! alarms are due than the store can fire, its fired/s and lateness are the best this machine
//! and store allow; `fired/s × raw` is the median of the runs' ratios, and its capacity (alarms
//! fired per second spent working) tells how many alarms due within one second it could fire.
//!
//! With more than one `--due`, a last figure per count stored for later (`alarms-on-time-N`)
//! says up to which of them alarms fired on time, p99 lateness within 10 ms at that count and
//! every smaller one, for the runtime (its value) and the baseline, next to the most the
//! baseline fired per second: when the machine's store cannot fire the largest burst, how
//! close to what it can fire the runtime stays on time.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use durable_runtime::storage::{AlarmChange, ObjectKey, ObjectWrite, Storage, truncate_to_micros};
use durable_runtime::{AlarmSettings, Runtime};
use sqlx::{ConnectOptions, Connection};

use crate::objects::{FIRED, Ringer};
use crate::report::{Figure, histogram, median, peak_rss_mib};
use crate::scenarios::open;
use crate::{BackendKind, Settings};

/// The most writes group commit puts in one transaction (the runtime's, not public).
const GROUP_COMMIT_MAX_BATCH: usize = 512;

/// Alarms stored on each object that holds alarms for later.
const STORED_PER_OBJECT: usize = 100;

/// The options of `alarms-scale`: `--due` and `--stored`, comma-separated counts.
#[derive(Clone, Debug)]
pub(crate) struct Options {
    /// Alarms due within one second, one series each.
    due: Vec<usize>,
    /// Alarms stored for later, in each series.
    stored: Vec<usize>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            due: vec![10_000, 100_000],
            stored: vec![10_000, 1_000_000],
        }
    }
}

impl Options {
    /// Takes `flag` and its value if it is one of `alarms-scale`'s; `Ok(false)` if it is not.
    pub(crate) fn parse(
        &mut self,
        flag: &str,
        args: &mut impl Iterator<Item = String>,
    ) -> Result<bool, String> {
        let target = match flag {
            "--due" => &mut self.due,
            "--stored" => &mut self.stored,
            _ => return Ok(false),
        };
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        *target = crate::scale::list(flag, &value)?;
        Ok(true)
    }
}

/// Runs every combination of alarms due within one second and alarms stored for later.
pub(crate) async fn alarms_scale(settings: &Settings) -> Result<Vec<Figure>, String> {
    let (dues, storeds): (&[usize], &[usize]) = if settings.smoke {
        (&[500], &[1_000, 10_000])
    } else {
        (&settings.alarms_scale.due, &settings.alarms_scale.stored)
    };
    let mut figures = Vec::new();
    // By count stored for later: each burst's due count and what it measured.
    let mut bursts: Vec<Vec<(usize, Burst)>> = vec![Vec::new(); storeds.len()];
    for &due in dues {
        let mut cpu_baseline = None;
        for (i, &stored) in storeds.iter().enumerate() {
            // A smoke run measures the baseline once, to keep it short.
            let baseline = !settings.smoke || i == 0;
            let mut figure = scale_run(settings, due, stored, baseline).await?;
            bursts[i].push((due, Burst::of(&figure)));
            let cpu = figure.extra(CPU_PER_FIRING).unwrap_or(0.0);
            match cpu_baseline {
                None => cpu_baseline = Some(cpu),
                Some(base) if base > 0.0 => figure.extra.push((CPU_RATIO, cpu / base)),
                Some(_) => {}
            }
            figures.push(figure);
        }
    }
    if dues.len() > 1 {
        for (&stored, measured) in storeds.iter().zip(&bursts) {
            figures.extend(on_time_figure(settings, stored, measured));
        }
    }
    Ok(figures)
}

/// The p99 lateness within which a burst counts as fired on time, in µs.
const ON_TIME_P99_US: f64 = 10_000.0;

/// What one burst (a due count) measured, for [`on_time_figure`].
#[derive(Clone, Copy, Debug, Default)]
struct Burst {
    /// The runtime's p99 lateness, in µs (the median of the runs').
    p99_us: Option<f64>,
    /// The baseline's p99 lateness, in µs (the median of the runs'), and its alarms fired per
    /// second.
    raw: Option<(f64, f64)>,
}

impl Burst {
    fn of(figure: &Figure) -> Self {
        Self {
            p99_us: figure.extra(P99_OF_RUNS),
            raw: figure
                .extra(RAW_P99_OF_RUNS)
                .zip(figure.extra("raw fired/s")),
        }
    }
}

/// The largest due count of `bursts` that fired on time (the median of its runs' p99 lateness
/// within [`ON_TIME_P99_US`]), as did every smaller one; zero if the smallest did not. `p99`
/// gives a burst's p99 lateness (µs), if it was measured.
fn on_time_up_to(bursts: &[(usize, Burst)], p99: impl Fn(&Burst) -> Option<f64>) -> usize {
    let mut sorted: Vec<&(usize, Burst)> = bursts.iter().collect();
    sorted.sort_by_key(|(due, _)| *due);
    sorted
        .into_iter()
        .take_while(|(_, burst)| p99(burst).is_some_and(|us| us <= ON_TIME_P99_US))
        .last()
        .map_or(0, |(due, _)| *due)
}

/// The figure `alarms-on-time-{stored}`: up to which burst the runtime fired on time (its
/// value), the same for the baseline, and the most the baseline fired per second. None
/// without a baseline.
fn on_time_figure(settings: &Settings, stored: usize, bursts: &[(usize, Burst)]) -> Option<Figure> {
    let raw_most = bursts
        .iter()
        .filter_map(|(_, burst)| burst.raw.map(|(_, fired)| fired))
        .reduce(f64::max)?;
    let runtime = on_time_up_to(bursts, |burst| burst.p99_us);
    let raw = on_time_up_to(bursts, |burst| burst.raw.map(|(p99, _)| p99));
    let mut figure = Figure::new(
        format!("alarms-on-time-{stored}"),
        settings.backend.name(),
        "due/s on time",
    );
    figure.runs.push(runtime as f64);
    figure.extra.extend([
        ("raw due/s on time", raw as f64),
        ("raw fired/s at most", raw_most),
        ("on time × raw fired/s at most", runtime as f64 / raw_most),
    ]);
    figure.peak_rss_mib = peak_rss_mib();
    Some(figure)
}

const CPU_PER_FIRING: &str = "cpu µs/firing";
const CPU_RATIO: &str = "cpu/firing × fewest stored";

/// `settings.runs` runs of `due` alarms due within one second next to `stored` for later, each
/// followed by its baseline if `baseline` (and the backend is SQLite).
async fn scale_run(
    settings: &Settings,
    due: usize,
    stored: usize,
    baseline: bool,
) -> Result<Figure, String> {
    let mut figure = Figure::new(
        format!("alarms-scale-{due}-{stored}"),
        settings.backend.name(),
        "alarms/s",
    );
    let mut kept: Option<(f64, hdrhistogram::Histogram<u64>, f64)> = None;
    let (mut cpus, mut allocations) = (Vec::new(), Vec::new());
    let mut raw = Figure::new("raw firing", settings.backend.name(), "alarms/s");
    let mut raw_kept: Option<(f64, hdrhistogram::Histogram<u64>, f64)> = None;
    let mut raw_committed = Vec::new();
    let (mut capacities, mut ratios) = (Vec::new(), Vec::new());
    let (mut per_batch, mut raw_per_batch) = (Vec::new(), Vec::new());
    // Each run's p99 lateness, in µs: the median run by rate says little of lateness when
    // every run fires at the rate alarms come due.
    let (mut p99s, mut raw_p99s) = (Vec::new(), Vec::new());
    let raw_baseline = baseline
        && matches!(
            settings.backend,
            BackendKind::Sqlite | BackendKind::SqliteNormal
        );
    for _ in 0..settings.runs {
        let run = one_run(settings, due, stored).await?;
        figure.runs.push(run.rate);
        cpus.push(run.cpu_us);
        allocations.push(run.allocations);
        p99s.push(p99_us(&run.lateness));
        keep_median(&mut kept, &figure, run.rate, run.lateness, run.max_us);
        if raw_baseline {
            let writes: u64 = run.sizes.iter().map(|&n| u64::from(n)).sum();
            per_batch.push(writes as f64 / run.sizes.len().max(1) as f64);
            let base = raw_run(settings, due, stored).await?;
            raw_per_batch.push(base.per_batch);
            raw_committed.push(base.committed_p99_us);
            raw.runs.push(base.rate);
            capacities.push(base.capacity);
            ratios.push(run.rate / base.rate);
            raw_p99s.push(p99_us(&base.lateness));
            keep_median(&mut raw_kept, &raw, base.rate, base.lateness, base.max_us);
        }
    }
    if let Some((_, lateness, max)) = kept {
        figure.set_latency(&lateness);
        figure.extra.push(("max lateness µs", max));
    }
    figure.extra.push((P99_OF_RUNS, median(&mut p99s)));
    figure.extra.push(("alarms due within 1 s", due as f64));
    figure
        .extra
        .push(("alarms stored for later", stored as f64));
    figure.extra.push((CPU_PER_FIRING, median(&mut cpus)));
    figure
        .extra
        .push(("allocations/firing", median(&mut allocations)));
    if let Some((_, lateness, max)) = raw_kept {
        let us = |q: f64| lateness.value_at_quantile(q) as f64 / 1000.0;
        figure.extra.extend([
            ("writes per commit (mean)", median(&mut per_batch)),
            ("raw fired/s", raw.median()),
            ("raw writes per commit (mean)", median(&mut raw_per_batch)),
            ("raw fired/s while working", median(&mut capacities)),
            ("raw p50 lateness µs", us(0.5)),
            ("raw p99 lateness µs", us(0.99)),
            ("raw max lateness µs", max),
            ("raw p99 to commit end µs", median(&mut raw_committed)),
            (RAW_P99_OF_RUNS, median(&mut raw_p99s)),
            ("fired/s × raw", median(&mut ratios)),
        ]);
    }
    figure.peak_rss_mib = peak_rss_mib();
    Ok(figure)
}

/// The median of the runs' p99 lateness, in µs: what [`on_time_figure`] judges a burst by.
const P99_OF_RUNS: &str = "p99 lateness µs, median of runs";
const RAW_P99_OF_RUNS: &str = "raw p99 lateness µs, median of runs";

/// The p99 of a lateness histogram (nanoseconds), in µs.
fn p99_us(lateness: &hdrhistogram::Histogram<u64>) -> f64 {
    lateness.value_at_quantile(0.99) as f64 / 1000.0
}

/// Keeps `lateness` if `rate` is the run closest to `figure`'s median so far.
fn keep_median(
    kept: &mut Option<(f64, hdrhistogram::Histogram<u64>, f64)>,
    figure: &Figure,
    rate: f64,
    lateness: hdrhistogram::Histogram<u64>,
    max_us: f64,
) {
    let middle = figure.median();
    if kept
        .as_ref()
        .is_none_or(|(r, ..)| (rate - middle).abs() <= (r - middle).abs())
    {
        *kept = Some((rate, lateness, max_us));
    }
}

/// What one run measured.
struct Run {
    /// Alarms fired per second, over at least the second they were due in.
    rate: f64,
    /// From due time to firing, in nanoseconds.
    lateness: hdrhistogram::Histogram<u64>,
    /// The largest lateness, in µs.
    max_us: f64,
    /// The process's CPU time per firing, in µs.
    cpu_us: f64,
    /// Heap allocations per firing, in every thread: what the allocator's share of the CPU
    /// time follows, without the machine's noise.
    allocations: f64,
    /// The writes of each batch group commit formed.
    sizes: Vec<u32>,
}

/// The alarms of one run, stored: `stored` for a day later (a hundred per object) and `due`
/// (one per object) due evenly within one second starting a few seconds on. Returns the start
/// of that second and each due alarm's due time, by object (`ringer-{i}`).
async fn store_alarms(
    store: &dyn Storage,
    due: usize,
    stored: usize,
) -> Result<(SystemTime, Vec<SystemTime>), String> {
    let later = truncate_to_micros(SystemTime::now() + Duration::from_secs(24 * 3600));
    let holders = stored.div_ceil(STORED_PER_OBJECT);
    let far: Vec<ObjectWrite> = (0..holders)
        .map(|i| {
            let names = STORED_PER_OBJECT.min(stored - i * STORED_PER_OBJECT);
            ObjectWrite {
                key: ObjectKey::new("Ringer", format!("later-{i}")),
                expected_version: 0,
                state: Some(br#"{"rung":0}"#.to_vec()),
                alarms: (0..names)
                    .map(|n| AlarmChange::Set {
                        name: format!("ring-{n}"),
                        due_at: later + Duration::from_micros((i * STORED_PER_OBJECT + n) as u64),
                        payload: None,
                    })
                    .collect(),
                kv: Vec::new(),
                idempotency: None,
                fsm: Default::default(),
            }
        })
        .collect();
    for chunk in far.chunks(100) {
        store.commit(chunk).await.map_err(|e| e.to_string())?;
    }
    drop(far);
    let mut writes = Vec::with_capacity(due);
    for i in 0..due {
        writes.push(ObjectWrite {
            key: ObjectKey::new("Ringer", format!("ringer-{i}")),
            expected_version: 0,
            state: Some(br#"{"rung":0}"#.to_vec()),
            alarms: Vec::new(),
            kv: Vec::new(),
            idempotency: None,
            fsm: Default::default(),
        });
    }
    // Due after the writes, whatever they take (about 20 µs each at most on a loaded machine).
    let lead = Duration::from_secs(2) + Duration::from_micros(20) * due as u32;
    let started_writing = Instant::now();
    let start = truncate_to_micros(SystemTime::now() + lead);
    let spacing = Duration::from_secs(1) / due as u32;
    let due_at: Vec<SystemTime> = (0..due).map(|i| start + spacing * i as u32).collect();
    for (write, at) in writes.iter_mut().zip(&due_at) {
        write.alarms.push(AlarmChange::Set {
            name: "ring".to_owned(),
            due_at: *at,
            payload: None,
        });
    }
    for chunk in writes.chunks(1000) {
        store.commit(chunk).await.map_err(|e| e.to_string())?;
    }
    drop(writes);
    if started_writing.elapsed() + Duration::from_millis(500) > lead {
        return Err("writing the due alarms took longer than their lead".to_owned());
    }
    Ok((start, due_at))
}

/// One run of the runtime firing the alarms.
async fn one_run(settings: &Settings, due: usize, stored: usize) -> Result<Run, String> {
    FIRED.lock().unwrap_or_else(|p| p.into_inner()).clear();
    let opened = open(settings).await?;
    let (start, due_at) = store_alarms(opened.store.as_ref(), due, stored).await?;
    crate::commits::start()?;
    let cpu_before = cpu_time();
    // Every thread's allocations count, the connections' included.
    let allocations = stats_alloc::Region::new(crate::GLOBAL);
    let rt = Runtime::builder(Arc::clone(&opened.store))
        .alarm_settings(AlarmSettings::default())
        .register::<Ringer>()
        .build();
    crate::objects::wait_for_fired(due, Duration::from_secs(120)).await?;
    let cpu = cpu_time().saturating_sub(cpu_before);
    let allocations = allocations.change().allocations as f64 / due as f64;
    let sizes = crate::commits::take()?.sizes;
    let fired = std::mem::take(&mut *FIRED.lock().unwrap_or_else(|p| p.into_inner()));
    let mut lateness = histogram();
    let mut last = start;
    let mut max = Duration::ZERO;
    for (id, at) in &fired {
        let index: usize = id
            .strip_prefix("ringer-")
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| format!("an alarm of `{id}` fired"))?;
        let late = at.duration_since(due_at[index]).unwrap_or_default();
        lateness.saturating_record(late.as_nanos() as u64);
        max = max.max(late);
        last = last.max(*at);
    }
    // The alarms are due over one second: on time, `due` fire in about one second.
    let span = last
        .duration_since(start)
        .unwrap_or_default()
        .max(Duration::from_secs(1));
    rt.shutdown().await;
    opened.close().await;
    Ok(Run {
        rate: due as f64 / span.as_secs_f64(),
        lateness,
        max_us: max.as_secs_f64() * 1e6,
        cpu_us: cpu.as_secs_f64() * 1e6 / due as f64,
        allocations,
        sizes,
    })
}

/// What one run of the baseline measured.
struct RawRun {
    /// Alarms fired per second, as [`Run::rate`].
    rate: f64,
    /// Alarms fired per second spent claiming, reading and committing.
    capacity: f64,
    /// From due time to the end of the firing commit, in nanoseconds.
    lateness: hdrhistogram::Histogram<u64>,
    /// The largest lateness, in µs.
    max_us: f64,
    /// Alarms fired per commit, on average.
    per_batch: f64,
    /// p99 of the time from due to the end of the firing commit, in µs.
    committed_p99_us: f64,
}

/// The same-work baseline of a run: the same alarms stored in a new SQLite database with the
/// run's settings, fired with plain sqlx on a connection made from the store pool's options
/// (the store's checkpointer running), claimed as the scheduler claims by default and
/// committed in batches as large as group commit's.
async fn raw_run(settings: &Settings, due: usize, stored: usize) -> Result<RawRun, String> {
    let (opened, pool) = crate::scale::open_store(settings).await?;
    let pool = pool.ok_or("the raw firing baseline needs SQLite")?;
    let (start, _) = store_alarms(opened.store.as_ref(), due, stored).await?;
    let mut conn = pool
        .connect_options()
        .connect()
        .await
        .map_err(|e| e.to_string())?;
    let firing = crate::baseline::raw_firing(
        &mut conn,
        due,
        &crate::baseline::Claiming {
            batch: AlarmSettings::default().claim_batch,
            ahead: AlarmSettings::default().claim_ahead,
            commit_batch: GROUP_COMMIT_MAX_BATCH,
        },
        Duration::from_secs(120),
    )
    .await;
    let _ = conn.close().await;
    opened.close().await;
    let firing = firing?;
    let span = firing
        .last
        .duration_since(start)
        .unwrap_or_default()
        .max(Duration::from_secs(1));
    Ok(RawRun {
        rate: firing.fired as f64 / span.as_secs_f64(),
        capacity: firing.fired as f64 / firing.busy.as_secs_f64().max(1e-9),
        max_us: firing.lateness.max() as f64 / 1000.0,
        per_batch: firing.fired as f64 / firing.commits.max(1) as f64,
        committed_p99_us: firing.committed.value_at_quantile(0.99) as f64 / 1000.0,
        lateness: firing.lateness,
    })
}

/// The CPU time (user and system) this process used so far (Linux; zero elsewhere).
fn cpu_time() -> Duration {
    // Fields 14 and 15 of /proc/self/stat, after the parenthesised command name, in clock
    // ticks of 1/100 s (the kernel's USER_HZ on Linux).
    let ticks = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| {
            let after_name = stat.rsplit_once(')')?.1.to_owned();
            let fields: Vec<&str> = after_name.split_whitespace().collect();
            let user: u64 = fields.get(11)?.parse().ok()?;
            let system: u64 = fields.get(12)?.parse().ok()?;
            Some(user + system)
        })
        .unwrap_or(0);
    Duration::from_millis(ticks * 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn burst(p99_us: f64, raw_p99_us: f64, raw_fired: f64) -> Burst {
        Burst {
            p99_us: Some(p99_us),
            raw: Some((raw_p99_us, raw_fired)),
        }
    }

    #[test]
    fn on_time_stops_at_the_first_late_burst() {
        let bursts = [
            (30_000, burst(4_700.0, 12_700.0, 30_000.0)),
            (20_000, burst(2_500.0, 9_000.0, 20_000.0)),
            (100_000, burst(2_250_000.0, 2_210_000.0, 30_800.0)),
            // On time again, but above a burst that was late: not counted.
            (200_000, burst(9_000.0, 9_000.0, 31_000.0)),
        ];
        assert_eq!(on_time_up_to(&bursts, |b| b.p99_us), 30_000);
        assert_eq!(
            on_time_up_to(&bursts, |b| b.raw.map(|(p99, _)| p99)),
            20_000
        );
        let late = [(10_000, burst(10_001.0, 0.0, 0.0))];
        assert_eq!(on_time_up_to(&late, |b| b.p99_us), 0);
        assert_eq!(
            on_time_up_to(&[(10_000, Burst::default())], |b| b.p99_us),
            0
        );
    }
}
