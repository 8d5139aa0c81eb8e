//! The FSM engine's metrics, recorded through the `metrics` facade like the runtime's (see
//! [`crate::metrics`]): a `durable_fsm_` prefix, counters ending in `_total`, durations in
//! `_seconds`. Labels are FSM, step, queue and outcome names, never instance ids.
//!
//! # Examples
//!
//! ```
//! use durable_runtime::fsm::metrics;
//!
//! assert_eq!(metrics::STEPS, "durable_fsm_steps_total");
//! assert_eq!(metrics::STEP_DURATION, "durable_fsm_step_duration_seconds");
//! assert_eq!(metrics::STEP_ERRORS, "durable_fsm_step_errors_total");
//! assert_eq!(metrics::STALE_OUTCOMES, "durable_fsm_outcomes_stale_total");
//! assert_eq!(metrics::PICKED, "durable_fsm_picked_total");
//! assert_eq!(metrics::PICK_DURATION, "durable_fsm_pick_duration_seconds");
//! assert_eq!(metrics::COMMIT_BATCH_OUTCOMES, "durable_fsm_commit_batch_outcomes");
//! assert_eq!(metrics::COMMIT_DURATION, "durable_fsm_commit_duration_seconds");
//! assert_eq!(metrics::REAPED, "durable_fsm_reaped_total");
//! assert_eq!(metrics::AWAIT_TIMEOUTS, "durable_fsm_await_timeouts_total");
//! assert_eq!(metrics::GC_DELETED, "durable_fsm_gc_deleted_total");
//! assert_eq!(metrics::UNRUNNABLE, "durable_fsm_unrunnable_total");
//! assert_eq!(metrics::INSERT_BATCHES, "durable_fsm_insert_batches_total");
//! assert_eq!(metrics::INSERT_BATCH_ROWS, "durable_fsm_insert_batch_rows");
//! ```

use std::time::Duration;

/// Steps whose outcome was committed, by `fsm`, `step` and `outcome` (`next`, `retry`,
/// `await`, `schedule_childs`, `done`, `stop`), or dropped: `stale` (the claim was lost),
/// `commit_failed` (the store failed; the reaper runs the step again).
pub const STEPS: &str = "durable_fsm_steps_total";
/// Step duration in seconds, from its start to its outcome's commit, by `fsm` and `step`.
pub const STEP_DURATION: &str = "durable_fsm_step_duration_seconds";
/// Errors routed to the error handler, by `fsm`, `step` and `kind` (`failed`, `panicked`,
/// `unencodable`, `invalid_outcome`, `unknown_step`).
pub const STEP_ERRORS: &str = "durable_fsm_step_errors_total";
/// Outcomes dropped because their claim no longer held (the row was reaped), by `fsm`.
pub const STALE_OUTCOMES: &str = "durable_fsm_outcomes_stale_total";
/// Rows claimed by the pickers, by `queue`.
pub const PICKED: &str = "durable_fsm_picked_total";
/// Duration of each pick statement in seconds, by `queue`.
pub const PICK_DURATION: &str = "durable_fsm_pick_duration_seconds";
/// Outcomes per group-committed transaction.
pub const COMMIT_BATCH_OUTCOMES: &str = "durable_fsm_commit_batch_outcomes";
/// Duration of each outcome transaction in seconds, by `outcome` (`ok`, `error`).
pub const COMMIT_DURATION: &str = "durable_fsm_commit_duration_seconds";
/// Executing rows whose lease ended, returned to runnable by the reaper.
pub const REAPED: &str = "durable_fsm_reaped_total";
/// Awaits woken by their timeout.
pub const AWAIT_TIMEOUTS: &str = "durable_fsm_await_timeouts_total";
/// Ended rows deleted by garbage collection.
pub const GC_DELETED: &str = "durable_fsm_gc_deleted_total";
/// Claimed rows this worker cannot run (FSM name or version not registered), left for the
/// reaper (and another worker), by `fsm`. The pickers claim only registered versions, so this
/// counts only rows a store handed out despite the filter.
pub const UNRUNNABLE: &str = "durable_fsm_unrunnable_total";

/// Batches written by `insert_async`'s task (one statement each), by `outcome` (`ok`,
/// `error`).
pub const INSERT_BATCHES: &str = "durable_fsm_insert_batches_total";
/// Instances per batch written by `insert_async`'s task.
pub const INSERT_BATCH_ROWS: &str = "durable_fsm_insert_batch_rows";

pub(crate) fn insert_batch(rows: usize, ok: bool) {
    let outcome = if ok { "ok" } else { "error" };
    metrics::counter!(INSERT_BATCHES, "outcome" => outcome).increment(1);
    metrics::histogram!(INSERT_BATCH_ROWS).record(rows as f64);
}

pub(crate) fn step(fsm: &'static str, step: &'static str, outcome: &'static str, took: Duration) {
    metrics::counter!(STEPS, "fsm" => fsm, "step" => step, "outcome" => outcome).increment(1);
    metrics::histogram!(STEP_DURATION, "fsm" => fsm, "step" => step).record(took.as_secs_f64());
}

pub(crate) fn step_error(fsm: &'static str, step: &'static str, kind: &'static str) {
    metrics::counter!(STEP_ERRORS, "fsm" => fsm, "step" => step, "kind" => kind).increment(1);
}

pub(crate) fn stale(fsm: &'static str) {
    metrics::counter!(STALE_OUTCOMES, "fsm" => fsm).increment(1);
}

pub(crate) fn picked(queue: &str, rows: usize, took: Duration) {
    metrics::counter!(PICKED, "queue" => queue.to_owned()).increment(rows as u64);
    metrics::histogram!(PICK_DURATION, "queue" => queue.to_owned()).record(took.as_secs_f64());
}

pub(crate) fn committed(outcomes: usize, ok: bool, took: Duration) {
    metrics::histogram!(COMMIT_BATCH_OUTCOMES).record(outcomes as f64);
    let outcome = if ok { "ok" } else { "error" };
    metrics::histogram!(COMMIT_DURATION, "outcome" => outcome).record(took.as_secs_f64());
}

pub(crate) fn swept(reaped: u64, timeouts: u64) {
    if reaped > 0 {
        metrics::counter!(REAPED).increment(reaped);
    }
    if timeouts > 0 {
        metrics::counter!(AWAIT_TIMEOUTS).increment(timeouts);
    }
}

pub(crate) fn gc(deleted: u64) {
    if deleted > 0 {
        metrics::counter!(GC_DELETED).increment(deleted);
    }
}

pub(crate) fn unrunnable(fsm: &str) {
    metrics::counter!(UNRUNNABLE, "fsm" => fsm.to_owned()).increment(1);
}
