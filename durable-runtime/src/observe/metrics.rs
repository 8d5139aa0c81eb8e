//! Metrics, recorded through the `metrics` facade. The library installs no recorder: install
//! one (Prometheus, StatsD, ...) in the application to collect them. Labels never include
//! object ids, so their cardinality stays bounded by the number of types and handlers.
//!
//! # Examples
//!
//! The names are stable strings, following Prometheus conventions: a `durable_` prefix,
//! counters ending in `_total` and durations in `_seconds`. Refer to them by constant, in a
//! dashboard's code or an exporter's bucket settings, rather than by literal.
//!
//! ```
//! use durable_runtime::metrics;
//!
//! let counters = [
//!     metrics::CALLS,
//!     metrics::ACTIVATIONS,
//!     metrics::HIBERNATIONS,
//!     metrics::WAKES,
//!     metrics::SHUTDOWNS,
//!     metrics::PERSISTENCE_FAILURES,
//!     metrics::QUEUE_REJECTIONS,
//!     metrics::ALARMS_FIRED,
//!     metrics::STALE_RELOADS,
//! ];
//! let durations = [metrics::CALL_DURATION, metrics::WAKE_DURATION, metrics::COMMIT_DURATION];
//! assert!(counters.iter().all(|name| name.ends_with("_total")));
//! assert!(durations.iter().all(|name| name.ends_with("_seconds")));
//!
//! assert_eq!(metrics::CALLS, "durable_calls_total");
//! assert_eq!(metrics::CALL_DURATION, "durable_call_duration_seconds");
//! assert_eq!(metrics::LIVE_OBJECTS, "durable_live_objects");
//! assert_eq!(metrics::ACTIVE_OBJECTS, "durable_active_objects");
//! assert_eq!(metrics::HIBERNATED_OBJECTS, "durable_hibernated_objects");
//! assert_eq!(metrics::ACTIVATIONS, "durable_activations_total");
//! assert_eq!(metrics::HIBERNATIONS, "durable_hibernations_total");
//! assert_eq!(metrics::WAKES, "durable_wakes_total");
//! assert_eq!(metrics::WAKE_DURATION, "durable_wake_duration_seconds");
//! assert_eq!(metrics::SHUTDOWNS, "durable_shutdowns_total");
//! assert_eq!(metrics::PERSISTENCE_FAILURES, "durable_persistence_failures_total");
//! assert_eq!(metrics::QUEUE_REJECTIONS, "durable_queue_rejections_total");
//! assert_eq!(metrics::ALARMS_FIRED, "durable_alarms_fired_total");
//! assert_eq!(metrics::STALE_RELOADS, "durable_stale_reloads_total");
//! assert_eq!(metrics::COMMIT_BATCH_WRITES, "durable_commit_batch_writes");
//! assert_eq!(metrics::COMMIT_DURATION, "durable_commit_duration_seconds");
//! ```

use std::marker::PhantomData;
use std::time::Duration;

use arc_swap::ArcSwap;
use metrics::{Counter, Gauge, Histogram, Key, Label, Level, Metadata};

use crate::activation::registry::Residency;
use crate::object::DurableObject;

/// Calls handled, by `type`, `handler` and `outcome`, counted when the reply goes out: `ok`,
/// `handler_error`, `panicked`, `timeout`, `encode_failed`, `persistence_failed` (the commit
/// the reply waited for failed or conflicted), `activation_failed` or, in cluster mode,
/// `not_owner` (a read queued while this node still served the object's shard, refused once
/// it no longer did).
pub const CALLS: &str = "durable_calls_total";
/// Call duration in seconds, from the object taking the call to its reply (queueing excluded,
/// the commit the reply waited for included), by `type` and `handler`.
pub const CALL_DURATION: &str = "durable_call_duration_seconds";
/// Objects live in memory, by `type`: active, hibernated, or starting (their state not loaded
/// yet). [`ACTIVE_OBJECTS`] and [`HIBERNATED_OBJECTS`] tell them apart.
pub const LIVE_OBJECTS: &str = "durable_live_objects";
/// Objects live in memory with their state decoded, not hibernated (those whose
/// [`status`](crate::Runtime::status) is [`Active`](crate::ObjectStatus::Active)), by `type`.
pub const ACTIVE_OBJECTS: &str = "durable_active_objects";
/// Objects live in memory with only their encoded state kept, after `hibernate_after` (those
/// whose [`status`](crate::Runtime::status) is
/// [`Hibernated`](crate::ObjectStatus::Hibernated)), by `type`.
pub const HIBERNATED_OBJECTS: &str = "durable_hibernated_objects";
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
/// Failed loads, commits, deletes and version checks, by `type`.
pub const PERSISTENCE_FAILURES: &str = "durable_persistence_failures_total";
/// Calls refused because an object's queue was full, by `type`.
pub const QUEUE_REJECTIONS: &str = "durable_queue_rejections_total";
/// Alarm attempts, by `type` and `outcome` (`ok`, `retry`, `dead`, `deferred`, `revoked`).
pub const ALARMS_FIRED: &str = "durable_alarms_fired_total";
/// States thrown away and loaded again because a validated read
/// ([`RuntimeBuilder::validate_reads`](crate::RuntimeBuilder::validate_reads)) found a version
/// written by another runtime, by `type`.
pub const STALE_RELOADS: &str = "durable_stale_reloads_total";
/// Writes per batch handed to the storage by group commit: how many calls share a transaction.
pub const COMMIT_BATCH_WRITES: &str = "durable_commit_batch_writes";
/// Duration in seconds of each storage commit, by `outcome` (`ok`, `conflict`, `error`).
pub const COMMIT_DURATION: &str = "durable_commit_duration_seconds";

/// The call metrics of one object type, as handles registered on a handler's first call: the
/// `metrics` macros build and hash a key on every use, and a call records two metrics.
///
/// Every call of the type reads these, from every worker thread: the list is replaced whole
/// when a handler or outcome is first seen and read through `arc-swap`, so a read writes no
/// shared cache line.
///
/// A handle registered before the application installs its recorder stays a no-op: install it
/// before the first call (as a recorder should be anyway).
pub(crate) struct CallMetrics {
    object_type: &'static str,
    handlers: ArcSwap<Vec<HandlerMetrics>>,
}

#[derive(Clone)]
struct HandlerMetrics {
    handler: &'static str,
    duration: Histogram,
    /// One counter per outcome seen so far.
    calls: Vec<(&'static str, Counter)>,
}

impl CallMetrics {
    pub(crate) fn new(object_type: &'static str) -> Self {
        Self {
            object_type,
            handlers: ArcSwap::default(),
        }
    }

    /// A call of `handler` ended with `outcome` after `took`.
    pub(crate) fn finished(&self, handler: &'static str, outcome: &'static str, took: Duration) {
        if !self.record(handler, outcome, took) {
            self.register(handler, outcome);
            self.record(handler, outcome, took);
        }
    }

    /// Records with registered handles; false if there are none yet.
    fn record(&self, handler: &'static str, outcome: &'static str, took: Duration) -> bool {
        let handlers = self.handlers.load();
        let Some(metrics) = handlers.iter().find(|metrics| metrics.handler == handler) else {
            return false;
        };
        let Some((_, counter)) = metrics.calls.iter().find(|(seen, _)| *seen == outcome) else {
            return false;
        };
        counter.increment(1);
        metrics.duration.record(took.as_secs_f64());
        true
    }

    fn register(&self, handler: &'static str, outcome: &'static str) {
        let object_type = self.object_type;
        self.handlers.rcu(|current| {
            let mut next = Vec::clone(current);
            let at = match next.iter().position(|metrics| metrics.handler == handler) {
                Some(at) => at,
                None => {
                    next.push(HandlerMetrics {
                        handler,
                        duration: metrics::histogram!(CALL_DURATION, "type" => object_type, "handler" => handler),
                        calls: Vec::new(),
                    });
                    next.len() - 1
                }
            };
            let calls = &mut next[at].calls;
            if !calls.iter().any(|(seen, _)| *seen == outcome) {
                calls.push((
                    outcome,
                    metrics::counter!(CALLS, "type" => object_type, "handler" => handler, "outcome" => outcome),
                ));
            }
            next
        });
    }
}

pub(crate) fn live_objects<O: DurableObject>(delta: f64) {
    gauge(LIVE_OBJECTS, TypeLabels::<O>::TYPE).increment(delta);
}

/// An object moved from `before` to `after`: the gauges of active and hibernated objects
/// follow.
pub(crate) fn residency_changed<O: DurableObject>(before: Residency, after: Residency) {
    if before == after {
        return;
    }
    let name = |residency| match residency {
        Residency::Active => Some(ACTIVE_OBJECTS),
        Residency::Hibernated => Some(HIBERNATED_OBJECTS),
        Residency::Unloaded => None,
    };
    if let Some(name) = name(before) {
        gauge(name, TypeLabels::<O>::TYPE).decrement(1.0);
    }
    if let Some(name) = name(after) {
        gauge(name, TypeLabels::<O>::TYPE).increment(1.0);
    }
}

pub(crate) fn count<O: DurableObject>(name: &'static str) {
    counter(name, TypeLabels::<O>::TYPE).increment(1);
}

pub(crate) fn woken<O: DurableObject>(took: Duration) {
    count::<O>(WAKES);
    histogram(WAKE_DURATION, TypeLabels::<O>::TYPE).record(took.as_secs_f64());
}

/// An alarm of type `O` fired with `outcome` (one of the outcomes [`ALARMS_FIRED`] lists).
pub(crate) fn alarm_of_type_fired<O: DurableObject>(outcome: &'static str) {
    let labels = match outcome {
        "ok" => TypeLabels::<O>::ALARM_OK,
        "revoked" => TypeLabels::<O>::ALARM_REVOKED,
        "deferred" => TypeLabels::<O>::ALARM_DEFERRED,
        "retry" => TypeLabels::<O>::ALARM_RETRY,
        "dead" => TypeLabels::<O>::ALARM_DEAD,
        other => return alarm_fired(O::TYPE_NAME, other),
    };
    counter(ALARMS_FIRED, labels).increment(1);
}

/// Where the runtime's metrics come from, for recorders that filter by target or level.
static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

/// The labels of object type `O`'s metrics, built at compile time: recording one builds no
/// list of labels, where the `metrics` macros allocate one at every call (several per firing
/// of an alarm, or per activation).
struct TypeLabels<O>(PhantomData<fn() -> O>);

impl<O: DurableObject> TypeLabels<O> {
    const TYPE: &'static [Label] = &[Label::from_static_parts("type", O::TYPE_NAME)];
    const ALARM_OK: &'static [Label] = &Self::alarm("ok");
    const ALARM_REVOKED: &'static [Label] = &Self::alarm("revoked");
    const ALARM_DEFERRED: &'static [Label] = &Self::alarm("deferred");
    const ALARM_RETRY: &'static [Label] = &Self::alarm("retry");
    const ALARM_DEAD: &'static [Label] = &Self::alarm("dead");

    const fn alarm(outcome: &'static str) -> [Label; 2] {
        [
            Label::from_static_parts("type", O::TYPE_NAME),
            Label::from_static_parts("outcome", outcome),
        ]
    }
}

/// The gauge `name` with `labels`, from the installed recorder.
fn gauge(name: &'static str, labels: &'static [Label]) -> Gauge {
    let key = Key::from_static_parts(name, labels);
    metrics::with_recorder(|recorder| recorder.register_gauge(&key, &METADATA))
}

/// The counter `name` with `labels`, from the installed recorder.
fn counter(name: &'static str, labels: &'static [Label]) -> Counter {
    let key = Key::from_static_parts(name, labels);
    metrics::with_recorder(|recorder| recorder.register_counter(&key, &METADATA))
}

/// The histogram `name` with `labels`, from the installed recorder.
fn histogram(name: &'static str, labels: &'static [Label]) -> Histogram {
    let key = Key::from_static_parts(name, labels);
    metrics::with_recorder(|recorder| recorder.register_histogram(&key, &METADATA))
}

/// `object_type` is the registered type's name where the scheduler has it (no copy), or the
/// alarm's stored one.
pub(crate) fn alarm_fired(object_type: impl Into<metrics::SharedString>, outcome: &'static str) {
    metrics::counter!(ALARMS_FIRED, "type" => object_type, "outcome" => outcome).increment(1);
}

pub(crate) fn commit_batch(writes: usize) {
    metrics::histogram!(COMMIT_BATCH_WRITES).record(writes as f64);
}

pub(crate) fn committed(outcome: &'static str, took: Duration) {
    metrics::histogram!(COMMIT_DURATION, "outcome" => outcome).record(took.as_secs_f64());
}
