//! Typed calls forwarded to the node serving their object: what the client generated for an
//! exposed handler does when [`Runtime::forward_target`] names another node.
//!
//! The client encodes its arguments as the JSON object by name the owner's handler table
//! decodes ([`ForwardArguments`]), sends the call through the same path as a call by name
//! ([`Runtime::forward`]: deadline, hop count, idempotency key, one retry after a refreshed
//! shard map), and decodes the reply into the handler's output type and its error into the
//! handler's error type ([`ReplyCodec`]). Whether a handler's types decode at all is asked
//! through a [`DecodeProbe`] (autoref specialisation), so that exposing a handler never needs
//! more than `Serialize` on its error: a handler whose error type is not `Deserialize` gets no
//! codec, and its typed calls keep failing with [`Error::NotOwner`] off the owner.

use std::convert::Infallible;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::ForwardError;
use super::forward::{DEFAULT_WAIT, Sent};
use crate::CallOptions;
use crate::error::Error;
use crate::object::DurableObject;
use crate::object::handle::Runtime;
use crate::storage::ObjectKey;

/// Decodes a JSON value into `T`.
pub type Decoder<T> = fn(Value) -> Result<T, serde_json::Error>;

/// Stands for the type `T` in generated code: `(&DecodeProbe::<T>::new()).decoder()` is
/// [`Decodable::decoder`] (a decoder) when `T` is `DeserializeOwned`, and otherwise, through
/// one more reference, [`NotDecodable::decoder`] (none).
pub struct DecodeProbe<T>(PhantomData<fn() -> T>);

impl<T> DecodeProbe<T> {
    /// The probe of `T`.
    #[allow(clippy::new_without_default)]
    pub const fn new() -> Self {
        Self(PhantomData)
    }
}

/// The decoder of a type that has one.
pub trait Decodable<T> {
    /// `Some` decoder.
    fn decoder(&self) -> Option<Decoder<T>>;
}

impl<T: DeserializeOwned> Decodable<T> for DecodeProbe<T> {
    fn decoder(&self) -> Option<Decoder<T>> {
        Some(serde_json::from_value::<T>)
    }
}

/// The decoder of a type that has none.
pub trait NotDecodable<T> {
    /// `None`.
    fn decoder(&self) -> Option<Decoder<T>>;
}

impl<T> NotDecodable<T> for &DecodeProbe<T> {
    fn decoder(&self) -> Option<Decoder<T>> {
        None
    }
}

/// The error decoder of a handler that cannot fail: an error in its reply is a misfit.
pub fn no_handler_error() -> Option<Decoder<Infallible>> {
    fn refuse(error: Value) -> Result<Infallible, serde_json::Error> {
        Err(serde::de::Error::custom(format!(
            "the handler cannot fail, yet its reply is the error {error}"
        )))
    }
    Some(refuse)
}

/// How a forwarded typed call's reply is decoded: its output and the handler's own error.
pub struct ReplyCodec<R, E> {
    output: Decoder<R>,
    error: Decoder<E>,
}

impl<R, E> ReplyCodec<R, E> {
    /// A codec when both types decode; `None` (the call is not forwarded) otherwise.
    pub fn new(output: Option<Decoder<R>>, error: Option<Decoder<E>>) -> Option<Self> {
        Some(Self {
            output: output?,
            error: error?,
        })
    }
}

/// A typed call's arguments as the JSON object by name the owner's handler table decodes.
#[derive(Debug, Default)]
pub struct ForwardArguments {
    arguments: Map<String, Value>,
    unencodable: Option<String>,
}

impl ForwardArguments {
    /// No arguments yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the argument `name`.
    #[must_use]
    pub fn with<T: Serialize + ?Sized>(mut self, name: &str, value: &T) -> Self {
        match serde_json::to_value(value) {
            Ok(value) => {
                self.arguments.insert(name.to_owned(), value);
            }
            Err(error) => {
                self.unencodable
                    .get_or_insert_with(|| format!("argument `{name}`: {error}"));
            }
        }
        self
    }
}

/// Where a typed call ended: done (the owner's reply or a failure), or to be run here after
/// all (the refreshed shard map says this node serves the object), with the time left to
/// its deadline if the call had a timeout.
pub enum Forwarded<R, E> {
    /// The call's result.
    Done(Result<R, Error<E>>),
    /// Run it here.
    Here(Option<Duration>),
}

/// The owner's address when a call of `O`'s object `id` is to be forwarded: one
/// `OnceLock::get` without a cluster.
#[inline]
pub fn forward_target<O: DurableObject>(runtime: &Runtime, id: &str) -> Option<Arc<str>> {
    runtime.forward_target(O::TYPE_NAME, id)
}

/// Forwards a typed call of `handler` on `O`'s object `id` to `owner` (see the module docs).
pub async fn forward<O: DurableObject, R, E>(
    runtime: &Runtime,
    owner: Arc<str>,
    id: &str,
    handler: &'static str,
    arguments: ForwardArguments,
    options: &CallOptions,
    codec: ReplyCodec<R, E>,
) -> Forwarded<R, E> {
    let key = || ObjectKey::new(O::TYPE_NAME, id);
    let failed = |source: ForwardError| Error::Forward {
        key: key(),
        source: Box::new(source),
    };
    if let Some(message) = arguments.unencodable {
        return Forwarded::Done(Err(failed(ForwardError::Arguments { message })));
    }
    let call_timeout = runtime
        .options_of::<O>()
        .call_timeout
        .unwrap_or(DEFAULT_WAIT);
    let sent = runtime
        .forward(
            owner,
            O::TYPE_NAME,
            id,
            handler,
            Value::Object(arguments.arguments),
            options,
            call_timeout,
        )
        .await;
    let misfit = |error: serde_json::Error| {
        failed(ForwardError::Reply {
            message: error.to_string(),
        })
    };
    Forwarded::Done(match sent {
        Ok(Sent::Reply(reply)) => (codec.output)(reply).map_err(misfit),
        Ok(Sent::Here { remaining, .. }) => {
            return Forwarded::Here(options.timeout.map(|_| remaining));
        }
        Err(error) => Err(match error.split() {
            Ok(error) => error.widen(),
            Err(own) => match (codec.error)(own) {
                Ok(own) => Error::Handler(own),
                Err(error) => misfit(error),
            },
        }),
    })
}
