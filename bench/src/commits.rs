//! The batches group commit forms, read from the runtime's own metrics by a metrics recorder
//! that keeps two histograms, the writes per batch ([`COMMIT_BATCH_WRITES`]) and the duration
//! of each commit ([`COMMIT_DURATION`]), and ignores every other metric: `raw-spread` commits
//! batches of the sizes `spread` formed in the same run, and the durations tell how much of a
//! run the store spent committing.

use std::sync::{Arc, Mutex, OnceLock};

use durable_runtime::metrics::{COMMIT_BATCH_WRITES, COMMIT_DURATION};
use metrics::{
    Counter, Gauge, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit,
};

/// What the recorder saw since [`start`].
#[derive(Clone, Debug, Default)]
pub(crate) struct Commits {
    /// Writes per batch, in commit order.
    pub(crate) sizes: Vec<u32>,
    /// Seconds per commit, in the order they ended.
    pub(crate) seconds: Vec<f64>,
}

/// One recorded histogram.
struct Series {
    commits: Arc<Mutex<Commits>>,
    record: fn(&mut Commits, f64),
}

impl HistogramFn for Series {
    fn record(&self, value: f64) {
        (self.record)(
            &mut self.commits.lock().unwrap_or_else(|p| p.into_inner()),
            value,
        );
    }
}

/// Hands out the two commit histograms; every other metric gets a no-op handle, as without a
/// recorder.
struct CommitRecorder(Arc<Mutex<Commits>>);

impl Recorder for CommitRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> Counter {
        Counter::noop()
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        let record: fn(&mut Commits, f64) = match key.name() {
            COMMIT_BATCH_WRITES => |commits, writes| commits.sizes.push(writes as u32),
            COMMIT_DURATION => |commits, seconds| commits.seconds.push(seconds),
            _ => return Histogram::noop(),
        };
        Histogram::from_arc(Arc::new(Series {
            commits: Arc::clone(&self.0),
            record,
        }))
    }
}

/// The process's recorder, installed on first use.
fn recorded() -> Result<&'static Mutex<Commits>, String> {
    static RECORDED: OnceLock<Result<Arc<Mutex<Commits>>, String>> = OnceLock::new();
    RECORDED
        .get_or_init(|| {
            let commits = Arc::new(Mutex::new(Commits::default()));
            metrics::set_global_recorder(CommitRecorder(Arc::clone(&commits)))
                .map_err(|e| format!("cannot install the commit recorder: {e}"))?;
            Ok(commits)
        })
        .as_ref()
        .map(|commits| &**commits)
        .map_err(Clone::clone)
}

/// Starts recording commits (again): forgets what was recorded so far.
pub(crate) fn start() -> Result<(), String> {
    *recorded()?.lock().unwrap_or_else(|p| p.into_inner()) = Commits::default();
    Ok(())
}

/// The commits recorded since [`start`].
pub(crate) fn take() -> Result<Commits, String> {
    Ok(std::mem::take(
        &mut *recorded()?.lock().unwrap_or_else(|p| p.into_inner()),
    ))
}
