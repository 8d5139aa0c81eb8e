//! Dead alarms across the objects of exposed types, listed a page at a time and re-queued,
//! the types and alarms given by name.

use super::CallByNameError;
use crate::inventory::{DeadAlarmPage, decode_cursor};
use crate::object::handle::Runtime;
use crate::storage::AlarmPage;

impl Runtime {
    /// Lists the dead alarms (those that exhausted their attempts) of the exposed type
    /// `type_name`, or of every exposed type, from storage: ordered by type, id, then name (in
    /// byte order), up to `limit` of them (at least one) after `cursor`, the previous page's
    /// [`next_cursor`](DeadAlarmPage::next_cursor). Dead alarms of types not exposed to this
    /// runtime are not listed.
    ///
    /// # Errors
    ///
    /// [`CallByNameError::UnknownType`] if `type_name` is not exposed,
    /// [`CallByNameError::InvalidCursor`] for a cursor no listing handed out, or a storage
    /// failure.
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
    /// #[durable_object(expose)]
    /// impl Job {
    ///     #[alarm]
    ///     fn run(&mut self) { self.runs += 1; }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let storage = MemoryStorage::new();
    /// // Alarms that failed for the last time, as a runtime leaves them in storage.
    /// let due = UNIX_EPOCH + Duration::from_secs(100);
    /// for id in ["j2", "j1", "j3"] {
    ///     let key = ObjectKey::new("Job", id);
    ///     let set = AlarmChange::Set { name: "run".into(), due_at: due, payload: None };
    ///     let write = ObjectWrite {
    ///         key: key.clone(),
    ///         expected_version: 0,
    ///         state: Some(b"{}".to_vec()),
    ///         alarms: vec![set],
    ///         kv: Vec::new(),
    ///         idempotency: None,
    ///         fsm: Default::default(),
    ///     };
    ///     storage.commit(&[write]).await.unwrap();
    ///     storage.claim_due_alarms(due, due, due + Duration::from_secs(60), 1).await.unwrap();
    ///     storage.fail_alarm(&key, "run", due, 10, "boom", None).await.unwrap();
    /// }
    ///
    /// let rt = Runtime::builder(storage).manual_alarms().expose::<Job>().build();
    /// let page = rt.list_dead_alarms_by_name(Some("Job"), None, 2).await.unwrap();
    /// let ids: Vec<_> = page.alarms.iter().map(|alarm| alarm.key.object_id.as_str()).collect();
    /// assert_eq!(ids, ["j1", "j2"]);
    /// let rest = rt.list_dead_alarms_by_name(None, page.next_cursor.as_deref(), 2).await.unwrap();
    /// assert_eq!(rest.alarms[0].key.object_id, "j3");
    /// assert_eq!((rest.alarms[0].attempts, rest.next_cursor), (10, None));
    /// # }
    /// ```
    pub async fn list_dead_alarms_by_name(
        &self,
        type_name: Option<&str>,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<DeadAlarmPage, CallByNameError> {
        let entries = match type_name {
            Some(type_name) => vec![self.registry().entry(type_name)?],
            None => self.registry().by_name(),
        };
        let after = cursor.map(decode_cursor).transpose()?;
        let limit = limit.max(1);
        // Type by type in the listing's order, until one more alarm than the page holds is
        // found (then another page follows) or every type is listed.
        let mut alarms = Vec::new();
        let resume = after.as_ref().map(|after| after.key.object_type.as_str());
        for entry in entries {
            if resume.is_some_and(|resume| entry.name < resume) {
                continue;
            }
            let wanted = limit + 1 - alarms.len();
            let page = (entry.list_dead_alarms)(self, after.as_ref(), wanted).await?;
            alarms.extend(page.alarms);
            if alarms.len() > limit {
                break;
            }
        }
        Ok(DeadAlarmPage::from_page(AlarmPage::from_listed(
            alarms, limit,
        )))
    }

    /// Re-queues the dead alarm `alarm` of the object `(type_name, id)` to fire now, the type
    /// and its alarm given by name (see [`requeue_dead_alarm`](Runtime::requeue_dead_alarm)).
    /// Returns whether the alarm was dead; `false` leaves the alarm, if any, as it is.
    ///
    /// # Errors
    ///
    /// [`CallByNameError::UnknownType`] or [`CallByNameError::UnknownAlarm`], else as
    /// `requeue_dead_alarm`.
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
    /// #[durable_object(expose)]
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
    /// let rt = Runtime::builder(storage).manual_alarms().expose::<Job>().build();
    /// assert!(rt.requeue_dead_alarm_by_name("Job", "j1", "run").await.unwrap());
    /// assert!(!rt.list_alarms_by_name("Job", "j1").await.unwrap()[0].dead);
    /// assert!(!rt.requeue_dead_alarm_by_name("Job", "j2", "run").await.unwrap());
    /// # }
    /// ```
    pub async fn requeue_dead_alarm_by_name(
        &self,
        type_name: &str,
        id: &str,
        alarm: &str,
    ) -> Result<bool, CallByNameError> {
        let entry = self.registry().entry(type_name)?;
        let alarm = entry.alarm(alarm)?;
        Ok((entry.requeue_dead_alarm)(self, id, alarm).await?)
    }
}
