//! Items `#[durable_fsm]` generates code against, reached as
//! `durable_runtime::__private::fsm`. Not public API.

use serde::Serialize;
use serde::de::DeserializeOwned;

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
pub trait StepResult<F: FsmState> {
    /// Converts into the engine's step result.
    fn into_step_result(self) -> Result<Outcome<F>, BoxError>;
}

impl<F: FsmState> StepResult<F> for Outcome<F> {
    fn into_step_result(self) -> Result<Outcome<F>, BoxError> {
        Ok(self)
    }
}

impl<F: FsmState, E: Into<BoxError>> StepResult<F> for Result<Outcome<F>, E> {
    fn into_step_result(self) -> Result<Outcome<F>, BoxError> {
        self.map_err(Into::into)
    }
}

/// A step's result converted for the engine: the generated dispatcher's call.
pub fn step_result<F: FsmState, R: StepResult<F>>(result: R) -> Result<Outcome<F>, BoxError> {
    result.into_step_result()
}

/// The result type of an FSM must be storable.
#[diagnostic::on_unimplemented(
    message = "the FSM result type `{Self}` cannot be stored",
    label = "`{Self}` does not implement `Serialize` and `Deserialize`",
    note = "results are stored as JSON: derive `serde::Serialize` and `serde::Deserialize` for `{Self}`"
)]
pub trait FsmResult: Serialize + DeserializeOwned + Send + 'static {}

impl<T: Serialize + DeserializeOwned + Send + 'static> FsmResult for T {}

/// Compile-time check of the result type, spanned at the user's type.
pub const fn assert_result<T: FsmResult>() {}

/// Compile-time check that a type has both halves of `#[durable_fsm]`.
pub const fn assert_fsm<T: Fsm>() {}

/// Compile-time check that the struct half exists, for the impl half.
pub const fn assert_fsm_state<T: FsmState>() {}

/// The constant of the step `name`.
pub const fn step<F>(name: &'static str) -> Step<F> {
    Step::__new(name)
}
