//! How object state is encoded for storage: JSON, so stored rows stay readable with SQL.
//!
//! A state that no longer fits its struct is decoded again through `serde_path_to_error`, so
//! that the failure is reported with the path of the failing field.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Encodes a state (or any serializable value) as JSON bytes. A panic in a hand-written
/// `Serialize` is an encoding failure: it must not end the object's task with its callers.
pub(crate) fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, String> {
    match catch_unwind(AssertUnwindSafe(|| serde_json::to_vec(value))) {
        Ok(encoded) => encoded.map_err(|e| e.to_string()),
        Err(payload) => Err(format!("Serialize panicked: {}", panic_message(&*payload))),
    }
}

/// A decoding failure with the path of the field that failed (`.` for the root).
#[derive(Debug)]
pub(crate) struct DecodeFailure {
    pub(crate) path: String,
    pub(crate) message: String,
}

/// Decodes JSON bytes, reporting the failing field's path. A panic in a hand-written
/// `Deserialize` is a decoding failure.
pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, DecodeFailure> {
    catch_unwind(|| decode_unguarded(bytes)).unwrap_or_else(|payload| {
        Err(DecodeFailure {
            path: ".".to_owned(),
            message: format!("Deserialize panicked: {}", panic_message(&*payload)),
        })
    })
}

fn decode_unguarded<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, DecodeFailure> {
    // The plain decoder first: tracking the path copies every field name it passes, and is
    // only needed to explain a failure.
    if let Ok(value) = serde_json::from_slice(bytes) {
        return Ok(value);
    }
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| DecodeFailure {
        path: e.path().to_string(),
        message: e.inner().to_string(),
    })?;
    de.end().map_err(|e| DecodeFailure {
        path: ".".to_owned(),
        message: e.to_string(),
    })?;
    Ok(value)
}

/// Checks that `bytes`, just encoded from a `T`, decode back into one if they hold a `null`,
/// and says why not.
///
/// serde_json writes NaN and infinite floats as `null`, which an `f64` field refuses:
/// committing such a state would leave the object impossible to load (and undecodable states
/// are never overwritten). Decoding costs about as much as encoding, so an encoding without a
/// `null` anywhere, which cannot hold such a float, is not decoded.
pub(crate) fn check_round_trip<T: DeserializeOwned>(bytes: &[u8]) -> Result<(), String> {
    if memchr::memmem::find(bytes, b"null").is_none() {
        return Ok(());
    }
    // The plain decoder first: the one with paths is only needed to explain a failure.
    if catch_unwind(|| serde_json::from_slice::<T>(bytes).is_ok()).unwrap_or(false) {
        return Ok(());
    }
    match decode::<T>(bytes) {
        Ok(_) => Ok(()),
        Err(failure) => Err(format!(
            "the encoded state does not decode back (at {}: {}); JSON has no NaN or infinity, \
             which serde_json writes as null",
            failure.path, failure.message
        )),
    }
}

/// The text of a panic payload, when it is a string.
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}
