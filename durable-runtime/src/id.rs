//! Validation of object ids.

/// The longest accepted object id, in bytes.
///
/// # Examples
///
/// ```
/// use durable_runtime::{validate_id, InvalidId, MAX_ID_LEN};
///
/// assert!(validate_id(&"x".repeat(MAX_ID_LEN)).is_ok());
/// // Bytes, not characters: `é` is two bytes in UTF-8.
/// let id = "é".repeat(MAX_ID_LEN / 2 + 1);
/// assert_eq!(validate_id(&id), Err(InvalidId::TooLong { len: MAX_ID_LEN + 2 }));
/// ```
pub const MAX_ID_LEN: usize = 1024;

/// Why an object id was refused. Ids are checked before storage is touched.
///
/// # Examples
///
/// ```
/// use durable_runtime::{validate_id, InvalidId};
///
/// assert_eq!(validate_id(""), Err(InvalidId::Empty));
/// assert!(validate_id("user/42 \"quoted\" 100% 🦀").is_ok());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidId {
    /// The id is the empty string.
    #[error("object id is empty")]
    Empty,
    /// The id is longer than [`MAX_ID_LEN`] bytes.
    #[error("object id is {len} bytes long; the limit is {MAX_ID_LEN}")]
    TooLong {
        /// The id's length in bytes.
        len: usize,
    },
    /// The id contains a NUL character, which SQL text columns cannot hold.
    #[error("object id contains a NUL character at byte {position}")]
    ContainsNul {
        /// The byte offset of the first NUL.
        position: usize,
    },
}

/// Checks that `id` can address an object: non-empty, at most [`MAX_ID_LEN`] bytes, no NUL.
/// Every other UTF-8 string is a valid id.
///
/// # Examples
///
/// ```
/// use durable_runtime::{validate_id, InvalidId};
///
/// assert!(validate_id("user:123").is_ok());
/// assert_eq!(validate_id("a\0b"), Err(InvalidId::ContainsNul { position: 1 }));
/// assert_eq!(validate_id(&"x".repeat(1025)), Err(InvalidId::TooLong { len: 1025 }));
/// ```
pub fn validate_id(id: &str) -> Result<(), InvalidId> {
    if id.is_empty() {
        return Err(InvalidId::Empty);
    }
    if id.len() > MAX_ID_LEN {
        return Err(InvalidId::TooLong { len: id.len() });
    }
    if let Some(position) = id.bytes().position(|b| b == 0) {
        return Err(InvalidId::ContainsNul { position });
    }
    Ok(())
}
