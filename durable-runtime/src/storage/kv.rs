//! Changes to an object's key-value storage, committed with its state.

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
/// ];
/// assert_eq!(changes.len(), 2);
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
}
