//! Items generated code relies on. Not public API: anything here may change in any release.

use serde::Serialize;
use serde::de::DeserializeOwned;

pub use serde;

pub use crate::activation::call::Access;
pub use crate::alarms::Alarm;
pub use crate::describe::{ArgumentSignature, FieldSignature, HandlerSignature};
pub use crate::error::Error;
pub use crate::exposed::alarm_args::{alarm_arguments, no_alarm_arguments};
pub use crate::object::context::Context;
pub use crate::object::handle::Runtime;
pub use crate::object::{AlarmRun, BoxError, BoxFuture, DurableObject, Handlers, ObjectOptions};

use crate::object;

/// Sends one call of an `async` handler to `(O, id)` and waits for its reply; the body of
/// the generated client of every `async` handler.
pub async fn call<O, R, E, F>(
    runtime: &Runtime,
    id: &str,
    access: Access,
    handler: &'static str,
    run: F,
) -> Result<R, Error<E>>
where
    O: DurableObject,
    F: for<'a> FnOnce(&'a mut O, &'a Context) -> BoxFuture<'a, Result<R, E>> + Send + 'static,
    R: Send + 'static,
    E: Send + 'static,
{
    let body = crate::activation::call::AsyncBody(run);
    crate::activation::call::call::<O, R, E, _>(runtime, id, access, handler, body).await
}

/// Sends one call of a synchronous handler to `(O, id)` and waits for its reply: the handler
/// runs without a future of its own.
pub async fn call_sync<O, R, E, F>(
    runtime: &Runtime,
    id: &str,
    access: Access,
    handler: &'static str,
    run: F,
) -> Result<R, Error<E>>
where
    O: DurableObject,
    F: FnOnce(&mut O, &Context) -> Result<R, E> + Send + 'static,
    R: Send + 'static,
    E: Send + 'static,
{
    let body = crate::activation::call::SyncBody(run);
    crate::activation::call::call::<O, R, E, _>(runtime, id, access, handler, body).await
}

pub use crate::activation::idempotent::{
    Delivered, FallibleReplies, Idempotency, Replies, StoredError, WithKey, WithoutKey,
};
pub use crate::activation::options::CallOptions;

/// [`call`] with a timeout on the wait for the reply and an idempotency part: the body of
/// every typed caller's and every call by name's `async` handler call.
#[allow(clippy::too_many_arguments)]
pub async fn send<O, R, E, F>(
    runtime: &Runtime,
    id: &str,
    access: Access,
    handler: &'static str,
    timeout: Option<::core::time::Duration>,
    idempotency: Idempotency<R, E>,
    run: F,
) -> Result<Delivered<R>, Error<E>>
where
    O: DurableObject,
    F: for<'a> FnOnce(&'a mut O, &'a Context) -> BoxFuture<'a, Result<R, E>> + Send + 'static,
    R: Send + 'static,
    E: Send + 'static,
{
    let body = crate::activation::call::AsyncBody(run);
    crate::activation::call::send::<O, R, E, _>(
        runtime,
        id,
        access,
        handler,
        body,
        timeout,
        idempotency,
    )
    .await
}

/// [`send`] for a synchronous handler.
#[allow(clippy::too_many_arguments)]
pub async fn send_sync<O, R, E, F>(
    runtime: &Runtime,
    id: &str,
    access: Access,
    handler: &'static str,
    timeout: Option<::core::time::Duration>,
    idempotency: Idempotency<R, E>,
    run: F,
) -> Result<Delivered<R>, Error<E>>
where
    O: DurableObject,
    F: FnOnce(&mut O, &Context) -> Result<R, E> + Send + 'static,
    R: Send + 'static,
    E: Send + 'static,
{
    let body = crate::activation::call::SyncBody(run);
    crate::activation::call::send::<O, R, E, _>(
        runtime,
        id,
        access,
        handler,
        body,
        timeout,
        idempotency,
    )
    .await
}

/// The idempotency part of a call by name to an infallible handler.
pub fn json_idempotency<R: Serialize, A: Serialize + ?Sized>(
    options: &CallOptions,
    handler: &str,
    arguments: &A,
) -> Idempotency<R, ::core::convert::Infallible> {
    crate::activation::idempotent::json_idempotency(options, handler, arguments)
}

/// The idempotency part of a call by name to a fallible handler.
pub fn json_fallible_idempotency<R: Serialize, E: ExposedError, A: Serialize + ?Sized>(
    options: &CallOptions,
    handler: &str,
    arguments: &A,
) -> Idempotency<R, E> {
    crate::activation::idempotent::json_fallible_idempotency(options, handler, arguments)
}

/// The JSON reply of a call by name to an infallible handler.
pub fn json_reply<R: Serialize>(
    handler: &'static str,
    result: Result<Delivered<R>, Error>,
) -> Result<JsonValue, CallByNameError> {
    crate::activation::idempotent::json_reply(handler, result)
}

/// The JSON reply of a call by name to a fallible handler.
pub fn json_fallible_reply<R: Serialize, E: ExposedError>(
    handler: &'static str,
    result: Result<Delivered<R>, Error<E>>,
) -> Result<JsonValue, CallByNameError> {
    crate::activation::idempotent::json_fallible_reply(handler, result)
}

/// A state field's type must have a default unless `#[field(default = ..)]` gives one.
#[diagnostic::on_unimplemented(
    message = "the field type `{Self}` has no default value",
    label = "`{Self}` does not implement `Default`",
    note = "give the field a default with `#[field(default = <expr>)]`, or implement `Default` for `{Self}`"
)]
pub trait FieldDefault: Sized {
    /// The field's default.
    fn field_default() -> Self;
}

impl<T: Default> FieldDefault for T {
    fn field_default() -> Self {
        T::default()
    }
}

/// The constant naming the alarm handler `name` of `O`, whose argument is of type `A`.
pub const fn alarm<O, A>(name: &'static str) -> Alarm<O, A> {
    Alarm::new(name)
}

/// Decodes the stored argument of the alarm `name` for its handler; a misfit is the attempt's
/// error (retried, then a dead alarm).
pub fn alarm_args<A: DeserializeOwned>(name: &str, payload: Option<&[u8]>) -> Result<A, BoxError> {
    crate::alarms::args::decode(name, payload).map_err(BoxError::from)
}

/// Compile-time check of an alarm argument type.
pub const fn assert_alarm_argument<T: AlarmArgument>() {}

/// An alarm's argument is stored with the alarm, so it must be serializable.
#[diagnostic::on_unimplemented(
    message = "the alarm argument type `{Self}` cannot be stored with the alarm",
    label = "`{Self}` must implement `Serialize`, `Deserialize` and `Send`",
    note = "derive `serde::Serialize` and `serde::Deserialize` for `{Self}`, or take an owned serializable type"
)]
pub trait AlarmArgument: Serialize + DeserializeOwned + Send + 'static {}

impl<T: Serialize + DeserializeOwned + Send + 'static> AlarmArgument for T {}

/// A state field's type must be storable.
#[diagnostic::on_unimplemented(
    message = "the field type `{Self}` cannot be stored",
    label = "`{Self}` does not implement `Serialize` and `Deserialize`",
    note = "state fields are stored as JSON: derive `serde::Serialize` and `serde::Deserialize` for `{Self}`"
)]
pub trait StateField: Serialize + DeserializeOwned {}

impl<T: Serialize + DeserializeOwned> StateField for T {}

/// A handler argument must be serializable, so a call can also cross a process boundary.
#[diagnostic::on_unimplemented(
    message = "the handler argument type `{Self}` cannot be sent in a call",
    label = "`{Self}` must implement `Serialize`, `Deserialize` and `Send`",
    note = "derive `serde::Serialize` and `serde::Deserialize` for `{Self}`, or take an owned serializable type"
)]
pub trait HandlerArgument: Serialize + DeserializeOwned + Send + 'static {}

impl<T: Serialize + DeserializeOwned + Send + 'static> HandlerArgument for T {}

/// A handler's return value must be serializable, so a reply can also cross a process
/// boundary.
#[diagnostic::on_unimplemented(
    message = "the handler return type `{Self}` cannot be sent as a reply",
    label = "`{Self}` must implement `Serialize`, `Deserialize` and `Send`",
    note = "derive `serde::Serialize` and `serde::Deserialize` for `{Self}`"
)]
pub trait HandlerOutput: Serialize + DeserializeOwned + Send + 'static {}

impl<T: Serialize + DeserializeOwned + Send + 'static> HandlerOutput for T {}

/// A handler's error type must be sendable to the caller.
#[diagnostic::on_unimplemented(
    message = "the handler error type `{Self}` cannot be sent to the caller",
    label = "`{Self}` must be `Send + 'static`"
)]
pub trait HandlerError: Send + 'static {}

impl<T: Send + 'static> HandlerError for T {}

/// A handler's result written through a one-argument alias (`anyhow::Result<T>`,
/// `std::io::Result<T>`, a crate's own `Result<T>`): names the error type behind it.
#[diagnostic::on_unimplemented(
    message = "the handler return type `{Self}` is named `Result` but is not a `Result<T, E>`",
    label = "a handler's `Result<T>` must be an alias of `Result<T, E>`",
    note = "write the error type out, `Result<T, E>`, or return a plain value"
)]
pub trait HandlerResult {
    /// The error type.
    type Error;
}

impl<T, E> HandlerResult for Result<T, E> {
    type Error = E;
}

/// Compile-time checks, called from generated code with spans on the user's types.
///
/// A state field must be storable. (Its default is checked where `Default` is generated:
/// through [`FieldDefault`] for fields without `#[field(default = ..)]`.)
pub const fn assert_stored<T: StateField>() {}
/// Compile-time check of a handler argument type.
pub const fn assert_argument<T: HandlerArgument>() {}
/// Compile-time check of a handler return type.
pub const fn assert_output<T: HandlerOutput>() {}
/// Compile-time check of a handler error type.
pub const fn assert_error<T: HandlerError>() {}
/// Compile-time check of a handler result written through a one-argument alias.
pub const fn assert_result_alias<R: HandlerResult>()
where
    R::Error: HandlerError,
{
}
/// Compile-time check that a type is a complete durable object (both halves present).
pub const fn assert_durable_object<T: DurableObject>() {}

/// What an after-load hook or an alarm handler may return: nothing, or a `Result` with any
/// boxable error.
#[diagnostic::on_unimplemented(
    message = "an `#[after_load]` hook or an `#[alarm]` handler cannot return `{Self}`",
    label = "expected `()` or `Result<(), E>` with `E: Into<BoxError>`",
    note = "return nothing, or `Result<(), E>` where `E` converts into `Box<dyn std::error::Error + Send + Sync>`"
)]
pub trait HookResult {
    /// Converts into the runtime's hook result.
    fn into_hook_result(self) -> Result<(), BoxError>;
}

impl HookResult for () {
    fn into_hook_result(self) -> Result<(), BoxError> {
        Ok(())
    }
}

impl<E: Into<BoxError>> HookResult for Result<(), E> {
    fn into_hook_result(self) -> Result<(), BoxError> {
        self.map_err(Into::into)
    }
}

/// Builds an `ObjectOptions` value from generated code.
pub const fn options() -> ObjectOptions {
    object::ObjectOptions::new()
}

/// A duration from whole nanoseconds, for options parsed at compile time.
pub const fn nanos(nanos: u64) -> ::core::time::Duration {
    ::core::time::Duration::from_nanos(nanos)
}

#[cfg(feature = "schemars")]
pub use crate::exposed::{
    ArgumentsSchema, KnownSchema, OptionalArgument, RequiredArgument, SchemaProbe, UnknownSchema,
    handler_schemas,
};
pub use crate::exposed::{
    CallByNameError, Exposed, ExposedError, ExposedHandler, HandlerSchemas, arguments,
    fallible_reply, no_schemas, reply,
};

pub use serde_json::Value as JsonValue;

pub use crate::cluster::typed::{
    Decodable, DecodeProbe, Decoder, ForwardArguments, Forwarded, NotDecodable, ReplyCodec,
    forward, forward_target, no_handler_error,
};

/// Items `#[durable_fsm]` generates code against.
#[cfg(feature = "fsm")]
pub use crate::fsm::private as fsm;
