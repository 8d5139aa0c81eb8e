//! Running one claimed row: decode its state, run its step (panics caught), turn the outcome
//! into a [`Transition`] (errors routed to the error handler), ready to commit. Shared by the
//! engine's workers and the testing kit's `drain`, so both go through the same path.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures_util::FutureExt;

use super::context::StepContext;
use super::definition::Fsm;
use super::error::{StepError, StepErrorKind};
use super::json;
use super::outcome::{AnyInstance, Inner, Outcome, OutcomeKind, Start};
use super::store::{Claimed, Lease, NewInstance, OutcomeCommit, Transition};
use crate::clock::Clock;
use crate::commit::codec;
use crate::object::BoxFuture;
use crate::storage::truncate_to_micros;

/// A step run to its outcome, ready to commit.
#[derive(Debug)]
pub(crate) struct Executed {
    pub(crate) commit: OutcomeCommit,
    pub(crate) kind: OutcomeKind,
    /// The error routed to the error handler, if any.
    pub(crate) error: Option<StepErrorKind>,
}

/// One registered FSM type, erased.
pub(crate) trait Runner: Send + Sync + 'static {
    fn name(&self) -> &'static str;
    fn version(&self) -> i32;
    fn queue(&self) -> &'static str;
    /// The static name of `step`, for metric labels (`"unknown"` for a name that is not a
    /// step).
    fn step_label(&self, step: &str) -> &'static str;
    fn execute<'a>(&'a self, claimed: &'a Claimed, clock: &'a Clock) -> BoxFuture<'a, Executed>;
    /// A new instance from its state given as JSON (fields left out take their defaults),
    /// or why the JSON is not a state of this FSM.
    fn instance_from_json(&self, state: serde_json::Value) -> Result<AnyInstance, String>;
}

pub(crate) struct TypedRunner<F>(std::marker::PhantomData<fn() -> F>);

impl<F: Fsm> TypedRunner<F> {
    pub(crate) fn erased() -> Arc<dyn Runner> {
        Arc::new(Self(std::marker::PhantomData))
    }
}

impl<F: Fsm> Runner for TypedRunner<F> {
    fn name(&self) -> &'static str {
        F::NAME
    }

    fn version(&self) -> i32 {
        F::VERSION
    }

    fn queue(&self) -> &'static str {
        F::QUEUE
    }

    fn step_label(&self, step: &str) -> &'static str {
        F::STEPS
            .iter()
            .find(|name| **name == step)
            .copied()
            .unwrap_or("unknown")
    }

    fn execute<'a>(&'a self, claimed: &'a Claimed, clock: &'a Clock) -> BoxFuture<'a, Executed> {
        Box::pin(execute::<F>(claimed, clock))
    }

    fn instance_from_json(&self, state: serde_json::Value) -> Result<AnyInstance, String> {
        serde_json::from_value::<F>(state)
            .map(AnyInstance::from)
            .map_err(|error| error.to_string())
    }
}

/// The registered FSM types, by name and version.
#[derive(Clone, Default)]
pub(crate) struct Registry {
    runners: Vec<Arc<dyn Runner>>,
}

impl Registry {
    /// Adds `runner`; false if its name and version are taken.
    pub(crate) fn add(&mut self, runner: Arc<dyn Runner>) -> bool {
        if self.get(runner.name(), runner.version()).is_some() {
            return false;
        }
        self.runners.push(runner);
        true
    }

    pub(crate) fn get(&self, fsm: &str, version: i32) -> Option<&Arc<dyn Runner>> {
        self.runners
            .iter()
            .find(|runner| runner.name() == fsm && runner.version() == version)
    }

    /// The newest registered version of `fsm`.
    pub(crate) fn newest(&self, fsm: &str) -> Option<&Arc<dyn Runner>> {
        self.runners
            .iter()
            .filter(|runner| runner.name() == fsm)
            .max_by_key(|runner| runner.version())
    }

    /// The `(name, version)` pairs registered.
    pub(crate) fn versions(&self) -> Vec<(String, i32)> {
        self.runners
            .iter()
            .map(|runner| (runner.name().to_owned(), runner.version()))
            .collect()
    }

    pub(crate) fn all(&self) -> &[Arc<dyn Runner>] {
        &self.runners
    }
}

async fn execute<F: Fsm>(claimed: &Claimed, clock: &Clock) -> Executed {
    let ctx = StepContext::new(F::NAME, claimed, clock.now());
    let lease = Lease {
        id: claimed.id,
        token: claimed.token,
    };
    let finish =
        |transition: Transition, kind: OutcomeKind, error: Option<StepErrorKind>| Executed {
            commit: OutcomeCommit {
                lease,
                received: ctx.awaited_ids(),
                transition,
            },
            kind,
            error,
        };
    let mut state: F = match decode_state::<F>(claimed) {
        Ok(state) => state,
        // Nothing to run a step or an error handler on, and decoding again gives the same
        // answer: the instance fails (its stored state is left as it is).
        Err(reason) => {
            tracing::error!(fsm = F::NAME, id = %claimed.id, %reason, "an FSM instance's stored state does not decode");
            return finish(Transition::Stop { reason }, OutcomeKind::Stop, None);
        }
    };
    let ran = match state.run_step(&claimed.step, &ctx) {
        Some(step) => AssertUnwindSafe(step).catch_unwind().await,
        None => {
            let error = StepError::new(
                StepErrorKind::UnknownStep,
                format!(
                    "`{}` is not a step of the FSM `{}` version {} (its steps: {})",
                    claimed.step,
                    F::NAME,
                    F::VERSION,
                    F::STEPS.join(", ")
                ),
            );
            let (transition, kind) = handle_error::<F>(claimed, &ctx, error, clock).await;
            return finish(transition, kind, Some(StepErrorKind::UnknownStep));
        }
    };
    let error = match ran {
        Ok(Ok(outcome)) => match encode(outcome, &state, clock) {
            Ok((transition, kind)) => return finish(transition, kind, None),
            Err(error) => error,
        },
        Ok(Err(error)) => StepError::failed(error),
        Err(panic) => StepError::new(
            StepErrorKind::Panicked,
            format!("the step panicked: {}", codec::panic_message(&*panic)),
        ),
    };
    let kind = error.kind();
    let (transition, outcome) = handle_error::<F>(claimed, &ctx, error, clock).await;
    finish(transition, outcome, Some(kind))
}

/// Runs the error handler on the state as committed before the step (the failed step's
/// changes are discarded). A handler that panics, or whose outcome cannot be stored, fails
/// the instance: an error handler gets one chance, so a deterministic error never loops.
async fn handle_error<F: Fsm>(
    claimed: &Claimed,
    ctx: &StepContext,
    error: StepError,
    clock: &Clock,
) -> (Transition, OutcomeKind) {
    let reason = error.to_string();
    let stop = |reason: String| (Transition::Stop { reason }, OutcomeKind::Stop);
    let mut state: F = match decode_state::<F>(claimed) {
        Ok(state) => state,
        Err(decode) => return stop(format!("{reason}; then {decode}")),
    };
    match AssertUnwindSafe(state.on_error(error, ctx))
        .catch_unwind()
        .await
    {
        Ok(outcome) => match encode(outcome, &state, clock) {
            Ok(encoded) => encoded,
            Err(failure) => stop(format!(
                "{reason}; and the error handler's outcome cannot be stored: {failure}"
            )),
        },
        Err(panic) => stop(format!(
            "{reason}; and the error handler panicked: {}",
            codec::panic_message(&*panic)
        )),
    }
}

fn decode_state<F: Fsm>(claimed: &Claimed) -> Result<F, String> {
    codec::decode::<F>(claimed.state.as_bytes()).map_err(|failure| {
        format!(
            "the stored state does not decode into `{}` (at {}: {})",
            std::any::type_name::<F>(),
            failure.path,
            failure.message
        )
    })
}

/// `now + delay`, truncated to the microsecond, or an error beyond the clock's range.
fn after(now: SystemTime, delay: Duration, what: &str) -> Result<SystemTime, StepError> {
    now.checked_add(delay)
        .map(truncate_to_micros)
        .ok_or_else(|| {
            StepError::new(
                StepErrorKind::Unencodable,
                format!("the {what} of {delay:?} is beyond the clock's range"),
            )
        })
}

fn unencodable(what: &str, message: String) -> StepError {
    StepError::new(
        StepErrorKind::Unencodable,
        format!("the {what} cannot be stored: {message}"),
    )
}

/// The transition an outcome commits, with the state after the step.
fn encode<F: Fsm>(
    outcome: Outcome<F>,
    state: &F,
    clock: &Clock,
) -> Result<(Transition, OutcomeKind), StepError> {
    let kind = outcome.kind();
    let now = clock.now();
    let encoded_state = || json::encode_state(state).map_err(|e| unencodable("state", e));
    let transition = match outcome.inner {
        Inner::Next(step) => Transition::Next {
            step: step.to_owned(),
            state: encoded_state()?,
        },
        Inner::Retry(delay) => Transition::Retry {
            state: encoded_state()?,
            eligible_at: after(now, delay, "retry delay")?,
        },
        Inner::Await {
            names,
            step,
            timeout,
        } => {
            if names.is_empty() && timeout.is_none() {
                return Err(StepError::new(
                    StepErrorKind::InvalidOutcome,
                    "`await_signal` on no signal name and without a timeout would never wake",
                ));
            }
            Transition::Await {
                step: step.to_owned(),
                state: encoded_state()?,
                names,
                deadline: timeout
                    .map(|timeout| after(now, timeout, "await timeout"))
                    .transpose()?,
            }
        }
        Inner::ScheduleChilds { step, children } => Transition::ScheduleChildren {
            step: step.to_owned(),
            state: encoded_state()?,
            children: children
                .iter()
                .enumerate()
                .map(|(index, child)| {
                    new_instance(child, now).map_err(|e| {
                        unencodable(&format!("child {index} (of the FSM `{}`)", child.fsm), e)
                    })
                })
                .collect::<Result<_, _>>()?,
        },
        Inner::Done(result) => Transition::Done {
            result: result.map_err(|e| unencodable("result", e))?,
        },
        Inner::Stop(reason) => Transition::Stop { reason },
    };
    Ok((transition, kind))
}

/// The row to insert for `instance`, or why its state or start cannot be stored.
pub(crate) fn new_instance(instance: &AnyInstance, now: SystemTime) -> Result<NewInstance, String> {
    let state = instance.state.clone()?;
    let eligible_at = match instance.start {
        Start::Now => now,
        Start::After(delay) => now
            .checked_add(delay)
            .map(truncate_to_micros)
            .ok_or_else(|| format!("the start delay of {delay:?} is beyond the clock's range"))?,
        Start::At(at) => truncate_to_micros(at),
    };
    Ok(NewInstance {
        fsm: instance.fsm.to_owned(),
        fsm_version: instance.fsm_version,
        step: instance.step.to_owned(),
        state,
        queue: instance.queue.clone(),
        priority: instance.priority,
        eligible_at,
        correlation_key: instance.correlation_key.clone(),
        correlation_scope: instance.scope.clone(),
        concurrency_key: instance.concurrency_key.clone(),
        concurrency_limit: instance.concurrency_limit,
        rate_limit_key: instance.rate_limit.as_ref().map(|(key, _)| key.clone()),
        rate_limit_units: instance.rate_limit.as_ref().map_or(1, |(_, units)| *units),
    })
}
