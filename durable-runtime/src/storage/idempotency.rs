//! The stored reply of a call that carried an idempotency key.

use std::time::SystemTime;

/// The reply of a call made with an idempotency key, committed in the same transaction as the
/// call's state ([`ObjectWrite::idempotency`](super::ObjectWrite::idempotency)), so that a retry
/// with the same key is answered from it without running the handler again.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use durable_runtime::storage::IdempotentReply;
///
/// let reply = IdempotentReply {
///     key: "order-42".into(),
///     fingerprint: b"increment:{\"by\":1}".to_vec(),
///     reply: b"{\"Ok\":1}".to_vec(),
///     expires_at: SystemTime::UNIX_EPOCH + Duration::from_secs(86_400),
/// };
/// assert_eq!(reply.key, "order-42");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdempotentReply {
    /// The caller's idempotency key, unique per object.
    pub key: String,
    /// What identifies the call (handler and arguments): a retry whose fingerprint differs is
    /// refused instead of replayed.
    pub fingerprint: Vec<u8>,
    /// The encoded reply.
    pub reply: Vec<u8>,
    /// When the key may be forgotten.
    pub expires_at: SystemTime,
}
