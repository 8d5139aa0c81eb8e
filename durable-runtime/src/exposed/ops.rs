//! The runtime's typed operations on one object, reached by the name of an exposed type: its
//! stored state, status, deletion, stopping, reloading, replacing its state, listing and
//! alarms.

use serde_json::Value;

use super::CallByNameError;
use crate::alarms::AlarmTime;
use crate::error::Error;
use crate::object::DurableObject;
use crate::object::handle::Runtime;
use crate::runtime::ObjectStatus;
use crate::storage::{AlarmRecord, IdPage, ObjectKey};

impl Runtime {
    /// The stored state of the object `(type_name, id)` as JSON, or `None` if it was never
    /// stored (or was deleted). Reads storage; does not activate the object.
    ///
    /// # Errors
    ///
    /// [`CallByNameError::UnknownType`] if the type is not exposed;
    /// [`CallByNameError::Runtime`] for an invalid id, a storage failure, or a stored state
    /// that is not JSON.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{durable_object, MemoryStorage, Runtime};
    /// use serde_json::json;
    ///
    /// #[durable_object]
    /// pub struct Counter { count: i64 }
    ///
    /// #[durable_object(expose)]
    /// impl Counter {
    ///     #[handler]
    ///     fn handle_add(&mut self, by: i64) -> i64 { self.count += by; self.count }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::builder(MemoryStorage::new()).expose::<Counter>().build();
    /// assert_eq!(rt.read_state_json("Counter", "a").await.unwrap(), None);
    /// Counter::add(&rt, "a", 4).await.unwrap();
    /// assert_eq!(rt.read_state_json("Counter", "a").await.unwrap(), Some(json!({"count": 4})));
    /// # }
    /// ```
    pub async fn read_state_json(
        &self,
        type_name: &str,
        id: &str,
    ) -> Result<Option<Value>, CallByNameError> {
        let entry = self.registry().entry(type_name)?;
        crate::id::validate_id(id).map_err(Error::from)?;
        let key = ObjectKey::new(entry.name, id);
        Ok(self.read_stored(key).await?)
    }

    /// [`status`](Runtime::status) of the object `(type_name, id)`, the type given by name.
    ///
    /// # Errors
    ///
    /// [`CallByNameError::UnknownType`] if the type is not exposed, else as `status`.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{durable_object, MemoryStorage, ObjectStatus, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Counter { count: i64 }
    ///
    /// #[durable_object(expose)]
    /// impl Counter {
    ///     #[handler]
    ///     fn handle_add(&mut self, by: i64) -> i64 { self.count += by; self.count }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::builder(MemoryStorage::new()).expose::<Counter>().build();
    /// assert_eq!(rt.status_by_name("Counter", "a").await.unwrap(), ObjectStatus::Absent);
    /// Counter::add(&rt, "a", 1).await.unwrap();
    /// assert_eq!(rt.status_by_name("Counter", "a").await.unwrap(), ObjectStatus::Active);
    /// # }
    /// ```
    pub async fn status_by_name(
        &self,
        type_name: &str,
        id: &str,
    ) -> Result<ObjectStatus, CallByNameError> {
        let entry = self.registry().entry(type_name)?;
        Ok((entry.status)(self, id).await?)
    }

    /// [`delete`](Runtime::delete) the object `(type_name, id)`, the type given by name:
    /// through the object, after the calls queued before it. Returns whether a stored state
    /// existed.
    ///
    /// # Errors
    ///
    /// [`CallByNameError::UnknownType`] if the type is not exposed, else as `delete`.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{durable_object, MemoryStorage, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Counter { count: i64 }
    ///
    /// #[durable_object(expose)]
    /// impl Counter {
    ///     #[handler]
    ///     fn handle_add(&mut self, by: i64) -> i64 { self.count += by; self.count }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::builder(MemoryStorage::new()).expose::<Counter>().build();
    /// Counter::add(&rt, "a", 1).await.unwrap();
    /// assert!(rt.delete_by_name("Counter", "a").await.unwrap());
    /// assert_eq!(rt.read_state_json("Counter", "a").await.unwrap(), None);
    /// # }
    /// ```
    pub async fn delete_by_name(&self, type_name: &str, id: &str) -> Result<bool, CallByNameError> {
        let entry = self.registry().entry(type_name)?;
        Ok((entry.delete)(self, id).await?)
    }

    /// [`stop`](Runtime::stop) the object `(type_name, id)`, the type given by name: after the
    /// calls queued before it, its instance and in-memory state are dropped. Returns whether it
    /// was live.
    ///
    /// # Errors
    ///
    /// [`CallByNameError::UnknownType`] if the type is not exposed, else as `stop`.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{durable_object, MemoryStorage, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Counter { count: i64 }
    ///
    /// #[durable_object(expose)]
    /// impl Counter {
    ///     #[handler]
    ///     fn handle_add(&mut self, by: i64) -> i64 { self.count += by; self.count }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::builder(MemoryStorage::new()).expose::<Counter>().build();
    /// Counter::add(&rt, "a", 1).await.unwrap();
    /// assert!(rt.stop_by_name("Counter", "a").await.unwrap());
    /// assert_eq!(rt.live_objects::<Counter>(), 0);
    /// # }
    /// ```
    pub async fn stop_by_name(&self, type_name: &str, id: &str) -> Result<bool, CallByNameError> {
        let entry = self.registry().entry(type_name)?;
        Ok((entry.stop)(self, id).await?)
    }

    /// [`reload`](Runtime::reload) the object `(type_name, id)`, the type given by name: its
    /// in-memory copy is dropped, and the next call reads storage. Returns whether it was live.
    ///
    /// # Errors
    ///
    /// [`CallByNameError::UnknownType`] if the type is not exposed, else as `reload`.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{durable_object, MemoryStorage, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Counter { count: i64 }
    ///
    /// #[durable_object(expose)]
    /// impl Counter {
    ///     #[handler]
    ///     fn handle_add(&mut self, by: i64) -> i64 { self.count += by; self.count }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::builder(MemoryStorage::new()).expose::<Counter>().build();
    /// assert!(!rt.reload_by_name("Counter", "a").await.unwrap()); // not live
    /// Counter::add(&rt, "a", 1).await.unwrap();
    /// assert!(rt.reload_by_name("Counter", "a").await.unwrap());
    /// assert_eq!(Counter::add(&rt, "a", 1).await.unwrap(), 2);
    /// # }
    /// ```
    pub async fn reload_by_name(&self, type_name: &str, id: &str) -> Result<bool, CallByNameError> {
        let entry = self.registry().entry(type_name)?;
        Ok((entry.reload)(self, id).await?)
    }

    /// [`replace_state`](Runtime::replace_state) of the object `(type_name, id)`, the type
    /// given by name and the state as JSON (decoded as a stored state is: a missing field takes
    /// its default). Returns the new version.
    ///
    /// # Errors
    ///
    /// [`CallByNameError::UnknownType`] if the type is not exposed;
    /// [`CallByNameError::BadArguments`] for JSON that is not a state of the type; else as
    /// `replace_state`.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{durable_object, CallByNameError, Error, MemoryStorage, Runtime};
    /// use serde_json::json;
    ///
    /// #[durable_object]
    /// pub struct Counter { count: i64 }
    ///
    /// #[durable_object(expose)]
    /// impl Counter {
    ///     #[handler]
    ///     fn handle_add(&mut self, by: i64) -> i64 { self.count += by; self.count }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::builder(MemoryStorage::new()).expose::<Counter>().build();
    /// let version = rt.replace_state_by_name("Counter", "a", json!({"count": 5}), 0).await;
    /// assert_eq!(version.unwrap(), 1);
    /// assert_eq!(Counter::add(&rt, "a", 1).await.unwrap(), 6);
    /// let err = rt.replace_state_by_name("Counter", "a", json!({"count": 0}), 1).await;
    /// assert!(matches!(err, Err(CallByNameError::Runtime(Error::Conflict { .. }))));
    /// let err = rt.replace_state_by_name("Counter", "a", json!({"count": "x"}), 2).await;
    /// assert!(matches!(err, Err(CallByNameError::BadArguments { .. })));
    /// # }
    /// ```
    pub async fn replace_state_by_name(
        &self,
        type_name: &str,
        id: &str,
        state: Value,
        expected_version: u64,
    ) -> Result<u64, CallByNameError> {
        let entry = self.registry().entry(type_name)?;
        (entry.replace_state)(self, id, state, expected_version).await
    }

    /// [`list_ids`](Runtime::list_ids) of the stored objects of a type given by name: up to
    /// `limit` ids after `after`, in order, and where the next page starts.
    ///
    /// # Errors
    ///
    /// [`CallByNameError::UnknownType`] if the type is not exposed, else as `list_ids`.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{durable_object, MemoryStorage, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Counter { count: i64 }
    ///
    /// #[durable_object(expose)]
    /// impl Counter {
    ///     #[handler]
    ///     fn handle_add(&mut self, by: i64) -> i64 { self.count += by; self.count }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::builder(MemoryStorage::new()).expose::<Counter>().build();
    /// for id in ["b", "a", "c"] {
    ///     Counter::add(&rt, id, 1).await.unwrap();
    /// }
    /// let page = rt.list_ids_by_name("Counter", None, 2).await.unwrap();
    /// assert_eq!(page.ids, ["a", "b"]);
    /// let rest = rt.list_ids_by_name("Counter", page.next.as_deref(), 2).await.unwrap();
    /// assert_eq!(rest.ids, ["c"]);
    /// # }
    /// ```
    pub async fn list_ids_by_name(
        &self,
        type_name: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<IdPage, CallByNameError> {
        let entry = self.registry().entry(type_name)?;
        Ok((entry.list_ids)(self, after, limit).await?)
    }

    /// [`list_alarms`](Runtime::list_alarms) of the object `(type_name, id)`, the type given
    /// by name.
    ///
    /// # Errors
    ///
    /// [`CallByNameError::UnknownType`] if the type is not exposed, else as `list_alarms`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::{durable_object, MemoryStorage, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Reminder { fired: u32 }
    ///
    /// #[durable_object(expose)]
    /// impl Reminder {
    ///     #[alarm]
    ///     fn ring(&mut self) { self.fired += 1; }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::builder(MemoryStorage::new()).expose::<Reminder>().build();
    /// rt.schedule_alarm("r", Reminder::RING, Duration::from_secs(60)).await.unwrap();
    /// let alarms = rt.list_alarms_by_name("Reminder", "r").await.unwrap();
    /// assert_eq!(alarms[0].name, "ring");
    /// # }
    /// ```
    pub async fn list_alarms_by_name(
        &self,
        type_name: &str,
        id: &str,
    ) -> Result<Vec<AlarmRecord>, CallByNameError> {
        let entry = self.registry().entry(type_name)?;
        Ok((entry.list_alarms)(self, id).await?)
    }

    /// [`schedule_alarm`](Runtime::schedule_alarm) for the object `(type_name, id)`, the type
    /// and its alarm given by name, replacing a schedule of the same alarm: through the object
    /// when it is live here, directly in storage when it is not.
    ///
    /// # Errors
    ///
    /// [`CallByNameError::UnknownType`] or [`CallByNameError::UnknownAlarm`], else as
    /// `schedule_alarm`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::{durable_object, MemoryStorage, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Reminder { fired: u32 }
    ///
    /// #[durable_object(expose)]
    /// impl Reminder {
    ///     #[alarm]
    ///     fn ring(&mut self) { self.fired += 1; }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::builder(MemoryStorage::new()).expose::<Reminder>().build();
    /// let in_an_hour = Duration::from_secs(3600);
    /// rt.schedule_alarm_by_name("Reminder", "r", "ring", in_an_hour).await.unwrap();
    /// assert_eq!(rt.list_alarms::<Reminder>("r").await.unwrap()[0].name, "ring");
    /// rt.cancel_alarm_by_name("Reminder", "r", "ring").await.unwrap();
    /// assert!(rt.list_alarms::<Reminder>("r").await.unwrap().is_empty());
    /// # }
    /// ```
    pub async fn schedule_alarm_by_name(
        &self,
        type_name: &str,
        id: &str,
        alarm: &str,
        when: impl Into<AlarmTime>,
    ) -> Result<(), CallByNameError> {
        self.schedule_alarm_by_name_with(type_name, id, alarm, None, when)
            .await
    }

    /// [`schedule_alarm_by_name`](Runtime::schedule_alarm_by_name) with the alarm's argument
    /// as JSON (`None` for none), checked against the argument type of its handler before
    /// anything is written: as [`schedule_alarm_with`](Runtime::schedule_alarm_with) for a
    /// type and an alarm known by name. An alarm whose handler takes no argument accepts
    /// none, `null` or `{}`.
    ///
    /// # Errors
    ///
    /// [`CallByNameError::BadArguments`] when `args` does not fit the handler's argument type,
    /// else as `schedule_alarm_by_name`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::{durable_object, CallByNameError, MemoryStorage, Runtime};
    /// use serde_json::json;
    ///
    /// #[durable_object]
    /// pub struct Invoice { reminded: u64 }
    ///
    /// #[durable_object(expose)]
    /// impl Invoice {
    ///     #[alarm]
    ///     fn remind(&mut self, days_late: u64) { self.reminded = days_late; }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::builder(MemoryStorage::new()).expose::<Invoice>().build();
    /// let later = Duration::from_secs(3600);
    /// rt.schedule_alarm_by_name_with("Invoice", "i1", "remind", Some(json!(7)), later)
    ///     .await
    ///     .unwrap();
    /// let alarms = rt.list_alarms::<Invoice>("i1").await.unwrap();
    /// assert_eq!(alarms[0].payload.as_deref(), Some(&b"7"[..]));
    /// let wrong = json!({"days": 7});
    /// let err = rt
    ///     .schedule_alarm_by_name_with("Invoice", "i1", "remind", Some(wrong), later)
    ///     .await
    ///     .unwrap_err();
    /// assert!(matches!(err, CallByNameError::BadArguments { .. }));
    /// # }
    /// ```
    pub async fn schedule_alarm_by_name_with(
        &self,
        type_name: &str,
        id: &str,
        alarm: &str,
        args: Option<serde_json::Value>,
        when: impl Into<AlarmTime>,
    ) -> Result<(), CallByNameError> {
        let entry = self.registry().entry(type_name)?;
        let alarm = entry.alarm(alarm)?;
        let payload = (entry.alarm_arguments)(alarm, args.as_ref())?;
        Ok((entry.schedule_alarm)(self, id, alarm, when.into(), payload).await?)
    }

    /// [`cancel_alarm`](Runtime::cancel_alarm) for the object `(type_name, id)`, the type and
    /// its alarm given by name (see [`schedule_alarm_by_name`](Runtime::schedule_alarm_by_name)).
    ///
    /// # Errors
    ///
    /// [`CallByNameError::UnknownType`] or [`CallByNameError::UnknownAlarm`], else as
    /// `cancel_alarm`.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{durable_object, CallByNameError, MemoryStorage, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Reminder { fired: u32 }
    ///
    /// #[durable_object(expose)]
    /// impl Reminder {
    ///     #[alarm]
    ///     fn ring(&mut self) { self.fired += 1; }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::builder(MemoryStorage::new()).expose::<Reminder>().build();
    /// let err = rt.cancel_alarm_by_name("Reminder", "r", "buzz").await.unwrap_err();
    /// assert!(matches!(err, CallByNameError::UnknownAlarm { .. }));
    /// # }
    /// ```
    pub async fn cancel_alarm_by_name(
        &self,
        type_name: &str,
        id: &str,
        alarm: &str,
    ) -> Result<(), CallByNameError> {
        let entry = self.registry().entry(type_name)?;
        let alarm = entry.alarm(alarm)?;
        Ok((entry.cancel_alarm)(self, id, alarm).await?)
    }
}

/// Decodes `state` as a state of `O` (a state that does not fit is the caller's mistake, as
/// arguments that do not fit are) and replaces the stored one with it.
pub(super) async fn replace_state_json<O: DurableObject>(
    runtime: &Runtime,
    id: &str,
    state: Value,
    expected_version: u64,
) -> Result<u64, CallByNameError> {
    crate::id::validate_id(id).map_err(Error::from)?;
    let state: O =
        serde_path_to_error::deserialize(state).map_err(|error| CallByNameError::BadArguments {
            handler: "replace_state",
            path: error.path().to_string(),
            message: error.inner().to_string(),
        })?;
    Ok(runtime.replace_state(id, state, expected_version).await?)
}
