//! Lifecycle events, for audit logs and dashboards.

use crate::storage::ObjectKey;

/// Something that happened to an object. Subscribe with
/// [`Runtime::subscribe`](crate::Runtime::subscribe).
///
/// Events are delivered through a bounded broadcast channel: a subscriber that falls behind
/// by more than its capacity loses the oldest events (and is told so by
/// `RecvError::Lagged`); the objects never wait for subscribers.
///
/// # Examples
///
/// ```
/// use durable_runtime::{durable_object, Event, MemoryStorage, Runtime};
///
/// #[durable_object]
/// pub struct Counter { count: i64 }
///
/// #[durable_object]
/// impl Counter {
///     #[handler]
///     fn handle_get(&self) -> i64 { self.count }
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let rt = Runtime::new(MemoryStorage::new());
/// let mut events = rt.subscribe();
/// Counter::get(&rt, "a").await.unwrap();
/// match events.recv().await.unwrap() {
///     Event::Created { key } => assert_eq!(key.object_id, "a"),
///     other => panic!("unexpected {other:?}"),
/// }
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// The object was activated with nothing stored (never created, or deleted): it runs on
    /// its default state, which its first change stores.
    Created {
        /// The object.
        key: ObjectKey,
    },
    /// The object was activated from stored state.
    Loaded {
        /// The object.
        key: ObjectKey,
    },
    /// A hibernated object was woken by a call.
    Woken {
        /// The object.
        key: ObjectKey,
    },
    /// The object dropped its decoded state after `hibernate_after` of inactivity.
    Hibernated {
        /// The object.
        key: ObjectKey,
    },
    /// The object left memory (after `shutdown_after`, to make room, or at runtime shutdown).
    ShutDown {
        /// The object.
        key: ObjectKey,
    },
    /// The object's state and alarms were deleted.
    Deleted {
        /// The object.
        key: ObjectKey,
    },
    /// An alarm handler failed.
    AlarmFailed {
        /// The object.
        key: ObjectKey,
        /// The alarm's name.
        alarm: String,
        /// The attempt that failed (1 for the first).
        attempt: u32,
        /// The error.
        error: String,
        /// Whether this was the last attempt: the alarm is now kept as a dead alarm.
        dead: bool,
    },
    /// A due alarm names an object type this runtime does not know; it is kept in storage.
    UnknownAlarmType {
        /// The object.
        key: ObjectKey,
        /// The alarm's name.
        alarm: String,
    },
}
