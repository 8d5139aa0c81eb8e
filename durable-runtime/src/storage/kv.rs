//! Changes to an object's key-value storage, committed with its state, and what a store
//! reports about that storage.

use std::fmt;

/// One change to an object's key-value storage, committed in the same transaction as the
/// object's state and under the same version check ([`ObjectWrite::kv`](super::ObjectWrite::kv)).
///
/// Changes of one write apply in order.
///
/// # Examples
///
/// ```
/// use durable_runtime::storage::KvChange;
///
/// let changes = vec![
///     KvChange::Put { key: "block:1".into(), value: br#"{"text":"hello"}"#.to_vec() },
///     KvChange::Delete { key: "block:0".into() },
///     KvChange::Limit { max_keys: 10_000, max_bytes: 50 << 20 },
/// ];
/// assert_eq!(changes.len(), 3);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KvChange {
    /// Stores `value` (an encoded serde value) under `key`, replacing any value there.
    Put {
        /// The key; any string, the empty string included.
        key: String,
        /// The encoded value.
        value: Vec<u8>,
    },
    /// Removes `key` if it exists.
    Delete {
        /// The key.
        key: String,
    },
    /// Removes every key of the object.
    DeleteAll,
    /// Not a change but a check of the changes before it: once they are applied, the object
    /// holds at most `max_keys` keys and `max_bytes` bytes ([`KvUsage`]), or the write is
    /// rejected with [`CommitError::KvLimit`](super::CommitError::KvLimit) and nothing of it
    /// is applied.
    Limit {
        /// The most keys the object may hold.
        max_keys: u64,
        /// The most bytes (keys and values together) the object may hold.
        max_bytes: u64,
    },
}

/// How much key-value storage an object uses, as its store counts it.
///
/// Each entry counts the length of its key plus the length of its encoded value.
///
/// # Examples
///
/// ```
/// use durable_runtime::storage::KvUsage;
///
/// let usage = KvUsage::of([("a", &b"1"[..]), ("bc", &b"\"x\""[..])]);
/// assert_eq!(usage, KvUsage { keys: 2, bytes: 2 + 5 });
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KvUsage {
    /// The number of keys.
    pub keys: u64,
    /// The bytes of every key and value together.
    pub bytes: u64,
}

impl KvUsage {
    /// The usage of the given entries.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::storage::KvUsage;
    ///
    /// assert_eq!(KvUsage::of(std::iter::empty::<(&str, &[u8])>()), KvUsage::default());
    /// ```
    pub fn of<'a>(entries: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> Self {
        entries
            .into_iter()
            .fold(Self::default(), |usage, (key, value)| Self {
                keys: usage.keys + 1,
                bytes: usage.bytes + entry_bytes(key, value),
            })
    }

    /// The first limit this usage exceeds, if any.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::storage::{KvLimitExceeded, KvUsage};
    ///
    /// let usage = KvUsage { keys: 3, bytes: 10 };
    /// assert_eq!(usage.exceeds(3, 10), None);
    /// assert_eq!(usage.exceeds(2, 10), Some(KvLimitExceeded::Keys { max: 2, found: 3 }));
    /// assert_eq!(usage.exceeds(3, 9), Some(KvLimitExceeded::Bytes { max: 9, found: 10 }));
    /// ```
    pub fn exceeds(self, max_keys: u64, max_bytes: u64) -> Option<KvLimitExceeded> {
        if self.keys > max_keys {
            Some(KvLimitExceeded::Keys {
                max: max_keys,
                found: self.keys,
            })
        } else if self.bytes > max_bytes {
            Some(KvLimitExceeded::Bytes {
                max: max_bytes,
                found: self.bytes,
            })
        } else {
            None
        }
    }
}

/// The bytes one entry counts for: its key's length plus its value's.
///
/// # Examples
///
/// ```
/// assert_eq!(durable_runtime::storage::entry_bytes("key", b"[1]"), 6);
/// ```
pub fn entry_bytes(key: &str, value: &[u8]) -> u64 {
    (key.len() + value.len()) as u64
}

/// A per-object limit of key-value storage that a write would have exceeded.
///
/// # Examples
///
/// ```
/// use durable_runtime::storage::KvLimitExceeded;
///
/// let exceeded = KvLimitExceeded::Keys { max: 10_000, found: 10_001 };
/// assert_eq!(exceeded.to_string(), "10001 keys, more than the limit of 10000");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvLimitExceeded {
    /// Too many keys.
    Keys {
        /// The limit.
        max: u64,
        /// How many keys the object would have held.
        found: u64,
    },
    /// Too many bytes (keys and values together).
    Bytes {
        /// The limit.
        max: u64,
        /// How many bytes the object would have held.
        found: u64,
    },
}

impl fmt::Display for KvLimitExceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Keys { max, found } => write!(f, "{found} keys, more than the limit of {max}"),
            Self::Bytes { max, found } => {
                write!(f, "{found} bytes, more than the limit of {max}")
            }
        }
    }
}

/// The smallest byte string above every string that starts with `prefix`, if there is one:
/// what a store compares keys against to list a prefix as a range.
///
/// # Examples
///
/// ```
/// use durable_runtime::storage::prefix_end;
///
/// assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
/// assert_eq!(prefix_end(b"a\xff"), Some(b"b".to_vec()));
/// assert_eq!(prefix_end(b""), None);
/// ```
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}
