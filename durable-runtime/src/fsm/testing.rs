//! A testing kit for FSMs: [`drain`] runs everything runnable, in the test's task, through
//! the engine's own pick, step and outcome path, with delays collapsed, and tallies the
//! outcomes; [`advance`] moves the engine's clock (virtual time) and [`sweep`] runs the
//! reaper once, to fire await timeouts and expired leases.
//!
//! Build the engine for a test without queues (so that no background worker competes with
//! `drain`) and, for time, with `clock_follows_tokio()`.
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//! use durable_runtime::fsm::testing::{advance, drain, sweep};
//! use durable_runtime::fsm::{durable_fsm, Engine, MemoryFsmStore, Outcome, StepContext};
//!
//! #[durable_fsm]
//! pub struct Flaky {}
//!
//! #[durable_fsm]
//! impl Flaky {
//!     #[step(initial)]
//!     fn start(&mut self, ctx: &StepContext) -> Outcome<Self> {
//!         if ctx.attempt() < 2 {
//!             return Outcome::retry(Duration::from_secs(60));
//!         }
//!         Outcome::await_signal(["go"], Self::FINISH).timeout(Duration::from_secs(3600))
//!     }
//!
//!     #[step]
//!     fn finish(&mut self, _ctx: &StepContext) -> Outcome<Self> {
//!         Outcome::done(())
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let engine = Engine::builder(MemoryFsmStore::new())
//!     .register::<Flaky>()
//!     .clock_follows_tokio()
//!     .build()?;
//! engine.insert(Flaky {}).await?;
//! // The two retries' delays collapse; the await parks.
//! let tally = drain(&engine).await?;
//! assert_eq!((tally.steps, tally.retry, tally.await_signal), (3, 2, 1));
//! // An hour later the await times out and the instance finishes.
//! advance(&engine, Duration::from_secs(3601));
//! sweep(&engine).await?;
//! assert_eq!(drain(&engine).await?.done, 1);
//! # Ok(()) }
//! ```

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tracing::Instrument;

use super::engine::Engine;
use super::metrics;
use super::outcome::OutcomeKind;
use super::run::Executed;
use super::store::{Committed, Swept};
use super::workers;
use crate::storage::{StorageError, truncate_to_micros};

/// What a [`drain`] ran, by outcome committed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Steps run.
    pub steps: usize,
    /// `next` outcomes.
    pub next: usize,
    /// `retry` outcomes.
    pub retry: usize,
    /// `await_signal` outcomes.
    pub await_signal: usize,
    /// `schedule_childs` outcomes.
    pub schedule_childs: usize,
    /// `done` outcomes.
    pub done: usize,
    /// `stop` outcomes.
    pub stop: usize,
    /// Outcomes dropped because their claim no longer held.
    pub stale: usize,
    /// Steps routed to the error handler.
    pub errors: usize,
}

impl Tally {
    fn count(&mut self, kind: OutcomeKind) {
        match kind {
            OutcomeKind::Next => self.next += 1,
            OutcomeKind::Retry => self.retry += 1,
            OutcomeKind::Await => self.await_signal += 1,
            OutcomeKind::ScheduleChilds => self.schedule_childs += 1,
            OutcomeKind::Done => self.done += 1,
            OutcomeKind::Stop => self.stop += 1,
        }
    }
}

/// How [`drain_with`] runs.
#[derive(Clone, Debug)]
pub struct DrainOptions {
    /// The most steps to run before failing with [`DrainError::Runaway`] (default 1000).
    pub max_steps: usize,
    /// Whether rows whose `eligible_at` is still ahead (retry delays, delayed starts) run
    /// now (default `true`). With `false`, only what is due by the engine's clock runs.
    pub collapse_delays: bool,
    /// The queues to drain (default: every queue the engine knows of: its workers' queues,
    /// its FSMs' queues, and every queue it inserted into).
    pub queues: Option<Vec<String>>,
}

impl Default for DrainOptions {
    fn default() -> Self {
        Self {
            max_steps: 1000,
            collapse_delays: true,
            queues: None,
        }
    }
}

/// Why a drain stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DrainError {
    /// More than `max_steps` steps ran: an FSM that never settles.
    #[error("more than {max_steps} steps ran without everything settling ({tally:?})")]
    Runaway {
        /// The limit.
        max_steps: usize,
        /// What ran.
        tally: Tally,
    },
    /// A runnable row's FSM (name and version) is not registered with the engine; it is left
    /// claimed.
    #[error("the FSM {fsm:?} version {version} is not registered with the engine")]
    Unregistered {
        /// The FSM's name.
        fsm: String,
        /// The version.
        version: i32,
    },
    /// The store failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// Runs every runnable step, one at a time, with delays collapsed, until nothing is runnable;
/// returns what ran. Equivalent to [`drain_with`] with the default options.
///
/// # Errors
///
/// [`DrainError`].
pub async fn drain(engine: &Engine) -> Result<Tally, DrainError> {
    drain_with(engine, DrainOptions::default()).await
}

/// The latest time the stores accept: the end of the year 9999.
fn far_future() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(253_402_300_799)
}

/// Runs runnable steps as [`drain`] does, with `options`.
///
/// # Errors
///
/// [`DrainError`].
pub async fn drain_with(engine: &Engine, options: DrainOptions) -> Result<Tally, DrainError> {
    let shared = &engine.shared;
    let mut tally = Tally::default();
    loop {
        let queues: Vec<String> = match &options.queues {
            Some(queues) => queues.clone(),
            None => super::engine::lock(&shared.known_queues)
                .iter()
                .cloned()
                .collect(),
        };
        let mut ran = false;
        for queue in &queues {
            let now = shared.clock.now();
            let eligible_by = if options.collapse_delays {
                far_future()
            } else {
                now
            };
            let lease_until = truncate_to_micros(now + shared.settings.lease_ttl);
            let claimed = shared
                .store
                .pick(queue, &shared.worker, eligible_by, lease_until, 1, now)
                .await?;
            let Some(claimed) = claimed.into_iter().next() else {
                continue;
            };
            ran = true;
            if tally.steps >= options.max_steps {
                return Err(DrainError::Runaway {
                    max_steps: options.max_steps,
                    tally,
                });
            }
            let Some(runner) = shared.registry.get(&claimed.fsm, claimed.fsm_version) else {
                return Err(DrainError::Unregistered {
                    fsm: claimed.fsm,
                    version: claimed.fsm_version,
                });
            };
            let (fsm, step) = (runner.name(), runner.step_label(&claimed.step));
            let span = workers::step_span(fsm, step, &claimed);
            let started = tokio::time::Instant::now();
            let executed: Executed = runner
                .execute(&claimed, &shared.clock)
                .instrument(span.clone())
                .await;
            workers::record_error(fsm, step, &executed);
            tally.steps += 1;
            if executed.error.is_some() {
                tally.errors += 1;
            }
            let kind = executed.kind;
            let result = workers::commit_batch(shared, vec![executed.commit])
                .instrument(span)
                .await
                .pop()
                .unwrap_or(Ok(Committed::Stale))?;
            let outcome = match result {
                Committed::Applied => {
                    tally.count(kind);
                    kind.as_str()
                }
                Committed::Stale => {
                    tally.stale += 1;
                    metrics::stale(fsm);
                    "stale"
                }
            };
            metrics::step(fsm, step, outcome, started.elapsed());
        }
        if !ran {
            return Ok(tally);
        }
    }
}

/// Moves the engine's clock forward by `by`, without moving tokio's: rows become due, leases
/// end and await deadlines pass as if `by` had gone by.
///
/// # Panics
///
/// If the engine was not built with `clock_follows_tokio()` (the system clock cannot be
/// moved).
pub fn advance(engine: &Engine, by: Duration) {
    assert!(
        engine.shared.clock.jump(by, true),
        "`advance` needs an engine built with `clock_follows_tokio()`"
    );
}

/// Runs the reaper once, now: expired leases return to runnable (attempt + 1) and awaits past
/// their deadline become runnable.
///
/// # Errors
///
/// When the store fails.
pub async fn sweep(engine: &Engine) -> Result<Swept, StorageError> {
    let swept = engine.shared.store.reap(engine.shared.clock.now()).await?;
    engine.shared.changed.notify_waiters();
    Ok(swept)
}
