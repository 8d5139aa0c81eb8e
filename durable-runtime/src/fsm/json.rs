//! Encoding states, results and payloads as JSON a `jsonb` column accepts.
//!
//! The FSM tables keep `state`, `result` and `payload` as `jsonb` (queryable, as the specification
//! specifies). `jsonb` refuses strings holding U+0000, which JSON writes as the escape
//! `\u0000`, and serde_json writes NaN and infinite floats as `null`, which an `f64` field
//! refuses to read back. Both are found here, before anything is stored, so that such a value
//! is a deterministic error (routed to the step's error handler) rather than a failed commit
//! that would re-run the step forever.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::commit::codec;

/// Encodes a value that must also decode back (a state or a result).
pub(crate) fn encode_state<T: Serialize + DeserializeOwned>(value: &T) -> Result<String, String> {
    let bytes = codec::encode(value)?;
    codec::check_round_trip::<T>(&bytes)?;
    into_jsonb_text(bytes)
}

/// Encodes a value that is only stored (a signal payload).
pub(crate) fn encode_value<T: Serialize + ?Sized>(value: &T) -> Result<String, String> {
    into_jsonb_text(codec::encode(value)?)
}

/// The encoded bytes as text, refused if `jsonb` would refuse them.
fn into_jsonb_text(bytes: Vec<u8>) -> Result<String, String> {
    if let Some(at) = nul_escape(&bytes) {
        return Err(format!(
            "the encoded value holds the character U+0000 (escaped as \\u0000 at byte {at}), \
             which a jsonb column cannot store"
        ));
    }
    String::from_utf8(bytes).map_err(|error| format!("the encoded value is not UTF-8: {error}"))
}

/// The position of a `\u0000` escape in JSON text, if any. Escapes are read pairwise, so an
/// escaped backslash followed by `u0000` (the text `\u0000` itself) is not one.
fn nul_escape(json: &[u8]) -> Option<usize> {
    let mut at = 0;
    while let Some(offset) = memchr::memchr(b'\\', &json[at..]) {
        let start = at + offset;
        if json.get(start + 1) == Some(&b'u') && json.get(start + 2..start + 6) == Some(b"0000") {
            return Some(start);
        }
        // Skip the backslash and the character it escapes.
        at = start + 2;
        if at >= json.len() {
            break;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_only_real_nul_escapes() {
        assert_eq!(nul_escape(br#"{"a":"\u0000"}"#), Some(6));
        assert_eq!(nul_escape(br#"{"a":"\\u0000"}"#), None);
        assert_eq!(nul_escape(br#"{"a":"\\\u0000"}"#), Some(8));
        assert_eq!(nul_escape(br#"{"a":"\u0001"}"#), None);
        assert_eq!(nul_escape(br#"\"#), None);
    }

    #[test]
    fn refuses_nul_and_nan() {
        assert!(encode_value("a\0b").is_err());
        assert!(encode_value("a\\u0000b").is_ok());
        assert!(encode_state(&f64::NAN).is_err());
        assert_eq!(encode_state(&1.5f64).unwrap(), "1.5");
    }
}
