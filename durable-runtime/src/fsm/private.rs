//! Items `#[durable_fsm]` generates code against, reached as
//! `durable_runtime::__private::fsm`. Not public API.

pub use super::context::StepContext;
pub use super::definition::{Fsm, FsmState, Step};
pub use super::error::StepError;
pub use super::outcome::Outcome;
pub use crate::object::{BoxError, BoxFuture};

/// What a step may return: `Outcome<Self>`, or `Result<Outcome<Self>, E>` with an error the
/// engine can hand to the error handler.
#[diagnostic::on_unimplemented(
    message = "a step cannot return `{Self}`",
    label = "expected `Outcome<Self>` or `Result<Outcome<Self>, E>`",
    note = "a step returns `Outcome<Self>`, or `Result<Outcome<Self>, E>` where `E` converts into `Box<dyn std::error::Error + Send + Sync>` (a `String`, an error type)"
)]
pub trait StepResult<F> {
    /// Converts into the engine's step result.
    fn into_step_result(self) -> Result<Outcome<F>, BoxError>;
}

impl<F> StepResult<F> for Outcome<F> {
    fn into_step_result(self) -> Result<Outcome<F>, BoxError> {
        Ok(self)
    }
}

impl<F, E: Into<BoxError>> StepResult<F> for Result<Outcome<F>, E> {
    fn into_step_result(self) -> Result<Outcome<F>, BoxError> {
        self.map_err(Into::into)
    }
}

/// A step's result converted for the engine: the generated dispatcher's call.
pub fn step_result<F, R: StepResult<F>>(result: R) -> Result<Outcome<F>, BoxError> {
    result.into_step_result()
}

/// Compile-time check that a type has both halves of `#[durable_fsm]`.
pub const fn assert_fsm<T: Fsm>() {}

/// Compile-time check that the struct half exists, for the impl half.
pub const fn assert_fsm_state<T: FsmState>() {}

/// The constant of the step `name`.
pub const fn step<F>(name: &'static str) -> Step<F> {
    Step::__new(name)
}

pub use super::job::{Job, JobSettings};

/// The `perform` step of a job, for the generated `Fsm::run_step`.
pub fn job_perform<'a, J: Job>(
    job: &'a J,
    ctx: &'a StepContext,
) -> BoxFuture<'a, Result<Outcome<J>, BoxError>> {
    super::job::perform(job, ctx)
}

/// The retry policy of a job, for the generated `Fsm::on_error`.
pub fn job_on_error<'a, J: JobSettings>(
    error: StepError,
    ctx: &'a StepContext,
) -> BoxFuture<'a, Outcome<J>> {
    let outcome = super::job::on_error::<J>(&error, ctx);
    Box::pin(async move { outcome })
}

/// Compile-time check that a `#[job]` struct implements [`Job`].
pub const fn assert_job<T: Job>() {}
