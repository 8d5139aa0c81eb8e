//! The durable FSM engine (feature `fsm`): long-running state machines whose every step's
//! outcome is committed before execution proceeds.
//!
//! An FSM instance is a row, not a process. A worker picks runnable rows, runs one step of
//! each outside any transaction, and commits the step's [`Outcome`] (the next step, a retry, a
//! park on signals or on children, the end) with the new state in one transaction. A worker
//! that crashes loses its claims when their leases end; the reaper then runs those steps
//! again, so steps are at-least-once and should be idempotent (keep them small). The
//! *transition* is exactly-once: an outcome commits only while its claim (a per-claim token)
//! still holds, and everything that rides the transition (consuming signals, spawning
//! children, releasing a parent's barrier) commits with it or not at all.
//!
//! ```
//! use std::time::Duration;
//! use durable_runtime::fsm::{durable_fsm, Engine, MemoryFsmStore, Outcome, Settled, StepContext};
//!
//! #[derive(Debug, thiserror::Error)]
//! #[error("the payment provider is unreachable")]
//! pub struct Unreachable;
//!
//! #[durable_fsm(name = "order", queue = "payments", result = String)]
//! pub struct Order {
//!     order_id: String,
//!     #[field(default = 0)]
//!     charged_cents: i64,
//! }
//!
//! #[durable_fsm]
//! impl Order {
//!     #[step(initial)]
//!     async fn charge(&mut self, ctx: &StepContext) -> Result<Outcome<Self>, Unreachable> {
//!         // Call the payment provider with `ctx.id()` as the idempotency key, then wait for
//!         // its webhook, sent with `engine.signal("order:42", "paid", ..)`.
//!         self.charged_cents = 1250;
//!         Ok(Outcome::await_signal(["paid", "declined"], Self::SETTLE)
//!             .timeout(Duration::from_secs(3600)))
//!     }
//!
//!     #[step]
//!     fn settle(&mut self, ctx: &StepContext) -> Outcome<Self> {
//!         match ctx.awaited().first().map(|signal| signal.name()) {
//!             Some("paid") => Outcome::done(format!("receipt for {}", self.order_id)),
//!             Some(_) => Outcome::stop("declined"),
//!             None => Outcome::stop("no answer from the payment provider within the hour"),
//!         }
//!     }
//!
//!     // The specification's `handle/2`: any outcome, from the error and the attempt.
//!     #[on_error]
//!     fn failed(&mut self, error: durable_runtime::fsm::StepError, ctx: &StepContext) -> Outcome<Self> {
//!         if ctx.attempt() < 5 {
//!             Outcome::retry(Duration::from_millis(100 << ctx.attempt()))
//!         } else {
//!             Outcome::stop(error)
//!         }
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let engine = Engine::builder(MemoryFsmStore::new())
//!     .register::<Order>()
//!     .queue("payments", 10)
//!     .build()?;
//! let order = durable_runtime::fsm::Instance::new(Order { order_id: "42".into(), ..Default::default() })
//!     .correlation_key("order:42");
//! let id = engine.insert(order).await?;
//! // Parked on the webhook:
//! assert!(matches!(engine.await_settled(id, Duration::from_secs(5)).await?, Settled::Awaiting(_)));
//! engine.signal("order:42", "paid", serde_json::json!({"cents": 1250}), Some("psp-evt-1")).await?;
//! let settled = engine.await_settled(id, Duration::from_secs(5)).await?;
//! assert_eq!(settled.result::<String>()?.as_deref(), Some("receipt for 42"));
//! engine.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! - [`durable_fsm`] declares an FSM: its state struct (fields with defaults, merged like a
//!   durable object's) and its steps, each with a typed constant ([`Step`]).
//! - [`Engine`] inserts instances ([`Instance`] for options such as the correlation key),
//!   delivers signals, and runs the steps of the queues it is given.
//! - [`ObjectFsm`] (a durable object's `ctx.fsm()`) inserts instances and sends signals in
//!   the same transaction as the object's state.
//! - [`store::FsmStore`] is the storage contract: [`MemoryFsmStore`] here, Postgres in
//!   `durable-sqlx`.
//! - [`testing`] runs everything runnable in a test with [`testing::drain`].

mod context;
mod control;
mod definition;
mod engine;
mod error;
mod insert_async;
mod job;
mod json;
pub mod metrics;
mod objects;
mod outcome;
#[doc(hidden)]
pub mod private;
mod run;
mod settle;
mod status;
pub mod store;
pub mod testing;
mod workers;

#[cfg(feature = "conformance")]
pub mod conformance;

pub use context::{ChildInfo, Signal, StepContext};
pub use control::{CANCELLED, Cancelled};
pub use definition::{Fsm, FsmResult, FsmState, Step};
pub use engine::{Engine, EngineBuilder};
pub use error::{BuildError, Error, StepError, StepErrorKind};
pub use insert_async::{PendingInsert, TryInsertError};
pub use job::{Job, JobSettings};
pub use objects::ObjectFsm;
pub use outcome::{AnyInstance, Instance, Outcome, OutcomeKind};
pub use settle::{Settled, Snapshot};
pub use status::{InstanceId, SignalId, Status, UnknownStatus};
pub use store::{Delivered, InstanceRecord, ListFilter, MemoryFsmStore, Target};

/// Declares a durable FSM: on a struct, its state and options; on an impl block, its steps.
///
/// On the struct, options (all optional): `name = ".."` (the stored FSM name; the struct's
/// name by default), `version = N` (default 1), `queue = ".."` (default `"default"`),
/// `priority = N` (an `i16`, lower runs first; default 0), `result = Type` (what
/// `Outcome::done` carries; default `()`), `crate = ".."`. Fields take
/// `#[field(default = <expr>)]`.
///
/// On the impl block: `#[step]` methods (sync or `async`; `&mut self`, then optionally
/// `ctx: &StepContext`) returning `Outcome<Self>` or `Result<Outcome<Self>, E>`, exactly one
/// of them `#[step(initial)]`, and at most one `#[on_error]` method (`&mut self`,
/// `error: StepError`, then optionally `ctx: &StepContext`) returning `Outcome<Self>`. Each
/// step gets a constant named after it in upper case (`Order::CHARGE` for `fn charge`).
///
/// See the [module documentation](self) for an example.
pub use durable_macros::durable_fsm;

/// Declares a job: a one-step FSM whose work is [`Job::perform`], retried with capped
/// exponential backoff.
///
/// On a struct (the job's arguments, stored as its state), options (all optional): `name =
/// ".."` (the struct's name by default), `version = N`, `queue = ".."`, `priority = N` (as
/// for [`durable_fsm`]), `max_attempts = N` (runs of `perform` before the job fails; 3 by
/// default, at least 1), `backoff = ".."` (the first retry's delay, doubled at each retry; 1 s
/// by default) and `max_backoff = ".."` (the longest delay; 5 min by default, at least
/// `backoff`), `crate = ".."`. Fields take `#[field(default = <expr>)]`. Implement [`Job`]
/// for the struct by hand.
///
/// See [`Job`] for an example.
pub use durable_macros::job;

/// Marks a step of a `#[durable_fsm]` impl block; `#[step(initial)]` marks the first step.
///
/// `#[durable_fsm]` consumes it; anywhere else it is a compile error.
pub use durable_macros::step;

/// Marks the error handler of a `#[durable_fsm]` impl block.
///
/// `#[durable_fsm]` consumes it; anywhere else it is a compile error.
pub use durable_macros::on_error;
