//! The argument an alarm carries: encoded as JSON when the alarm is set, stored with its row,
//! and decoded into the `#[alarm]` handler's argument type when it fires.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Why an alarm's argument could not be encoded or decoded.
///
/// A decode failure happens when the alarm fires (the stored argument no longer fits the
/// handler's argument type, say after a change of that type): it fails the alarm's attempt like
/// an error of its handler, so the alarm is retried and then kept as a dead alarm; nothing
/// crashes.
///
/// # Examples
///
/// ```
/// use durable_runtime::AlarmArgsError;
///
/// let error = AlarmArgsError::Decode { alarm: "remind".into(), message: "expected u32".into() };
/// assert_eq!(
///     error.to_string(),
///     "the argument of alarm `remind` does not decode as its argument type: expected u32"
/// );
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AlarmArgsError {
    /// The argument given when scheduling could not be encoded (for example a map with
    /// non-string keys); nothing was scheduled.
    #[error("the argument of alarm `{alarm}` cannot be encoded: {message}")]
    Encode {
        /// The alarm's name.
        alarm: String,
        /// The encoder's message.
        message: String,
    },
    /// The stored argument does not decode as the handler's argument type.
    #[error("the argument of alarm `{alarm}` does not decode as its argument type: {message}")]
    Decode {
        /// The alarm's name.
        alarm: String,
        /// The decoder's message, with the path to the offending field.
        message: String,
    },
}

/// Encodes the argument of the alarm `alarm`.
pub(crate) fn encode<A: Serialize + ?Sized>(
    alarm: &str,
    args: &A,
) -> Result<Vec<u8>, AlarmArgsError> {
    serde_json::to_vec(args).map_err(|error| AlarmArgsError::Encode {
        alarm: alarm.to_owned(),
        message: error.to_string(),
    })
}

/// Decodes the stored argument of the alarm `alarm`; an alarm set without one (`None`) reads
/// as JSON `null`, which an `Option` argument accepts.
pub(crate) fn decode<A: DeserializeOwned>(
    alarm: &str,
    payload: Option<&[u8]>,
) -> Result<A, AlarmArgsError> {
    let bytes = payload.unwrap_or(b"null");
    let failed = |message: String| AlarmArgsError::Decode {
        alarm: alarm.to_owned(),
        message,
    };
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let args = serde_path_to_error::deserialize(&mut deserializer)
        .map_err(|error| failed(error.to_string()))?;
    deserializer
        .end()
        .map_err(|error| failed(error.to_string()))?;
    Ok(args)
}

#[cfg(test)]
mod tests {
    use super::{AlarmArgsError, decode, encode};

    #[test]
    fn arguments_round_trip_and_misfits_are_typed_errors() {
        let bytes = encode("remind", &("hello", 3u32)).unwrap();
        assert_eq!(
            decode::<(String, u32)>("remind", Some(&bytes)).unwrap(),
            ("hello".to_owned(), 3)
        );
        assert!(matches!(
            decode::<u32>("remind", Some(&bytes)),
            Err(AlarmArgsError::Decode { .. })
        ));
        assert_eq!(decode::<Option<u32>>("remind", None).unwrap(), None);
        assert!(decode::<u32>("remind", None).is_err());
        assert!(decode::<u32>("remind", Some(b"\xff")).is_err());
    }
}
