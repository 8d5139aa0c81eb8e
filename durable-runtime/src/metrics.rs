//! Metrics, recorded through the `metrics` facade. The library installs no recorder: install
//! one (Prometheus, StatsD, ...) in the application to collect them. Labels never include
//! object ids, so their cardinality stays bounded by the number of types and handlers.

use std::time::Duration;

use dashmap::DashMap;
use metrics::{Counter, Histogram};

/// Calls handled, by `type`, `handler` and `outcome`.
pub const CALLS: &str = "durable_calls_total";
/// Call duration in seconds (queueing excluded), by `type` and `handler`.
pub const CALL_DURATION: &str = "durable_call_duration_seconds";
/// Objects live in memory (active or hibernated), by `type`.
pub const LIVE_OBJECTS: &str = "durable_live_objects";
/// Activations (state loaded or created), by `type`.
pub const ACTIVATIONS: &str = "durable_activations_total";
/// Hibernations, by `type`.
pub const HIBERNATIONS: &str = "durable_hibernations_total";
/// Wakes from hibernation, by `type`.
pub const WAKES: &str = "durable_wakes_total";
/// Wake duration in seconds, by `type`.
pub const WAKE_DURATION: &str = "durable_wake_duration_seconds";
/// Objects that left memory, by `type`.
pub const SHUTDOWNS: &str = "durable_shutdowns_total";
/// Failed loads and commits, by `type`.
pub const PERSISTENCE_FAILURES: &str = "durable_persistence_failures_total";
/// Calls refused because an object's queue was full, by `type`.
pub const QUEUE_REJECTIONS: &str = "durable_queue_rejections_total";
/// Alarms fired, by `type` and `outcome` (`ok`, `retry`, `dead`).
pub const ALARMS_FIRED: &str = "durable_alarms_fired_total";

/// The call metrics of one object type, as handles registered on first use: the `metrics`
/// macros build and hash a key on every use, and a call records two metrics.
///
/// A handle registered before the application installs its recorder stays a no-op: install it
/// before the first call (as a recorder should be anyway).
pub(crate) struct CallMetrics {
    object_type: &'static str,
    calls: DashMap<(&'static str, &'static str), Counter>,
    durations: DashMap<&'static str, Histogram>,
}

impl CallMetrics {
    pub(crate) fn new(object_type: &'static str) -> Self {
        Self {
            object_type,
            calls: DashMap::new(),
            durations: DashMap::new(),
        }
    }

    /// A call of `handler` ended with `outcome` after `took`.
    pub(crate) fn finished(&self, handler: &'static str, outcome: &'static str, took: Duration) {
        let object_type = self.object_type;
        match self.calls.get(&(handler, outcome)) {
            Some(counter) => counter.increment(1),
            None => self
                .calls
                .entry((handler, outcome))
                .or_insert_with(|| {
                    metrics::counter!(CALLS, "type" => object_type, "handler" => handler, "outcome" => outcome)
                })
                .increment(1),
        }
        match self.durations.get(handler) {
            Some(histogram) => histogram.record(took.as_secs_f64()),
            None => self
                .durations
                .entry(handler)
                .or_insert_with(|| {
                    metrics::histogram!(CALL_DURATION, "type" => object_type, "handler" => handler)
                })
                .record(took.as_secs_f64()),
        }
    }
}

pub(crate) fn live_objects(object_type: &'static str, delta: f64) {
    metrics::gauge!(LIVE_OBJECTS, "type" => object_type).increment(delta);
}

pub(crate) fn count(name: &'static str, object_type: &'static str) {
    metrics::counter!(name, "type" => object_type).increment(1);
}

pub(crate) fn woken(object_type: &'static str, took: Duration) {
    count(WAKES, object_type);
    metrics::histogram!(WAKE_DURATION, "type" => object_type).record(took.as_secs_f64());
}

pub(crate) fn alarm_fired(object_type: &str, outcome: &'static str) {
    metrics::counter!(ALARMS_FIRED, "type" => object_type.to_owned(), "outcome" => outcome)
        .increment(1);
}
