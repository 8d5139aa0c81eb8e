//! Durable objects for Rust.
//!
//! A durable object is a single-instance, stateful actor addressed by `(type, id)`. It is
//! started on demand, loads its state from a database, handles one call at a time, commits its
//! state after every change before replying, and comes back from the database after any
//! crash.
//!
//! ```
//! use durable_runtime::{durable_object, MemoryStorage, Runtime};
//!
//! #[durable_object(hibernate_after = "5m")]
//! pub struct Counter {
//!     #[field(default = 0)]
//!     count: i64,
//! }
//!
//! #[durable_object]
//! impl Counter {
//!     #[handler]
//!     fn handle_increment(&mut self, by: i64) -> i64 {
//!         self.count += by;
//!         self.count
//!     }
//!
//!     #[handler]
//!     fn handle_get(&self) -> i64 {
//!         self.count
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_runtime::Error> {
//! let rt = Runtime::new(MemoryStorage::new());
//! Counter::increment(&rt, "user:123", 1).await?;
//! assert_eq!(Counter::get(&rt, "user:123").await?, 1);
//! # Ok(()) }
//! ```
//!
//! The [`durable_object`] attribute goes on the state struct and on an impl block holding its
//! handlers; it generates the typed clients (`Counter::increment(&rt, id, ..)`). The
//! [`Runtime`] owns a [`Storage`](storage::Storage) backend: [`MemoryStorage`] here, SQLite or
//! Postgres from the `durable-sqlx` crate in production.
//!
//! The `fsm` feature adds `durable_runtime::fsm`: durable state machines whose instances are
//! rows, run step by step by a pool of workers (`#[durable_fsm]`, `fsm::Engine`).
#![deny(missing_docs)]

mod activation;
mod alarms;
mod clock;
pub mod cluster;
mod commit;
pub mod describe;
mod error;
mod exposed;
mod id;
pub mod inspect;
mod inventory;
mod kv;
mod object;
mod observe;
mod operate;
mod runtime;
pub mod storage;

#[cfg(feature = "conformance")]
pub mod conformance;
#[cfg(feature = "fsm")]
pub mod fsm;
#[cfg(feature = "testing")]
pub mod testing;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;

// Generated code names the crate by its path; unit tests declare objects inside it.
#[cfg(test)]
extern crate self as durable_runtime;

pub use activation::call::Access;
pub use activation::options::CallOptions;
pub use alarms::args::AlarmArgsError;
pub use alarms::{Alarm, AlarmSettings, AlarmTime, RetryPolicy};
pub use describe::TypeDescription;
pub use error::Error;
pub use exposed::{CallByNameError, Exposed, ExposedHandler, ExposedType, HandlerSchemas, Invoke};
pub use id::{InvalidId, MAX_ID_LEN, validate_id};
pub use inventory::{DeadAlarmPage, InvalidCursor, LiveStatus, ObjectView};
pub use kv::{
    DEFAULT_CACHE_BYTES, DEFAULT_MAX_BYTES, DEFAULT_MAX_KEYS, DEFAULT_MAX_VALUE_BYTES, KvError,
    KvStorage,
};
pub use object::context::Context;
pub use object::handle::Runtime;
pub use object::{AlarmRun, BoxError, BoxFuture, DurableObject, Handlers, ObjectOptions};
pub use observe::events::Event;
pub use observe::metrics;
pub use runtime::{ObjectStatus, RuntimeBuilder};
pub use storage::MemoryStorage;

/// Declares a durable object: on a struct, its state; on an impl block, its handlers.
///
/// On the impl block, `#[durable_object(expose)]` also makes the handlers callable by name
/// (see [`Exposed`] and [`RuntimeBuilder::expose`]): each exposed handler's error type must be
/// `Serialize`. In cluster mode, the typed clients of an exposed type (`Type::<name>(&rt, id,
/// ..)`, the handle's and the caller's methods) forward a call to an object another node
/// serves to that node, and decode its reply there; this needs the handler's error type to be
/// `Deserialize` too (arguments and outputs always are). A handler whose error type is not
/// still compiles and is still forwarded when called by name, but its typed calls on another
/// node than the owner fail with [`Error::NotOwner`] naming the owner; joining a cluster logs
/// a warning naming such handlers ([`ExposedHandler::typed_forwarding`]). Without a cluster
/// the typed client checks one `OnceLock` and calls the object directly.
///
/// See the crate documentation and the guide for the full syntax.
///
/// # Examples
///
/// ```
/// use durable_runtime::{durable_object, Exposed};
///
/// #[derive(Debug, serde::Serialize)]
/// pub struct Refused; // `Serialize` only
///
/// #[durable_object]
/// pub struct Account { balance: u64 }
///
/// #[durable_object(expose)]
/// impl Account {
///     #[handler]
///     fn handle_deposit(&mut self, amount: u64) -> u64 { self.balance += amount; self.balance }
///
///     #[handler]
///     fn handle_close(&mut self) -> Result<(), Refused> { Err(Refused) }
/// }
///
/// let forwards: Vec<_> = Account::HANDLERS.iter().map(|h| (h.name, (h.typed_forwarding)())).collect();
/// assert_eq!(forwards, [("deposit", true), ("close", false)]);
/// ```
pub use durable_macros::durable_object;

/// Marks a method of a `#[durable_object]` impl block as a handler: `fn handle_<name>` gets
/// the client `Type::<name>(&runtime, id, ..)`.
///
/// `#[handler(internal)]` keeps the handler out of the table of an exposed type: it is callable
/// from Rust only, and its error type need not be `Serialize`.
///
/// `#[durable_object]` consumes it; anywhere else it is a compile error.
pub use durable_macros::handler;

/// Marks the method of a `#[durable_object]` impl block that runs after the object's state is
/// loaded (or created), before the object accepts calls.
///
/// `#[durable_object]` consumes it; anywhere else it is a compile error.
pub use durable_macros::after_load;

/// Marks a method of a `#[durable_object]` impl block as the handler of the alarm of the same
/// name, and generates its [`Alarm`] constant (`Session::EXPIRE` for `fn expire`).
///
/// `#[durable_object]` consumes it; anywhere else it is a compile error.
pub use durable_macros::alarm;
