//! What an operator sees of a runtime's objects from outside them: the live objects of a type
//! by status, the whole view of one object, and the dead alarms across objects, with their
//! re-queueing. The typed forms are here; `exposed` reaches them by type name.

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value;

use crate::activation::call::{Access, AsyncBody, call};
use crate::activation::registry::Residency;
use crate::alarms::Alarm;
use crate::error::Error;
use crate::object::DurableObject;
use crate::object::context::Context;
use crate::object::handle::Runtime;
use crate::runtime::ObjectStatus;
use crate::storage::{AlarmKey, AlarmPage, AlarmRecord, IdPage, Loaded, ObjectKey};

/// Which of a type's live objects to list (see [`Runtime::list_live`]).
///
/// # Examples
///
/// ```
/// use durable_runtime::{durable_object, LiveStatus, MemoryStorage, Runtime};
///
/// #[durable_object]
/// pub struct Counter { count: i64 }
///
/// #[durable_object]
/// impl Counter {
///     #[handler]
///     fn handle_add(&mut self, by: i64) -> i64 { self.count += by; self.count }
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let rt = Runtime::new(MemoryStorage::new());
/// Counter::add(&rt, "a", 1).await.unwrap();
/// assert_eq!(rt.list_live::<Counter>(LiveStatus::Active, None, 10).ids, ["a"]);
/// assert!(rt.list_live::<Counter>(LiveStatus::Hibernated, None, 10).ids.is_empty());
/// # }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LiveStatus {
    /// Live with its state decoded in memory ([`ObjectStatus::Active`]).
    Active,
    /// Live with only its encoded state kept, after `hibernate_after`
    /// ([`ObjectStatus::Hibernated`]).
    Hibernated,
}

impl LiveStatus {
    fn residency(self) -> Residency {
        match self {
            Self::Active => Residency::Active,
            Self::Hibernated => Residency::Hibernated,
        }
    }
}

/// One object seen whole, as [`Runtime::inspect`] returns it: where it is, its committed
/// state and version, and its alarms.
///
/// # Examples
///
/// ```
/// use durable_runtime::{durable_object, MemoryStorage, ObjectStatus, Runtime};
///
/// #[durable_object]
/// pub struct Counter { count: i64 }
///
/// #[durable_object]
/// impl Counter {
///     #[handler]
///     fn handle_add(&mut self, by: i64) -> i64 { self.count += by; self.count }
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let rt = Runtime::new(MemoryStorage::new());
/// Counter::add(&rt, "a", 2).await.unwrap();
/// let view = rt.inspect::<Counter>("a").await.unwrap().unwrap();
/// assert_eq!(view.status, ObjectStatus::Active);
/// assert_eq!(view.state, serde_json::json!({"count": 2}));
/// assert_eq!(view.version, Some(1));
/// assert!(view.alarms.is_empty());
/// # }
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ObjectView {
    /// Where the object is: [`Active`](ObjectStatus::Active) or
    /// [`Hibernated`](ObjectStatus::Hibernated) in this runtime, or only
    /// [`Stored`](ObjectStatus::Stored).
    pub status: ObjectStatus,
    /// The committed state as JSON: what storage holds, or the default state of an object
    /// that is live without ever having been stored (it stores nothing until it changes).
    pub state: Value,
    /// The stored version of that state, `None` if the object is not stored.
    pub version: Option<u64>,
    /// Its alarms, dead ones included, ordered by due time then name.
    pub alarms: Vec<AlarmRecord>,
}

/// A page of dead alarms listed across objects by name
/// ([`Runtime::list_dead_alarms_by_name`](crate::Runtime::list_dead_alarms_by_name)), ordered
/// by type, id, then name.
///
/// # Examples
///
/// ```
/// use durable_runtime::{DeadAlarmPage, MemoryStorage, Runtime};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let rt = Runtime::new(MemoryStorage::new());
/// // Follow `next_cursor` until it is `None`.
/// let (mut dead, mut cursor) = (Vec::new(), None);
/// loop {
///     let page = rt.list_dead_alarms_by_name(None, cursor.as_deref(), 100).await.unwrap();
///     let DeadAlarmPage { alarms, next_cursor } = page;
///     dead.extend(alarms);
///     match next_cursor {
///         Some(next) => cursor = Some(next),
///         None => break,
///     }
/// }
/// assert!(dead.is_empty());
/// # }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct DeadAlarmPage {
    /// The dead alarms on this page: each with its object, name, due time, attempt count and
    /// last error.
    pub alarms: Vec<AlarmRecord>,
    /// The cursor of the next page, an opaque string (`None` on the last page).
    pub next_cursor: Option<String>,
}

impl DeadAlarmPage {
    /// The page of a storage listing, its position turned into a cursor.
    pub(crate) fn from_page(page: AlarmPage) -> Self {
        Self {
            alarms: page.alarms,
            next_cursor: page.next.as_ref().map(encode_cursor),
        }
    }
}

/// A listing cursor that is not one a listing handed out.
///
/// # Examples
///
/// ```
/// use durable_runtime::{CallByNameError, MemoryStorage, Runtime};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let rt = Runtime::new(MemoryStorage::new());
/// let err = rt.list_dead_alarms_by_name(None, Some("not a cursor"), 10).await.unwrap_err();
/// assert!(matches!(err, CallByNameError::InvalidCursor(_)));
/// assert!(err.to_string().starts_with("invalid cursor"));
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[error("invalid cursor: {reason}")]
pub struct InvalidCursor {
    reason: String,
}

/// A dead alarm's position as a cursor: its `[type, id, name]` as JSON, in URL-safe base64
/// so that it travels in a query string as it is.
pub(crate) fn encode_cursor(alarm: &AlarmKey) -> String {
    let position = [&alarm.key.object_type, &alarm.key.object_id, &alarm.name];
    // Encoding an array of strings cannot fail.
    let json = serde_json::to_vec(&position).unwrap_or_default();
    URL_SAFE_NO_PAD.encode(json)
}

/// The position a cursor of [`encode_cursor`] holds.
pub(crate) fn decode_cursor(cursor: &str) -> Result<AlarmKey, InvalidCursor> {
    let invalid = |reason: String| InvalidCursor { reason };
    let json = URL_SAFE_NO_PAD
        .decode(cursor)
        .map_err(|err| invalid(format!("not URL-safe base64 ({err})")))?;
    let [object_type, object_id, name]: [String; 3] = serde_json::from_slice(&json)
        .map_err(|err| invalid(format!("not a listing position ({err})")))?;
    Ok(AlarmKey::new(ObjectKey::new(object_type, object_id), name))
}

impl Runtime {
    /// Up to `limit` ids (at least one) of the objects of type `O` live in this runtime with
    /// `status`, after `after`, in ascending byte order, and where the next page starts (pass
    /// it as `after`). It reads the runtime's registry, not storage: what another runtime on
    /// the same database holds is not listed.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::{durable_object, LiveStatus, MemoryStorage, Runtime};
    ///
    /// #[durable_object(hibernate_after = "1m")]
    /// pub struct Counter { count: i64 }
    ///
    /// #[durable_object]
    /// impl Counter {
    ///     #[handler]
    ///     fn handle_add(&mut self, by: i64) -> i64 { self.count += by; self.count }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let rt = Runtime::new(MemoryStorage::new());
    /// for id in ["c", "a", "b"] {
    ///     Counter::add(&rt, id, 1).await.unwrap();
    /// }
    /// let page = rt.list_live::<Counter>(LiveStatus::Active, None, 2);
    /// assert_eq!(page.ids, ["a", "b"]);
    /// let rest = rt.list_live::<Counter>(LiveStatus::Active, page.next.as_deref(), 2);
    /// assert_eq!((rest.ids, rest.next), (vec!["c".to_owned()], None));
    ///
    /// tokio::time::sleep(Duration::from_secs(120)).await; // past `hibernate_after`
    /// Counter::add(&rt, "b", 1).await.unwrap(); // woken
    /// assert_eq!(rt.list_live::<Counter>(LiveStatus::Hibernated, None, 10).ids, ["a", "c"]);
    /// assert_eq!(rt.list_live::<Counter>(LiveStatus::Active, None, 10).ids, ["b"]);
    /// # }
    /// ```
    pub fn list_live<O: DurableObject>(
        &self,
        status: LiveStatus,
        after: Option<&str>,
        limit: usize,
    ) -> IdPage {
        self.with_type_entry::<O, _>(|entry| entry.live_ids(status.residency(), after, limit))
    }

    /// The object `(O, id)` seen whole: its status, its committed state as JSON with its
    /// version, and its alarms; `None` if it is neither live nor stored. Reads storage and
    /// the registry; does not activate the object, and never shows a state that is not
    /// committed.
    ///
    /// # Errors
    ///
    /// An invalid id, a storage failure ([`Error::Storage`]) or a stored state that is not
    /// JSON ([`Error::Decode`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::{durable_object, Context, MemoryStorage, ObjectStatus, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Session { visits: u32 }
    ///
    /// #[durable_object]
    /// impl Session {
    ///     #[handler]
    ///     fn handle_visit(&mut self, ctx: &Context) {
    ///         self.visits += 1;
    ///         ctx.schedule_alarm(Session::EXPIRE, Duration::from_secs(1800));
    ///     }
    ///
    ///     #[handler]
    ///     fn handle_visits(&self) -> u32 { self.visits }
    ///
    ///     #[alarm]
    ///     fn expire(&mut self) { self.visits = 0; }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let storage = MemoryStorage::new();
    /// let rt = Runtime::new(storage.clone());
    /// assert_eq!(rt.inspect::<Session>("s1").await.unwrap(), None);
    ///
    /// // Live but never stored: its default state, no version.
    /// Session::visits(&rt, "s1").await.unwrap();
    /// let view = rt.inspect::<Session>("s1").await.unwrap().unwrap();
    /// assert_eq!((view.status, view.version), (ObjectStatus::Active, None));
    /// assert_eq!(view.state, serde_json::json!({"visits": 0}));
    ///
    /// Session::visit(&rt, "s1").await.unwrap();
    /// // Another runtime on the same storage sees it stored, with its alarm.
    /// let view = Runtime::new(storage).inspect::<Session>("s1").await.unwrap().unwrap();
    /// assert_eq!((view.status, view.version), (ObjectStatus::Stored, Some(1)));
    /// assert_eq!(view.state, serde_json::json!({"visits": 1}));
    /// assert_eq!(view.alarms[0].name, "expire");
    /// # }
    /// ```
    pub async fn inspect<O: DurableObject>(&self, id: &str) -> Result<Option<ObjectView>, Error> {
        crate::id::validate_id(id)?;
        let residency = self.with_type_entry::<O, _>(|entry| entry.residency(id));
        let key = ObjectKey::new(O::TYPE_NAME, id);
        let storage_error = |key: &ObjectKey| {
            let key = key.clone();
            move |source| Error::Storage { key, source }
        };
        let loaded = self
            .storage()
            .load(&key)
            .await
            .map_err(storage_error(&key))?;
        let status = match residency {
            Some(Residency::Active) => ObjectStatus::Active,
            Some(Residency::Hibernated) => ObjectStatus::Hibernated,
            _ => ObjectStatus::Stored,
        };
        let (state, version) = match loaded {
            Loaded::Object(stored) => {
                let state =
                    crate::commit::codec::decode::<Value>(&stored.state).map_err(|failure| {
                        Error::Decode {
                            key: key.clone(),
                            path: failure.path,
                            message: failure.message,
                        }
                    })?;
                (state, Some(stored.version))
            }
            // Live without a stored state: it runs on its default state.
            Loaded::Absent | Loaded::Deleted { .. } if status != ObjectStatus::Stored => {
                let state = serde_json::to_value(O::default()).map_err(|err| Error::Encode {
                    key: key.clone(),
                    message: err.to_string(),
                })?;
                (state, None)
            }
            Loaded::Absent | Loaded::Deleted { .. } => return Ok(None),
        };
        let alarms = self
            .storage()
            .list_alarms(&key)
            .await
            .map_err(storage_error(&key))?;
        Ok(Some(ObjectView {
            status,
            state,
            version,
            alarms,
        }))
    }

    /// Lists the dead alarms of type `O` (those that exhausted their attempts) from storage,
    /// ordered by id then name, up to `limit` of them (at least one) after `after`: pass the
    /// previous page's `next`.
    ///
    /// # Errors
    ///
    /// [`Error::Storage`] if storage fails.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, UNIX_EPOCH};
    /// use durable_runtime::storage::{AlarmChange, ObjectKey, ObjectWrite, Storage};
    /// use durable_runtime::{durable_object, MemoryStorage, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Job { runs: u32 }
    ///
    /// #[durable_object]
    /// impl Job {
    ///     #[alarm]
    ///     fn run(&mut self) { self.runs += 1; }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let storage = MemoryStorage::new();
    /// // An alarm that failed for the last time, as a runtime leaves it in storage.
    /// let (key, due) = (ObjectKey::new("Job", "j1"), UNIX_EPOCH + Duration::from_secs(100));
    /// let set = AlarmChange::Set { name: "run".into(), due_at: due, payload: None };
    /// let write = ObjectWrite {
    ///     key: key.clone(),
    ///     expected_version: 0,
    ///     state: Some(b"{}".to_vec()),
    ///     alarms: vec![set],
    ///     kv: Vec::new(),
    ///     idempotency: None,
    ///     fsm: Default::default(),
    /// };
    /// storage.commit(&[write]).await.unwrap();
    /// storage.claim_due_alarms(due, due, due + Duration::from_secs(60), 1).await.unwrap();
    /// storage.fail_alarm(&key, "run", due, 10, "boom", None).await.unwrap();
    ///
    /// let rt = Runtime::builder(storage).manual_alarms().build();
    /// let page = rt.list_dead_alarms::<Job>(None, 10).await.unwrap();
    /// assert_eq!((page.alarms[0].name.as_str(), page.alarms[0].attempts), ("run", 10));
    /// assert_eq!(page.next, None);
    /// # }
    /// ```
    pub async fn list_dead_alarms<O: DurableObject>(
        &self,
        after: Option<&AlarmKey>,
        limit: usize,
    ) -> Result<AlarmPage, Error> {
        self.storage()
            .list_dead_alarms(Some(O::TYPE_NAME), after, limit.max(1))
            .await
            .map_err(|source| Error::Storage {
                key: after.map_or_else(
                    || ObjectKey::new(O::TYPE_NAME, ""),
                    |after| after.key.clone(),
                ),
                source,
            })
    }

    /// Re-queues the dead alarm `alarm` of the object `(O, id)` to fire now: through the
    /// object, as [`schedule_alarm`](Runtime::schedule_alarm) re-queues a dead alarm, with its
    /// attempts counted from zero again. Returns whether the alarm was dead; an alarm that is
    /// not (scheduled and alive, or absent) is left as it is.
    ///
    /// It runs as a call of the object, after the calls queued before it and once their writes
    /// are committed, so it sees every alarm change they made.
    ///
    /// # Errors
    ///
    /// As a call: an invalid id, a full queue, a storage failure...
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, UNIX_EPOCH};
    /// use durable_runtime::storage::{AlarmChange, ObjectKey, ObjectWrite, Storage};
    /// use durable_runtime::{durable_object, MemoryStorage, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Job { runs: u32 }
    ///
    /// #[durable_object]
    /// impl Job {
    ///     #[alarm]
    ///     fn run(&mut self) { self.runs += 1; }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let storage = MemoryStorage::new();
    /// // An alarm that failed for the last time, as a runtime leaves it in storage.
    /// let (key, due) = (ObjectKey::new("Job", "j1"), UNIX_EPOCH + Duration::from_secs(100));
    /// let set = AlarmChange::Set { name: "run".into(), due_at: due, payload: None };
    /// let write = ObjectWrite {
    ///     key: key.clone(),
    ///     expected_version: 0,
    ///     state: Some(b"{}".to_vec()),
    ///     alarms: vec![set],
    ///     kv: Vec::new(),
    ///     idempotency: None,
    ///     fsm: Default::default(),
    /// };
    /// storage.commit(&[write]).await.unwrap();
    /// storage.claim_due_alarms(due, due, due + Duration::from_secs(60), 1).await.unwrap();
    /// storage.fail_alarm(&key, "run", due, 10, "boom", None).await.unwrap();
    ///
    /// let rt = Runtime::builder(storage).manual_alarms().build();
    /// assert!(rt.requeue_dead_alarm("j1", Job::RUN).await.unwrap());
    /// let alarm = &rt.list_alarms::<Job>("j1").await.unwrap()[0];
    /// assert_eq!((alarm.dead, alarm.attempts), (false, 0));
    /// assert!(alarm.due_at <= rt.now());
    /// // Alive now: nothing to re-queue.
    /// assert!(!rt.requeue_dead_alarm("j1", Job::RUN).await.unwrap());
    /// # }
    /// ```
    pub async fn requeue_dead_alarm<O: DurableObject, A: 'static>(
        &self,
        id: &str,
        alarm: Alarm<O, A>,
    ) -> Result<bool, Error> {
        // Most requests name no dead alarm: answered from storage, without starting the object.
        if !is_dead(&self.list_alarms::<O>(id).await?, alarm.name()) {
            return Ok(false);
        }
        let body = AsyncBody::new(move |_: &mut O, ctx: &Context| {
            Box::pin(async move {
                // Committed first: storage then holds every alarm change made before.
                ctx.wait_committed().await?;
                let key = ctx.key();
                let alarms = ctx.runtime().storage().list_alarms(key).await;
                let alarms = alarms.map_err(|source| Error::Storage {
                    key: key.clone(),
                    source,
                })?;
                // Set again with the argument it was set with.
                let dead = alarms
                    .into_iter()
                    .find(|stored| stored.name == alarm.name() && stored.dead);
                let requeued = dead.is_some();
                if let Some(dead) = dead {
                    ctx.set_alarm(alarm.name(), Duration::ZERO.into(), dead.payload);
                }
                Ok::<bool, Error>(requeued)
            })
        });
        match call::<O, bool, Error, _>(self, id, Access::Write, "requeue_dead_alarm", body).await {
            Ok(dead) => Ok(dead),
            Err(error) => Err(error.split().unwrap_or_else(|inner| inner)),
        }
    }
}

/// Whether `alarms` holds the alarm `name`, dead.
fn is_dead(alarms: &[AlarmRecord], name: &str) -> bool {
    alarms.iter().any(|alarm| alarm.name == name && alarm.dead)
}

#[cfg(test)]
mod tests {
    use super::{decode_cursor, encode_cursor};
    use crate::storage::{AlarmKey, ObjectKey};

    #[test]
    fn cursors_round_trip_any_position() {
        for (ty, id, name) in [
            ("Counter", "a", "ring"),
            ("shop.Cart", "user/42?x=1&y=2", "a b"),
            ("T", "🦀 \"quoted\" \\ \n", ""),
        ] {
            let position = AlarmKey::new(ObjectKey::new(ty, id), name);
            let cursor = encode_cursor(&position);
            assert!(
                cursor
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'),
                "{cursor} is not URL-safe"
            );
            assert_eq!(decode_cursor(&cursor).unwrap(), position);
        }
    }

    #[test]
    fn foreign_cursors_are_refused() {
        for cursor in ["", "not base64!", "e30", "WyJhIiwiYiJd"] {
            // `e30` is `{}`; `WyJhIiwiYiJd` is `["a","b"]`: base64, but not a position.
            assert!(decode_cursor(cursor).is_err(), "{cursor:?} accepted");
        }
    }
}
