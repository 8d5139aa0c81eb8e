//! Calls by `(type name, id, handler, JSON arguments)`, and the decoding and encoding that
//! generated code does around the typed client it calls.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::CallByNameError;
use crate::activation::options::CallOptions;
use crate::error::Error;
use crate::object::handle::Runtime;

use crate::cluster::DEFAULT_WAIT;

impl Runtime {
    /// Calls the handler `handler` of the object `(type_name, id)` with arguments given as a
    /// JSON object (field names are argument names; `null` stands for no arguments; an array,
    /// a number or a string is refused, never taken as arguments by position), and returns
    /// its output as JSON. The call goes through the type's typed client: it queues,
    /// commits and replies exactly as a typed call does.
    ///
    /// # Errors
    ///
    /// See [`CallByNameError`]: an unknown type or handler, arguments that do not fit, the
    /// handler's own error as JSON, or the runtime's [`Error`].
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{durable_object, CallByNameError, MemoryStorage, Runtime};
    /// use serde_json::json;
    ///
    /// #[durable_object]
    /// pub struct Account { balance: u64 }
    ///
    /// #[durable_object(expose)]
    /// impl Account {
    ///     #[handler]
    ///     fn handle_withdraw(&mut self, amount: u64) -> Result<u64, String> {
    ///         self.balance = self.balance.checked_sub(amount).ok_or("insufficient funds")?;
    ///         Ok(self.balance)
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::builder(MemoryStorage::new()).expose::<Account>().build();
    /// let err = rt.call_by_name("Account", "a", "withdraw", json!({"amount": 5})).await;
    /// assert!(matches!(err, Err(CallByNameError::Handler { error, .. }) if error == json!("insufficient funds")));
    /// let err = rt.call_by_name("Account", "a", "withdraw", json!({"amout": 5})).await;
    /// assert!(err.unwrap_err().to_string().contains("unknown field `amout`"));
    /// let err = rt.call_by_name("Account", "a", "withdraw", json!([5])).await;
    /// assert!(matches!(err, Err(CallByNameError::BadArguments { .. })));
    /// # }
    /// ```
    pub async fn call_by_name(
        &self,
        type_name: &str,
        id: &str,
        handler: &str,
        arguments: Value,
    ) -> Result<Value, CallByNameError> {
        self.call_by_name_with(type_name, id, handler, arguments, &CallOptions::new())
            .await
    }

    /// [`call_by_name`](Runtime::call_by_name) with per-call options: a timeout on the wait
    /// for the reply, an idempotency key (see [`CallOptions`]). With a key, the reply is the
    /// one stored by an earlier call with the same key and the same handler and arguments, if
    /// any, as JSON.
    ///
    /// In cluster mode with a [`Forwarder`](crate::cluster::Forwarder), a call to an object
    /// another node serves is forwarded there with the time left to its deadline (the
    /// timeout, or the type's `call_timeout`) and its key; see
    /// [`RuntimeBuilder::forwarder`](crate::RuntimeBuilder::forwarder).
    ///
    /// # Errors
    ///
    /// As `call_by_name`; a key already used by a different call is
    /// [`Error::IdempotencyKeyReused`] and a reply not there in time is [`Error::Timeout`]
    /// (as [`CallByNameError::Runtime`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{durable_object, CallOptions, MemoryStorage, Runtime};
    /// use serde_json::json;
    ///
    /// #[durable_object]
    /// pub struct Counter { count: i64 }
    ///
    /// #[durable_object(expose)]
    /// impl Counter {
    ///     #[handler]
    ///     fn handle_add(&mut self, by: i64) -> i64 { self.count += by; self.count }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::builder(MemoryStorage::new()).expose::<Counter>().build();
    /// let once = CallOptions::new().with_idempotency_key("add-1");
    /// let first = rt.call_by_name_with("Counter", "a", "add", json!({"by": 3}), &once).await;
    /// let again = rt.call_by_name_with("Counter", "a", "add", json!({"by": 3}), &once).await;
    /// assert_eq!((first.unwrap(), again.unwrap()), (json!(3), json!(3))); // added once
    /// # }
    /// ```
    pub async fn call_by_name_with(
        &self,
        type_name: &str,
        id: &str,
        handler: &str,
        arguments: Value,
        options: &CallOptions,
    ) -> Result<Value, CallByNameError> {
        let entry = self.registry().entry(type_name)?;
        let exposed = entry.handler(handler)?;
        // Cluster mode: an object another node serves is called there (single-node: one
        // branch).
        if let Some(owner) = self.forward_target(type_name, id) {
            let call_timeout = (entry.options)(self).call_timeout.unwrap_or(DEFAULT_WAIT);
            return self
                .forward_call(
                    owner,
                    type_name,
                    id,
                    exposed,
                    arguments,
                    options,
                    call_timeout,
                )
                .await;
        }
        (exposed.invoke)(self, id, arguments, options).await
    }

    /// Cluster mode: serves a call by name that another node forwarded here. Unlike
    /// [`call_by_name_with`](Runtime::call_by_name_with) it never forwards the call again: an
    /// object this node does not serve fails at once with [`Error::NotOwner`], nothing run.
    /// Without a cluster it is `call_by_name_with`.
    ///
    /// # Errors
    ///
    /// As `call_by_name_with`.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{durable_object, CallOptions, MemoryStorage, Runtime};
    /// use serde_json::json;
    ///
    /// #[durable_object]
    /// pub struct Counter { count: i64 }
    ///
    /// #[durable_object(expose)]
    /// impl Counter {
    ///     #[handler]
    ///     fn handle_add(&mut self, by: i64) -> i64 { self.count += by; self.count }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::builder(MemoryStorage::new()).expose::<Counter>().build();
    /// let reply = rt.call_here_by_name("Counter", "a", "add", json!({"by": 3}), &CallOptions::new()).await;
    /// assert_eq!(reply.unwrap(), json!(3));
    /// # }
    /// ```
    pub async fn call_here_by_name(
        &self,
        type_name: &str,
        id: &str,
        handler: &str,
        arguments: Value,
        options: &CallOptions,
    ) -> Result<Value, CallByNameError> {
        let exposed = self.registry().entry(type_name)?.handler(handler)?;
        (exposed.invoke)(self, id, arguments, options).await
    }

    /// [`call_by_name`](Runtime::call_by_name) with the arguments as JSON text, as received
    /// from a network request or a command line: text that is not JSON is refused with
    /// [`CallByNameError::BadArguments`], like arguments that do not fit, before anything is
    /// called.
    ///
    /// # Errors
    ///
    /// As `call_by_name`.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{durable_object, CallByNameError, MemoryStorage, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Counter { count: i64 }
    ///
    /// #[durable_object(expose)]
    /// impl Counter {
    ///     #[handler]
    ///     fn handle_add(&mut self, by: i64) -> i64 { self.count += by; self.count }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::builder(MemoryStorage::new()).expose::<Counter>().build();
    /// let reply = rt.call_by_name_json("Counter", "a", "add", br#"{"by": 3}"#).await;
    /// assert_eq!(reply.unwrap(), serde_json::json!(3));
    /// let err = rt.call_by_name_json("Counter", "a", "add", b"{by: 3}").await;
    /// assert!(matches!(err, Err(CallByNameError::BadArguments { .. })));
    /// # }
    /// ```
    pub async fn call_by_name_json(
        &self,
        type_name: &str,
        id: &str,
        handler: &str,
        arguments: &[u8],
    ) -> Result<Value, CallByNameError> {
        self.call_by_name_json_with(type_name, id, handler, arguments, &CallOptions::new())
            .await
    }

    /// [`call_by_name_json`](Runtime::call_by_name_json) with per-call options, as
    /// [`call_by_name_with`](Runtime::call_by_name_with) takes them.
    ///
    /// # Errors
    ///
    /// As `call_by_name_with`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::{durable_object, CallOptions, MemoryStorage, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Counter { count: i64 }
    ///
    /// #[durable_object(expose)]
    /// impl Counter {
    ///     #[handler]
    ///     fn handle_add(&mut self, by: i64) -> i64 { self.count += by; self.count }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::builder(MemoryStorage::new()).expose::<Counter>().build();
    /// let options = CallOptions::new().with_timeout(Duration::from_secs(5));
    /// let reply = rt.call_by_name_json_with("Counter", "a", "add", br#"{"by": 3}"#, &options).await;
    /// assert_eq!(reply.unwrap(), serde_json::json!(3));
    /// # }
    /// ```
    pub async fn call_by_name_json_with(
        &self,
        type_name: &str,
        id: &str,
        handler: &str,
        arguments: &[u8],
        options: &CallOptions,
    ) -> Result<Value, CallByNameError> {
        let exposed = self.registry().entry(type_name)?.handler(handler)?;
        let arguments =
            serde_json::from_slice(arguments).map_err(|error| CallByNameError::BadArguments {
                handler: exposed.name,
                path: ".".to_owned(),
                message: error.to_string(),
            })?;
        self.call_by_name_with(type_name, id, exposed.name, arguments, options)
            .await
    }
}

/// Decodes the JSON arguments of `handler` into its argument struct; `null` is no arguments.
/// Anything but an object (or `null`) is refused: serde would otherwise take an array as the
/// arguments by position.
pub fn arguments<A: DeserializeOwned>(
    handler: &'static str,
    arguments: Value,
) -> Result<A, CallByNameError> {
    let arguments = match arguments {
        Value::Null => Value::Object(serde_json::Map::new()),
        object @ Value::Object(_) => object,
        other => {
            return Err(CallByNameError::BadArguments {
                handler,
                path: ".".to_owned(),
                message: format!(
                    "the arguments must be a JSON object of arguments by name, not {}",
                    json_kind(&other)
                ),
            });
        }
    };
    serde_path_to_error::deserialize(arguments).map_err(|error| CallByNameError::BadArguments {
        handler,
        path: error.path().to_string(),
        message: error.inner().to_string(),
    })
}

/// The reply of an infallible handler's client, as JSON.
pub fn reply<T: Serialize>(
    handler: &'static str,
    result: Result<T, Error>,
) -> Result<Value, CallByNameError> {
    encode(handler, &result?)
}

/// An exposed handler's error type must be encodable as JSON, to be sent to callers by name.
#[diagnostic::on_unimplemented(
    message = "the error type `{Self}` of an exposed handler cannot be encoded as JSON",
    label = "`{Self}` must implement `Serialize`",
    note = "derive `serde::Serialize` for `{Self}`, or keep the handler out of the table with `#[handler(internal)]`"
)]
pub trait ExposedError: Serialize {}

impl<T: Serialize> ExposedError for T {}

/// The reply of a fallible handler's client, its own error encoded as JSON. Generated code
/// names it at the error type, where an error that is not `Serialize` is reported.
pub fn fallible_reply<T: Serialize, E: ExposedError>(
    handler: &'static str,
    result: Result<T, Error<E>>,
) -> Result<Value, CallByNameError> {
    match result {
        Ok(output) => encode(handler, &output),
        Err(error) => match error.split() {
            Ok(runtime) => Err(runtime.into()),
            Err(own) => Err(CallByNameError::Handler {
                handler,
                error: encode(handler, &own)?,
            }),
        },
    }
}

/// What a JSON value is, for messages.
fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn encode<T: Serialize>(handler: &'static str, value: &T) -> Result<Value, CallByNameError> {
    serde_json::to_value(value).map_err(|error| CallByNameError::Encode {
        handler,
        message: error.to_string(),
    })
}
