//! `alarms-scale`: many alarms due within one second, next to many stored for much later.
//!
//! Each run stores `due` objects with one alarm each, due evenly within one second starting a
//! few seconds on, and `stored` alarms due a day later (a hundred per object), then starts a
//! runtime and waits until every due alarm has fired. It reports the alarms fired per second,
//! their lateness (from due time to the handler running: p50, p99, p999 and max), and the
//! process's CPU time per firing, which should not grow with the alarms stored for later.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use durable_runtime::storage::{AlarmChange, ObjectKey, ObjectWrite, truncate_to_micros};
use durable_runtime::{AlarmSettings, Runtime};

use crate::Settings;
use crate::objects::{FIRED, Ringer};
use crate::report::{Figure, histogram, median, peak_rss_mib};
use crate::scenarios::open;

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
    for &due in dues {
        let mut cpu_baseline = None;
        for &stored in storeds {
            let mut figure = scale_run(settings, due, stored).await?;
            let cpu = figure
                .extra
                .iter()
                .find(|(name, _)| *name == CPU_PER_FIRING)
                .map_or(0.0, |(_, v)| *v);
            match cpu_baseline {
                None => cpu_baseline = Some(cpu),
                Some(base) if base > 0.0 => figure.extra.push((CPU_RATIO, cpu / base)),
                Some(_) => {}
            }
            figures.push(figure);
        }
    }
    Ok(figures)
}

const CPU_PER_FIRING: &str = "cpu µs/firing";
const CPU_RATIO: &str = "cpu/firing × fewest stored";

/// `settings.runs` runs of `due` alarms due within one second next to `stored` for later.
async fn scale_run(settings: &Settings, due: usize, stored: usize) -> Result<Figure, String> {
    let mut figure = Figure::new(
        format!("alarms-scale-{due}-{stored}"),
        settings.backend.name(),
        "alarms/s",
    );
    let mut kept: Option<(f64, hdrhistogram::Histogram<u64>, f64)> = None;
    let mut cpus = Vec::new();
    for _ in 0..settings.runs {
        let (rate, lateness, max, cpu) = one_run(settings, due, stored).await?;
        figure.runs.push(rate);
        cpus.push(cpu);
        let middle = figure.median();
        if kept
            .as_ref()
            .is_none_or(|(r, ..)| (rate - middle).abs() <= (r - middle).abs())
        {
            kept = Some((rate, lateness, max));
        }
    }
    if let Some((_, lateness, max)) = kept {
        figure.set_latency(&lateness);
        figure.extra.push(("max lateness µs", max));
    }
    figure.extra.push(("alarms due within 1 s", due as f64));
    figure
        .extra
        .push(("alarms stored for later", stored as f64));
    figure.extra.push((CPU_PER_FIRING, median(&mut cpus)));
    figure.peak_rss_mib = peak_rss_mib();
    Ok(figure)
}

/// One run: (alarms fired per second, lateness histogram, max lateness µs, CPU µs per firing).
async fn one_run(
    settings: &Settings,
    due: usize,
    stored: usize,
) -> Result<(f64, hdrhistogram::Histogram<u64>, f64, f64), String> {
    FIRED.lock().unwrap_or_else(|p| p.into_inner()).clear();
    let opened = open(settings).await?;
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
        opened
            .store
            .commit(chunk)
            .await
            .map_err(|e| e.to_string())?;
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
        opened
            .store
            .commit(chunk)
            .await
            .map_err(|e| e.to_string())?;
    }
    drop(writes);
    if started_writing.elapsed() + Duration::from_millis(500) > lead {
        return Err("writing the due alarms took longer than their lead".to_owned());
    }
    let cpu_before = cpu_time();
    let rt = Runtime::builder(Arc::clone(&opened.store))
        .alarm_settings(AlarmSettings::default())
        .register::<Ringer>()
        .build();
    crate::objects::wait_for_fired(due, Duration::from_secs(120)).await?;
    let cpu = cpu_time().saturating_sub(cpu_before);
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
    Ok((
        due as f64 / span.as_secs_f64(),
        lateness,
        max.as_secs_f64() * 1e6,
        cpu.as_secs_f64() * 1e6 / due as f64,
    ))
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
