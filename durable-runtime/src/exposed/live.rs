//! The live objects of an exposed type by status, and the whole view of one object, reached
//! by the type's name.

use super::CallByNameError;
use crate::inventory::{LiveStatus, ObjectView};
use crate::object::handle::Runtime;
use crate::storage::IdPage;

impl Runtime {
    /// [`list_live`](Runtime::list_live) for a type given by name: up to `limit` ids (at least
    /// one) of its objects live in this runtime with `status`, after `after`, in ascending
    /// byte order, and where the next page starts.
    ///
    /// # Errors
    ///
    /// [`CallByNameError::UnknownType`] if the type is not exposed.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{durable_object, LiveStatus, MemoryStorage, Runtime};
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
    /// let page = rt.list_live_by_name("Counter", LiveStatus::Active, None, 2).unwrap();
    /// assert_eq!(page.ids, ["a", "b"]);
    /// let rest = rt.list_live_by_name("Counter", LiveStatus::Active, page.next.as_deref(), 2);
    /// assert_eq!(rest.unwrap().ids, ["c"]);
    /// # }
    /// ```
    pub fn list_live_by_name(
        &self,
        type_name: &str,
        status: LiveStatus,
        after: Option<&str>,
        limit: usize,
    ) -> Result<IdPage, CallByNameError> {
        let entry = self.registry().entry(type_name)?;
        Ok((entry.list_live)(self, status, after, limit))
    }

    /// [`inspect`](Runtime::inspect) the object `(type_name, id)`, the type given by name: its
    /// status, committed state as JSON, version and alarms in one answer; `None` if it is
    /// neither live nor stored.
    ///
    /// # Errors
    ///
    /// [`CallByNameError::UnknownType`] if the type is not exposed, else as `inspect`.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{durable_object, MemoryStorage, ObjectStatus, Runtime};
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
    /// assert_eq!(rt.inspect_by_name("Counter", "a").await.unwrap(), None);
    /// rt.call_by_name("Counter", "a", "add", json!({"by": 3})).await.unwrap();
    /// let view = rt.inspect_by_name("Counter", "a").await.unwrap().unwrap();
    /// assert_eq!(view.status, ObjectStatus::Active);
    /// assert_eq!((view.state, view.version), (json!({"count": 3}), Some(1)));
    /// # }
    /// ```
    pub async fn inspect_by_name(
        &self,
        type_name: &str,
        id: &str,
    ) -> Result<Option<ObjectView>, CallByNameError> {
        let entry = self.registry().entry(type_name)?;
        Ok((entry.inspect)(self, id).await?)
    }
}
