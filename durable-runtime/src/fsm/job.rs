//! Jobs: one-step FSMs declared with `#[job]` ([`JobSettings`], generated) and
//! [`Job`] (implemented by hand), retried with capped exponential backoff.
//!
//! A job is an FSM with a single step, `perform`. Success ends it `done`; an error retries it
//! after `backoff × 2^attempt` (capped at `max_backoff`) until `max_attempts` runs have failed,
//! and then ends it `failed` with the last error as its `last_error`. A worker crash counts as
//! an attempt too (the reaper returns the row with attempt + 1). Inserting, signalling,
//! listing and running go through the same [`Engine`](super::Engine) as every FSM.

use std::future::Future;
use std::time::Duration;

use super::context::StepContext;
use super::definition::FsmState;
use super::error::StepError;
use super::outcome::Outcome;
use crate::object::{BoxError, BoxFuture};

/// The retry policy of a job, implemented by `#[job]` from its options.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use durable_runtime::fsm::{job, Job, JobSettings, StepContext};
///
/// #[job(queue = "mail", max_attempts = 4, backoff = "1s", max_backoff = "5s")]
/// pub struct SendEmail {
///     to: String,
/// }
///
/// impl Job for SendEmail {
///     type Error = String;
///
///     async fn perform(&self, _ctx: &StepContext) -> Result<(), String> {
///         Ok(())
///     }
/// }
///
/// assert_eq!(SendEmail::MAX_ATTEMPTS, 4);
/// assert_eq!(SendEmail::delay(0), Duration::from_secs(1));
/// assert_eq!(SendEmail::delay(2), Duration::from_secs(4));
/// assert_eq!(SendEmail::delay(3), Duration::from_secs(5)); // capped
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not declared as a job",
    label = "not a job",
    note = "add `#[job]` (with its options, such as `#[job(max_attempts = 5)]`) to the struct `{Self}`"
)]
pub trait JobSettings: FsmState<Result = ()> {
    /// How many runs of `perform` may fail before the job ends `failed` (`max_attempts = N`,
    /// 3 by default; at least 1).
    const MAX_ATTEMPTS: u32;
    /// The delay before the first retry (`backoff = ".."`, 1 s by default); each further
    /// retry doubles it.
    const BACKOFF: Duration;
    /// The longest delay between two runs (`max_backoff = ".."`, 5 min by default).
    const MAX_BACKOFF: Duration;

    /// The delay before the run that follows failed run number `attempt` (0 for the first
    /// run): `BACKOFF × 2^attempt`, at most `MAX_BACKOFF`.
    fn delay(attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.min(31)).unwrap_or(u32::MAX);
        Self::BACKOFF
            .checked_mul(factor)
            .unwrap_or(Self::MAX_BACKOFF)
            .min(Self::MAX_BACKOFF)
    }
}

/// The work of a job declared with `#[job]`: its arguments are the struct's fields, and
/// [`perform`](Self::perform) runs it.
///
/// `perform` may run more than once (after an error, or a crash of the worker that ran it):
/// make its effects idempotent, for example with `ctx.id()` as an idempotency key. It sees
/// the job's arguments read-only: a job keeps no state between attempts.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use durable_runtime::fsm::{job, Engine, Job, MemoryFsmStore, Settled, StepContext};
///
/// #[derive(Debug, thiserror::Error)]
/// #[error("the mail server refused {0}")]
/// pub struct Refused(String);
///
/// #[job(name = "send_email", queue = "mail", max_attempts = 5, backoff = "10ms", max_backoff = "1s")]
/// pub struct SendEmail {
///     to: String,
/// }
///
/// impl Job for SendEmail {
///     type Error = Refused;
///
///     async fn perform(&self, ctx: &StepContext) -> Result<(), Refused> {
///         if self.to.ends_with(".invalid") {
///             return Err(Refused(self.to.clone()));
///         }
///         let _idempotency_key = ctx.id();
///         Ok(())
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let engine = Engine::builder(MemoryFsmStore::new())
///     .register::<SendEmail>()
///     .queue("mail", 4)
///     .build()?;
/// let id = engine.insert(SendEmail { to: "ada@example.com".into() }).await?;
/// assert!(matches!(engine.await_ended(id, Duration::from_secs(5)).await?, Settled::Done { .. }));
/// engine.shutdown().await;
/// # Ok(()) }
/// ```
#[diagnostic::on_unimplemented(
    message = "the job `{Self}` has no `perform`",
    label = "`Job` is not implemented for `{Self}`",
    note = "implement `durable_runtime::fsm::Job` for `{Self}`: `impl Job for {Self} {{ type Error = ..; async fn perform(&self, ctx: &StepContext) -> Result<(), Self::Error> {{ .. }} }}`"
)]
pub trait Job: JobSettings {
    /// What a failed run returns; its text (`Display`) becomes the job's `last_error`.
    type Error: std::fmt::Display + Send + 'static;

    /// Runs the job once.
    fn perform(&self, ctx: &StepContext) -> impl Future<Output = Result<(), Self::Error>> + Send;
}

/// The error of a failed run, as text: what the retry policy and `last_error` see.
#[derive(Debug)]
struct Failed(String);

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Failed {}

/// The `perform` step of the job `J`: `done` on success, the error to the retry policy.
pub(crate) fn perform<'a, J: Job>(
    job: &'a J,
    ctx: &'a StepContext,
) -> BoxFuture<'a, Result<Outcome<J>, BoxError>> {
    Box::pin(async move {
        match job.perform(ctx).await {
            Ok(()) => Ok(Outcome::done(())),
            Err(error) => Err(Box::new(Failed(error.to_string())) as BoxError),
        }
    })
}

/// The retry policy of the job `J`: retry after its backoff while attempts remain, then end
/// `failed` with the error as its `last_error`.
pub(crate) fn on_error<J: JobSettings>(error: &StepError, ctx: &StepContext) -> Outcome<J> {
    let attempt = ctx.attempt();
    if attempt.saturating_add(1) >= J::MAX_ATTEMPTS {
        Outcome::stop(error)
    } else {
        Outcome::retry(J::delay(attempt))
    }
}
