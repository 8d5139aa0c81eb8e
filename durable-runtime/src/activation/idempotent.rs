//! Calls with an idempotency key: what identifies the call (its fingerprint), how its reply is
//! encoded to be stored with its commit, and how a stored reply reaches the caller.
//!
//! A reply is stored as the JSON of `Result<output, handler error>` (`{"Ok": ..}` or
//! `{"Err": ..}`). It is decoded in the caller's task, never in the object's: a typed caller
//! decodes it into its types, a call by name hands the JSON on as it is.

use std::time::SystemTime;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::oneshot;

use crate::error::Error;
use crate::exposed::{CallByNameError, ExposedError};
use crate::storage::{IdempotentReply, ObjectKey};

/// How a call's reply is encoded to be stored.
type Encode<R, E> = fn(&Result<R, E>) -> Result<Vec<u8>, String>;

/// What a call with an idempotency key sent back: a fresh result, or the reply stored by an
/// earlier call with the same key.
#[doc(hidden)]
#[derive(Debug)]
pub enum Delivered<R> {
    /// The handler ran for this call.
    Fresh(R),
    /// The stored reply (encoded), and the object it came from.
    Stored(ObjectKey, Vec<u8>),
}

/// The idempotency part of a call, as generated code builds it: nothing (no key), the key with
/// the call's fingerprint and the way to encode its reply, or the failure to encode the call's
/// arguments.
#[doc(hidden)]
pub struct Idempotency<R, E>(Inner<R, E>);

enum Inner<R, E> {
    None,
    Keyed {
        key: String,
        fingerprint: Vec<u8>,
        encode: Encode<R, E>,
    },
    Unencodable(String),
}

impl<R, E> Idempotency<R, E> {
    /// No idempotency key.
    pub fn none() -> Self {
        Self(Inner::None)
    }
}

/// The idempotency part of a call to `handler` with `arguments` (a tuple of references),
/// replies encoded with `encode`: nothing unless `key` is given.
pub(crate) fn keyed<R, E, A: Serialize + ?Sized>(
    key: Option<&str>,
    handler: &str,
    arguments: &A,
    encode: Encode<R, E>,
) -> Idempotency<R, E> {
    let Some(key) = key else {
        return Idempotency::none();
    };
    match fingerprint(handler, arguments) {
        Ok(fingerprint) => Idempotency(Inner::Keyed {
            key: key.to_owned(),
            fingerprint,
            encode,
        }),
        Err(message) => Idempotency(Inner::Unencodable(message)),
    }
}

/// What identifies a call: the handler's name, a newline, and its arguments as a JSON array
/// in declaration order. Stable across releases and processes (no hash seed), and the same
/// for a typed call and a call by name with the same values.
fn fingerprint<A: Serialize + ?Sized>(handler: &str, arguments: &A) -> Result<Vec<u8>, String> {
    let mut fingerprint = Vec::with_capacity(handler.len() + 16);
    fingerprint.extend_from_slice(handler.as_bytes());
    fingerprint.push(b'\n');
    serde_json::to_writer(&mut fingerprint, arguments).map_err(|error| error.to_string())?;
    Ok(fingerprint)
}

/// Encodes the reply of a fallible handler.
pub(crate) fn encode_fallible<R: Serialize, E: Serialize>(
    result: &Result<R, E>,
) -> Result<Vec<u8>, String> {
    serde_json::to_vec(result).map_err(|error| error.to_string())
}

/// Encodes the reply of an infallible handler (its error type has no values).
pub(crate) fn encode_infallible<R: Serialize, E>(result: &Result<R, E>) -> Result<Vec<u8>, String> {
    let encoded: Result<&R, ()> = match result {
        Ok(value) => Ok(value),
        Err(_) => Err(()),
    };
    serde_json::to_vec(&encoded).map_err(|error| error.to_string())
}

/// The idempotency part of a queued call.
pub(crate) struct Keyed<R, E> {
    pub(crate) key: String,
    fingerprint: Vec<u8>,
    encode: Encode<R, E>,
    /// Where a stored reply goes (the call's own reply sender is dropped then).
    stored: oneshot::Sender<Vec<u8>>,
}

/// The part of [`Idempotency`] a queued call keeps, and the receiver of a stored reply; or the
/// error that stops the call before it is sent.
pub(crate) type Split<R, E> = Result<Option<(Box<Keyed<R, E>>, oneshot::Receiver<Vec<u8>>)>, Error>;

impl<R, E> Idempotency<R, E> {
    /// Splits into what the queued call keeps and what its caller waits on. The key of the
    /// object called (`object_type`, `id`) is built only for an error: most calls carry no
    /// idempotency key.
    pub(crate) fn split(self, object_type: &'static str, id: &str) -> Split<R, E> {
        match self.0 {
            Inner::None => Ok(None),
            Inner::Keyed {
                key: idempotency_key,
                fingerprint,
                encode,
            } => {
                let (stored, receive) = oneshot::channel();
                let keyed = Keyed {
                    key: idempotency_key,
                    fingerprint,
                    encode,
                    stored,
                };
                Ok(Some((Box::new(keyed), receive)))
            }
            Inner::Unencodable(message) => Err(Error::Encode {
                key: ObjectKey::new(object_type, id),
                message: format!("the call's arguments cannot be encoded: {message}"),
            }),
        }
    }
}

impl<R, E> Keyed<R, E> {
    /// The reply to store for `result`, kept until `expires_at`.
    pub(crate) fn reply(
        &self,
        result: &Result<R, E>,
        expires_at: SystemTime,
    ) -> Result<IdempotentReply, String> {
        Ok(IdempotentReply {
            key: self.key.clone(),
            fingerprint: self.fingerprint.clone(),
            reply: (self.encode)(result)?,
            expires_at,
        })
    }

    /// Answers the call from `stored` if it was made by the same call (handler and
    /// arguments); otherwise returns the error to fail it with.
    pub(crate) fn replay(self, key: &ObjectKey, stored: IdempotentReply) -> Result<(), Error> {
        if stored.fingerprint != self.fingerprint {
            return Err(Error::IdempotencyKeyReused {
                key: key.clone(),
                idempotency_key: self.key,
            });
        }
        // The caller may have gone away; nothing to do then.
        let _ = self.stored.send(stored.reply);
        Ok(())
    }
}

/// The stored reply of a typed call, decoded: `{"Ok": ..}` or `{"Err": ..}`.
fn decode_stored<R: DeserializeOwned, E: DeserializeOwned>(
    key: ObjectKey,
    bytes: &[u8],
) -> Result<R, Error<E>> {
    match serde_json::from_slice::<Result<R, E>>(bytes) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(Error::Handler(error)),
        Err(error) => Err(Error::Decode {
            key,
            path: ".".to_owned(),
            message: format!("the stored reply does not decode: {error}"),
        }),
    }
}

/// A handler's reply must be storable and readable back for a call with an idempotency key.
#[diagnostic::on_unimplemented(
    message = "the handler error type `{Self}` cannot be stored as the reply of an idempotent call",
    label = "`{Self}` must implement `Serialize` and `Deserialize`",
    note = "derive `serde::Serialize` and `serde::Deserialize` for `{Self}`, or call without an idempotency key"
)]
pub trait StoredError: Serialize + DeserializeOwned + Send + 'static {}

impl<T: Serialize + DeserializeOwned + Send + 'static> StoredError for T {}

/// The result of a typed call with an infallible handler.
pub(crate) fn typed_reply<R: DeserializeOwned>(
    result: Result<Delivered<R>, Error>,
) -> Result<R, Error> {
    match result? {
        Delivered::Fresh(value) => Ok(value),
        // An infallible handler stores no error: `IgnoredAny` only reads one past.
        Delivered::Stored(key, bytes) => {
            decode_stored::<R, serde::de::IgnoredAny>(key.clone(), &bytes).map_err(|error| {
                match error.split() {
                    Ok(error) => error,
                    Err(_) => Error::Decode {
                        key,
                        path: ".".to_owned(),
                        message: "the stored reply is an error of an infallible handler".to_owned(),
                    },
                }
            })
        }
    }
}

/// The result of a typed call with a fallible handler.
pub(crate) fn typed_fallible_reply<R: DeserializeOwned, E: StoredError>(
    result: Result<Delivered<R>, Error<E>>,
) -> Result<R, Error<E>> {
    match result? {
        Delivered::Fresh(value) => Ok(value),
        Delivered::Stored(key, bytes) => decode_stored(key, &bytes),
    }
}

/// A stored reply handed on as JSON to a call by name.
fn stored_json(
    handler: &'static str,
    key: ObjectKey,
    bytes: &[u8],
) -> Result<serde_json::Value, CallByNameError> {
    match serde_json::from_slice::<Result<serde_json::Value, serde_json::Value>>(bytes) {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(CallByNameError::Handler { handler, error }),
        Err(error) => Err(Error::Decode {
            key,
            path: ".".to_owned(),
            message: format!("the stored reply does not decode: {error}"),
        }
        .into()),
    }
}

/// The result of a call by name of an infallible handler, as JSON.
pub(crate) fn json_reply<R: Serialize>(
    handler: &'static str,
    result: Result<Delivered<R>, Error>,
) -> Result<serde_json::Value, CallByNameError> {
    match result {
        Ok(Delivered::Stored(key, bytes)) => stored_json(handler, key, &bytes),
        Ok(Delivered::Fresh(value)) => crate::exposed::reply(handler, Ok(value)),
        Err(error) => crate::exposed::reply::<R>(handler, Err(error)),
    }
}

/// The result of a call by name of a fallible handler, as JSON.
pub(crate) fn json_fallible_reply<R: Serialize, E: ExposedError>(
    handler: &'static str,
    result: Result<Delivered<R>, Error<E>>,
) -> Result<serde_json::Value, CallByNameError> {
    match result {
        Ok(Delivered::Stored(key, bytes)) => stored_json(handler, key, &bytes),
        Ok(Delivered::Fresh(value)) => crate::exposed::fallible_reply::<R, E>(handler, Ok(value)),
        Err(error) => crate::exposed::fallible_reply::<R, E>(handler, Err(error)),
    }
}

/// The mode of a typed caller without an idempotency key: replies need no encoding.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default)]
pub struct WithoutKey;

/// The mode of a typed caller with an idempotency key: replies are stored, so the handler's
/// output and error types must be serde types.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default)]
pub struct WithKey;

/// How a typed caller in mode `Self` sends and reads back the reply of an infallible handler
/// with output `R`.
#[doc(hidden)]
pub trait Replies<R> {
    /// The idempotency part of a call to `handler` with `arguments`.
    fn idempotency<A: Serialize + ?Sized>(
        options: &crate::CallOptions,
        handler: &str,
        arguments: &A,
    ) -> Idempotency<R, std::convert::Infallible>;

    /// The call's result from what was delivered.
    fn read(result: Result<Delivered<R>, Error>) -> Result<R, Error>;
}

impl<R> Replies<R> for WithoutKey {
    fn idempotency<A: Serialize + ?Sized>(
        _: &crate::CallOptions,
        _: &str,
        _: &A,
    ) -> Idempotency<R, std::convert::Infallible> {
        Idempotency::none()
    }

    fn read(result: Result<Delivered<R>, Error>) -> Result<R, Error> {
        fresh(result)
    }
}

impl<R: Serialize + DeserializeOwned> Replies<R> for WithKey {
    fn idempotency<A: Serialize + ?Sized>(
        options: &crate::CallOptions,
        handler: &str,
        arguments: &A,
    ) -> Idempotency<R, std::convert::Infallible> {
        let key = options.idempotency_key.as_deref();
        keyed(key, handler, arguments, encode_infallible::<R, _>)
    }

    fn read(result: Result<Delivered<R>, Error>) -> Result<R, Error> {
        typed_reply(result)
    }
}

/// [`Replies`] for a fallible handler with error `E`.
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "the handler error type `{E}` cannot be stored as the reply of a call with an idempotency key",
    label = "`{E}` must implement `Serialize` and `Deserialize`",
    note = "derive `serde::Serialize` and `serde::Deserialize` for `{E}`, or call without an idempotency key"
)]
pub trait FallibleReplies<R, E> {
    /// The idempotency part of a call to `handler` with `arguments`.
    fn idempotency<A: Serialize + ?Sized>(
        options: &crate::CallOptions,
        handler: &str,
        arguments: &A,
    ) -> Idempotency<R, E>;

    /// The call's result from what was delivered.
    fn read(result: Result<Delivered<R>, Error<E>>) -> Result<R, Error<E>>;
}

impl<R, E> FallibleReplies<R, E> for WithoutKey {
    fn idempotency<A: Serialize + ?Sized>(
        _: &crate::CallOptions,
        _: &str,
        _: &A,
    ) -> Idempotency<R, E> {
        Idempotency::none()
    }

    fn read(result: Result<Delivered<R>, Error<E>>) -> Result<R, Error<E>> {
        fresh(result)
    }
}

impl<R: Serialize + DeserializeOwned, E: StoredError> FallibleReplies<R, E> for WithKey {
    fn idempotency<A: Serialize + ?Sized>(
        options: &crate::CallOptions,
        handler: &str,
        arguments: &A,
    ) -> Idempotency<R, E> {
        let key = options.idempotency_key.as_deref();
        keyed(key, handler, arguments, encode_fallible::<R, E>)
    }

    fn read(result: Result<Delivered<R>, Error<E>>) -> Result<R, Error<E>> {
        typed_fallible_reply(result)
    }
}

/// The result of a call sent without a key, which is never answered from a stored reply.
pub(crate) fn fresh<R, E>(result: Result<Delivered<R>, Error<E>>) -> Result<R, Error<E>> {
    match result? {
        Delivered::Fresh(value) => Ok(value),
        Delivered::Stored(key, _) => Err(Error::Decode {
            key,
            path: ".".to_owned(),
            message: "a stored reply answered a call without an idempotency key".to_owned(),
        }),
    }
}

/// The idempotency part of a call by name to an infallible handler.
pub(crate) fn json_idempotency<R: Serialize, A: Serialize + ?Sized>(
    options: &crate::CallOptions,
    handler: &str,
    arguments: &A,
) -> Idempotency<R, std::convert::Infallible> {
    let key = options.idempotency_key.as_deref();
    keyed(key, handler, arguments, encode_infallible::<R, _>)
}

/// The idempotency part of a call by name to a fallible handler.
pub(crate) fn json_fallible_idempotency<R: Serialize, E: ExposedError, A: Serialize + ?Sized>(
    options: &crate::CallOptions,
    handler: &str,
    arguments: &A,
) -> Idempotency<R, E> {
    let key = options.idempotency_key.as_deref();
    keyed(key, handler, arguments, encode_fallible::<R, E>)
}
