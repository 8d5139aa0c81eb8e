//! The traits `#[durable_fsm]` implements ([`FsmState`] on the struct, [`Fsm`] on the impl
//! block) and the typed step names ([`Step`]).

use std::fmt;
use std::marker::PhantomData;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::context::StepContext;
use super::error::StepError;
use super::outcome::Outcome;
use crate::object::{BoxError, BoxFuture};

/// The state half of a durable FSM, implemented by `#[durable_fsm]` on a struct: its stored
/// name and version, its default queue and priority, and the type of its result.
///
/// The macro also derives serde's traits with container defaults (a stored state that lacks a
/// field added later takes that field's default) and implements [`Default`] from the
/// `#[field(default = ..)]` expressions, exactly as for durable objects.
///
/// # Examples
///
/// ```
/// use durable_runtime::fsm::{durable_fsm, FsmState, Outcome, StepContext};
///
/// #[durable_fsm(name = "billing.invoice", version = 2, queue = "billing", priority = -1, result = u64)]
/// pub struct Invoice {
///     #[field(default = 100)]
///     total: u64,
/// }
///
/// #[durable_fsm]
/// impl Invoice {
///     #[step(initial)]
///     fn start(&mut self, _ctx: &StepContext) -> Outcome<Self> {
///         Outcome::done(self.total)
///     }
/// }
///
/// assert_eq!(Invoice::NAME, "billing.invoice");
/// assert_eq!(Invoice::VERSION, 2);
/// assert_eq!(Invoice::QUEUE, "billing");
/// assert_eq!(Invoice::PRIORITY, -1);
/// assert_eq!(Invoice::default().total, 100);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not the state of a durable FSM",
    label = "not a durable FSM",
    note = "add `#[durable_fsm]` to the struct `{Self}` (its state) as well as to an `impl {Self}` block (its steps)"
)]
pub trait FsmState: Serialize + DeserializeOwned + Default + Send + Sync + 'static {
    /// The name instances are stored under (the struct's name unless `name = ".."` is given).
    const NAME: &'static str;
    /// The version stamped on new instances (`version = ..`, 1 by default). A worker runs
    /// only instances of the versions registered with it.
    const VERSION: i32;
    /// The queue new instances run on (`queue = ".."`, `"default"` by default).
    const QUEUE: &'static str;
    /// The priority of new instances (`priority = ..`, 0 by default; lower runs first).
    const PRIORITY: i16;
    /// What `Outcome::done` carries (`result = Type`, `()` by default).
    type Result: FsmResult;
}

/// What an FSM's result must be: storable as JSON and sendable. Every type that is
/// `Serialize + DeserializeOwned + Send + 'static` is one.
#[diagnostic::on_unimplemented(
    message = "the FSM result type `{Self}` cannot be stored",
    label = "`{Self}` does not implement `Serialize` and `Deserialize`",
    note = "results are stored as JSON: derive `serde::Serialize` and `serde::Deserialize` for `{Self}`"
)]
pub trait FsmResult: Serialize + DeserializeOwned + Send + 'static {}

impl<T: Serialize + DeserializeOwned + Send + 'static> FsmResult for T {}

/// The behaviour half of a durable FSM, implemented by `#[durable_fsm]` on an impl block: its
/// steps, which one is initial, and the error handler.
///
/// Its methods are called by the engine, not by users.
///
/// # Examples
///
/// ```
/// use durable_runtime::fsm::{durable_fsm, Fsm, Outcome, StepContext};
///
/// #[durable_fsm]
/// pub struct Ping {}
///
/// #[durable_fsm]
/// impl Ping {
///     #[step(initial)]
///     fn ping(&mut self, _ctx: &StepContext) -> Outcome<Self> {
///         Outcome::next(Self::PONG)
///     }
///
///     #[step]
///     async fn pong(&mut self) -> Outcome<Self> {
///         Outcome::done(())
///     }
/// }
///
/// assert_eq!(Ping::INITIAL, Ping::PING);
/// assert_eq!(Ping::STEPS, ["ping", "pong"]);
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` has no `#[durable_fsm]` impl block",
    label = "no steps declared for `{Self}`",
    note = "add `#[durable_fsm] impl {Self} {{ .. }}` holding its `#[step]` methods, one of them `#[step(initial)]`"
)]
pub trait Fsm: FsmState {
    /// The step new instances start at: the `#[step(initial)]` method.
    const INITIAL: Step<Self>;
    /// The names of every step, in declaration order.
    const STEPS: &'static [&'static str];

    /// Runs the step named `step`, or answers `None` for a name that is not a step.
    fn run_step<'a>(
        &'a mut self,
        step: &str,
        ctx: &'a StepContext,
    ) -> Option<BoxFuture<'a, Result<Outcome<Self>, BoxError>>>;

    /// The error handler (the `#[on_error]` method): called with the state as it was before
    /// the failed step, when the step returned an error, panicked, or returned an outcome that
    /// cannot be stored. Without a handler the instance fails with the error.
    fn on_error<'a>(
        &'a mut self,
        error: StepError,
        ctx: &'a StepContext,
    ) -> BoxFuture<'a, Outcome<Self>> {
        let _ = ctx;
        Box::pin(async move { Outcome::stop(error) })
    }
}

/// A step of the FSM `F`, by name: the constant `#[durable_fsm]` generates for each step
/// (`Order::CHARGE` for `fn charge`), so that naming a step that does not exist is a compile
/// error.
///
/// # Examples
///
/// ```
/// use durable_runtime::fsm::{durable_fsm, Outcome, Step, StepContext};
///
/// #[durable_fsm]
/// pub struct Order {}
///
/// #[durable_fsm]
/// impl Order {
///     #[step(initial)]
///     fn start(&mut self, _ctx: &StepContext) -> Outcome<Self> {
///         Outcome::next(Self::CHARGE)
///     }
///
///     #[step]
///     fn charge(&mut self, _ctx: &StepContext) -> Outcome<Self> {
///         Outcome::done(())
///     }
/// }
///
/// let step: Step<Order> = Order::CHARGE;
/// assert_eq!(step.name(), "charge");
/// assert_eq!(step.to_string(), "charge");
/// ```
pub struct Step<F: ?Sized> {
    name: &'static str,
    fsm: PhantomData<fn() -> F>,
}

impl<F: ?Sized> Step<F> {
    #[doc(hidden)]
    pub const fn __new(name: &'static str) -> Self {
        Self {
            name,
            fsm: PhantomData,
        }
    }

    /// The step's stored name: its method's name.
    pub const fn name(self) -> &'static str {
        self.name
    }
}

impl<F: ?Sized> Clone for Step<F> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<F: ?Sized> Copy for Step<F> {}

impl<F: ?Sized> PartialEq for Step<F> {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl<F: ?Sized> Eq for Step<F> {}

impl<F: ?Sized> fmt::Debug for Step<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Step").field(&self.name).finish()
    }
}

impl<F: ?Sized> fmt::Display for Step<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}
