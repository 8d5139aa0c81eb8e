//! FSM inserts and signals from a durable object's handler, committed with the object's state
//! ([`Context::fsm`]).
//!
//! They are staged in the call's pending write like alarm and key-value changes, and the
//! object's storage writes them in the transaction that commits the call's state: both happen
//! or neither does. Nothing leaves the object before its state is committed, so a staged insert
//! has no id yet and a staged signal has not been delivered; a handler that needs the id uses a
//! correlation key, which is the instance's address for signals as well.

use serde::Serialize;

use super::error::Error;
use super::json;
use super::outcome::AnyInstance;
use super::run;
use super::store::{NewSignal, Target};
use crate::object::context::Context;
use crate::storage::FsmChange;

/// Inserts FSM instances and sends signals in the same transaction as the calling object's
/// state: from [`Context::fsm`].
///
/// If the handler fails (an error, a panic, a timeout) or the commit fails, none of its FSM
/// changes is written; if the commit's outcome is unknown, they were written exactly when the
/// state was. A refused change fails the whole write (and with it the call, and the calls
/// committed in the same write of the object) with
/// [`Error::FsmRefused`](crate::Error::FsmRefused):
///
/// - an insert whose correlation key is occupied ([`FsmRefusal::Duplicate`]);
/// - a signal with no live target ([`FsmRefusal::NoTarget`]): signals are never held for
///   instances that do not exist yet, as with [`Engine::signal`](super::Engine::signal);
/// - a store that cannot write FSM rows with objects ([`FsmRefusal::Unsupported`]).
///
/// An engine on the same database runs the inserted instances; an engine polls, so it picks
/// them up within its poll interval.
///
/// [`FsmRefusal::Duplicate`]: crate::storage::FsmRefusal::Duplicate
/// [`FsmRefusal::NoTarget`]: crate::storage::FsmRefusal::NoTarget
/// [`FsmRefusal::Unsupported`]: crate::storage::FsmRefusal::Unsupported
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use durable_runtime::fsm::{durable_fsm, Engine, Instance, Outcome, Settled, StepContext};
/// use durable_runtime::{durable_object, Context, MemoryStorage, Runtime};
///
/// #[durable_fsm(result = u32)]
/// pub struct Shipping { order: String }
///
/// #[durable_fsm]
/// impl Shipping {
///     #[step(initial)]
///     fn ship(&mut self, _ctx: &StepContext) -> Outcome<Self> { Outcome::done(1) }
/// }
///
/// #[durable_object]
/// pub struct Order { paid: bool }
///
/// #[durable_object]
/// impl Order {
///     #[handler]
///     fn handle_pay(&mut self, ctx: &Context) -> Result<(), durable_runtime::fsm::Error> {
///         self.paid = true;
///         let shipping = Shipping { order: ctx.id().to_owned() };
///         ctx.fsm().insert(Instance::new(shipping).correlation_key(format!("ship:{}", ctx.id())))
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let storage = MemoryStorage::with_fsm();
/// let engine = Engine::builder(storage.fsm().unwrap())
///     .register::<Shipping>()
///     .queue("default", 1)
///     .poll_interval(Duration::from_millis(10), Duration::from_millis(10))
///     .build()?;
/// let rt = Runtime::new(storage);
/// Order::pay(&rt, "o1").await?;
/// // Committed with the order: the engine finds it and runs it.
/// let id = engine.find("ship:o1").await?.expect("inserted with the order");
/// let settled = engine.await_ended(id, Duration::from_secs(5)).await?;
/// assert!(matches!(settled, Settled::Done { .. }));
/// # engine.shutdown().await;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct ObjectFsm<'a> {
    ctx: &'a Context,
}

impl Context {
    /// FSM inserts and signals committed with this call's state (feature `fsm`): see
    /// [`ObjectFsm`].
    ///
    /// # Panics
    ///
    /// The returned handle's methods panic in a read-only (`&self`) handler, which commits
    /// nothing.
    pub fn fsm(&self) -> ObjectFsm<'_> {
        ObjectFsm { ctx: self }
    }
}

impl ObjectFsm<'_> {
    /// Stages the insert of `instance` (a state value, or an [`Instance`](super::Instance)
    /// with options), committed with the call's state. Its start time counts from now (the
    /// runtime's clock).
    ///
    /// # Errors
    ///
    /// [`Error::Unencodable`] when its state cannot be stored (nothing is staged).
    ///
    /// # Panics
    ///
    /// In a read-only (`&self`) handler.
    pub fn insert(&self, instance: impl Into<AnyInstance>) -> Result<(), Error> {
        self.check_writable();
        let row = run::new_instance(&instance.into(), self.ctx.now()).map_err(|message| {
            Error::Unencodable {
                what: "state",
                message,
            }
        })?;
        self.ctx.staged_fsm().push(FsmChange::Insert(row));
        Ok(())
    }

    /// Stages the signal `name` with `payload` to `target` (an
    /// [`InstanceId`](super::InstanceId), or a correlation key as a string), delivered when
    /// the call's state commits, as [`Engine::signal`](super::Engine::signal) delivers it
    /// (with `dedup_key`, the same key is not delivered twice to one instance while the first
    /// is in its inbox).
    ///
    /// # Errors
    ///
    /// [`Error::Unencodable`] when the payload cannot be stored (nothing is staged).
    ///
    /// # Panics
    ///
    /// In a read-only (`&self`) handler.
    pub fn signal(
        &self,
        target: impl Into<Target>,
        name: &str,
        payload: impl Serialize,
        dedup_key: Option<&str>,
    ) -> Result<(), Error> {
        self.check_writable();
        let payload = json::encode_value(&payload).map_err(|message| Error::Unencodable {
            what: "signal payload",
            message,
        })?;
        self.ctx.staged_fsm().push(FsmChange::Signal {
            target: target.into(),
            signal: NewSignal {
                name: name.to_owned(),
                payload,
                dedup_key: dedup_key.map(str::to_owned),
            },
        });
        Ok(())
    }

    fn check_writable(&self) {
        assert!(
            self.ctx.is_writable(),
            "FSM changes can only be made by `&mut self` handlers, hooks and alarms"
        );
    }
}
