//! Handlers callable by name: the table `#[durable_object(expose)]` generates for a type
//! ([`Exposed`]), the runtime's registry of exposed types, and the calls by `(type name, id,
//! handler, JSON arguments)` that go through it.
//!
//! A call by name decodes its arguments and then calls the type's typed client, so it has
//! exactly the semantics of a typed call. This layer sits above activation and is imported by
//! nothing below it; the lower layers hold its registry as an opaque value.
//!
//! One concern per module: `table` holds the generated table and the registry, `calls` the
//! calls by name, `ops` the typed operations on one object by type name, `live` the live
//! objects and the whole view of one object, `dead` the dead alarms across objects, `kv` the objects' key-value storage, and
//! `schema` the JSON schemas of handlers (feature `schemars`).

pub(crate) mod alarm_args;
mod calls;
mod dead;
mod kv;
mod live;
mod ops;
mod schema;
mod table;

use serde_json::Value;

use crate::error::Error;
use crate::inventory::InvalidCursor;

pub use calls::{ExposedError, arguments, fallible_reply, reply};
#[cfg(feature = "schemars")]
pub use schema::{
    ArgumentsSchema, KnownSchema, OptionalArgument, RequiredArgument, SchemaProbe, UnknownSchema,
    handler_schemas,
};
pub use schema::{HandlerSchemas, no_schemas};
pub(crate) use table::Registry;
pub use table::{Exposed, ExposedHandler, ExposedType, Invoke};

/// Why a call by name failed.
///
/// # Examples
///
/// ```
/// use durable_runtime::{CallByNameError, MemoryStorage, Runtime};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let rt = Runtime::new(MemoryStorage::new());
/// let err = rt.call_by_name("Nope", "a", "get", serde_json::json!({})).await.unwrap_err();
/// assert!(matches!(err, CallByNameError::UnknownType { .. }));
/// assert_eq!(err.to_string(), "no exposed object type is named `Nope`");
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CallByNameError {
    /// No type of that name was exposed to this runtime.
    #[error("no exposed object type is named `{type_name}`")]
    UnknownType {
        /// The name asked for.
        type_name: String,
    },

    /// The type has no exposed handler of that name.
    #[error("the object type `{type_name}` has no exposed handler `{handler}`")]
    UnknownHandler {
        /// The type.
        type_name: String,
        /// The handler asked for.
        handler: String,
    },

    /// The type has no alarm of that name.
    #[error("the object type `{type_name}` has no alarm `{alarm}`")]
    UnknownAlarm {
        /// The type.
        type_name: String,
        /// The alarm asked for.
        alarm: String,
    },

    /// The JSON arguments do not fit the handler's: an unknown or missing field, a value of
    /// the wrong type, or not a JSON object.
    #[error("bad arguments for `{handler}` at `{path}`: {message}")]
    BadArguments {
        /// The handler.
        handler: &'static str,
        /// The path of the failing field (`.` for the arguments object itself).
        path: String,
        /// What is wrong, naming the field for an unknown or missing one.
        message: String,
    },

    /// The handler returned its own error, encoded as JSON; its state changes were rolled
    /// back.
    #[error("the handler `{handler}` failed: {error}")]
    Handler {
        /// The handler.
        handler: &'static str,
        /// The handler's error, as JSON.
        error: Value,
    },

    /// The handler's output or error could not be encoded as JSON.
    #[error("the reply of `{handler}` could not be encoded as JSON: {message}")]
    Encode {
        /// The handler.
        handler: &'static str,
        /// Why.
        message: String,
    },

    /// A key-value operation failed: a value too large, not JSON, or storage unreadable.
    #[error(transparent)]
    Kv(crate::kv::KvError),

    /// A listing cursor that no listing handed out.
    #[error(transparent)]
    InvalidCursor(#[from] InvalidCursor),

    /// Cluster mode: the call was forwarded to the node serving its object, and the exchange
    /// failed (see [`ForwardError`](crate::cluster::ForwardError)).
    #[error(transparent)]
    Forward(Box<crate::cluster::ForwardError>),

    /// The call could not complete (see [`Error::is_retryable`]).
    #[error(transparent)]
    Runtime(#[from] Error),
}
