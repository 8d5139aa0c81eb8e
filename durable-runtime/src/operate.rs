//! Operating one object from outside its handlers: stopping it, dropping its in-memory copy so
//! that the next call reads storage, and replacing its stored state. Each goes through the
//! object's queue, after the calls queued before it, so it is ordered with them.

use tokio::sync::oneshot;

use crate::activation::registry::{Envelope, Reached, Replacement};
use crate::error::Error;
use crate::object::DurableObject;
use crate::object::chain::Chain;
use crate::object::handle::Runtime;
use crate::storage::ObjectKey;

impl Runtime {
    /// Stops the object `(O, id)` in this runtime: the calls queued before it are handled,
    /// their writes committed, then the instance and its in-memory state are dropped. The next
    /// call starts it again from storage (running `after_load`). A hibernated object is
    /// dropped at once. Does nothing to an object that is not live, and never starts one.
    /// Returns whether the object was live.
    ///
    /// Nothing is lost by stopping: every acknowledged write is committed before the instance
    /// goes. Its alarms stay scheduled, and start it again when they fire.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidId`], [`Error::CallCycle`] when asked from the object's own handler (or
    /// a call it waits on), [`Error::Overloaded`] if its queue is full.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{durable_object, MemoryStorage, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Counter { count: i64 }
    ///
    /// #[durable_object]
    /// impl Counter {
    ///     #[handler]
    ///     fn handle_increment(&mut self) -> i64 { self.count += 1; self.count }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::new(MemoryStorage::new());
    /// Counter::increment(&rt, "a").await.unwrap();
    /// assert!(rt.stop::<Counter>("a").await.unwrap());
    /// assert_eq!(rt.live_objects::<Counter>(), 0);
    /// assert!(!rt.stop::<Counter>("a").await.unwrap()); // not live any more
    /// assert_eq!(Counter::increment(&rt, "a").await.unwrap(), 2); // loaded again
    /// # }
    /// ```
    pub async fn stop<O: DurableObject>(&self, id: &str) -> Result<bool, Error> {
        self.unload::<O>(id, true).await
    }

    /// Drops the in-memory copy of the object `(O, id)` after the calls queued before it, as
    /// [`stop`](Runtime::stop) does, but keeps its instance: the next call reads the state
    /// from storage (running `after_load`). Use it after changing the stored state by hand
    /// (SQL, a migration script), so that this runtime does not keep running on the old copy.
    /// Returns whether the object was live.
    ///
    /// A runtime that holds an object and then writes it after such a change fails that write
    /// with [`Error::Conflict`] and reloads anyway; `reload` also makes the reads see the new
    /// state at once.
    ///
    /// # Errors
    ///
    /// As [`stop`](Runtime::stop).
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::storage::{ObjectKey, ObjectWrite, Storage};
    /// use durable_runtime::{durable_object, MemoryStorage, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Counter { count: i64 }
    ///
    /// #[durable_object]
    /// impl Counter {
    ///     #[handler]
    ///     fn handle_increment(&mut self) -> i64 { self.count += 1; self.count }
    ///
    ///     #[handler]
    ///     fn handle_get(&self) -> i64 { self.count }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let storage = MemoryStorage::new();
    /// let rt = Runtime::new(storage.clone());
    /// Counter::increment(&rt, "a").await.unwrap();
    ///
    /// // A change made behind the runtime's back.
    /// let write = ObjectWrite {
    ///     key: ObjectKey::new("Counter", "a"),
    ///     expected_version: 1,
    ///     state: Some(br#"{"count":40}"#.to_vec()),
    ///     alarms: vec![],
    ///     kv: Vec::new(),
    ///     idempotency: None,
    ///     fsm: Default::default(),
    /// };
    /// storage.commit(&[write]).await.unwrap();
    /// assert_eq!(Counter::get(&rt, "a").await.unwrap(), 1); // the copy in memory
    ///
    /// rt.reload::<Counter>("a").await.unwrap();
    /// assert_eq!(Counter::get(&rt, "a").await.unwrap(), 40);
    /// # }
    /// ```
    pub async fn reload<O: DurableObject>(&self, id: &str) -> Result<bool, Error> {
        self.unload::<O>(id, false).await
    }

    async fn unload<O: DurableObject>(&self, id: &str, leave: bool) -> Result<bool, Error> {
        outside_of::<O>(id)?;
        let (reply, receive) = oneshot::channel();
        let envelope = Envelope::Unload { leave, reply };
        let (reached, _) =
            self.with_type_entry::<O, _>(|entry| entry.send_to_live(self, id, envelope, true));
        match reached {
            Reached::Sent => {
                // Dropped unanswered only if the task went away meanwhile: then so did the state.
                receive.await.unwrap_or(Ok(()))?;
                Ok(true)
            }
            Reached::Forgotten => Ok(true),
            Reached::NotLive => Ok(false),
        }
    }

    /// Replaces the state of the object `(O, id)` with `state`, if its stored version is
    /// `expected_version` (0 for an object never stored; a deleted object's last version
    /// otherwise): the `put_state` of an operator. It goes through the object's queue, after
    /// the calls queued before it and their commits, and is committed like a call's write:
    /// on a version mismatch (another call, or another runtime, wrote first) nothing changes
    /// and it fails with [`Error::Conflict`], which names the version found. Returns the new
    /// version.
    ///
    /// Whatever the outcome, the object then holds nothing in memory: the next call loads
    /// what storage holds and runs `after_load` on it. A failed commit leaves the old state,
    /// in storage and for every later call. The object's alarms are kept. Read the version to
    /// expect with [`inspect`](Runtime::inspect).
    ///
    /// # Errors
    ///
    /// [`Error::Conflict`] for a version that is not the stored one; [`Error::Storage`] if the
    /// commit failed (or [`Error::OutcomeUnknown`]); [`Error::Encode`] for a state that does
    /// not encode; as [`stop`](Runtime::stop) otherwise.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{durable_object, Error, MemoryStorage, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Counter { count: i64 }
    ///
    /// #[durable_object]
    /// impl Counter {
    ///     #[handler]
    ///     fn handle_increment(&mut self) -> i64 { self.count += 1; self.count }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::new(MemoryStorage::new());
    /// Counter::increment(&rt, "a").await.unwrap(); // version 1
    ///
    /// let version = rt.replace_state("a", Counter { count: 10 }, 1).await.unwrap();
    /// assert_eq!(version, 2);
    /// assert_eq!(Counter::increment(&rt, "a").await.unwrap(), 11);
    ///
    /// // Version 3 is stored now: expecting 2 is refused, and changes nothing.
    /// let err = rt.replace_state("a", Counter { count: 0 }, 2).await.unwrap_err();
    /// assert!(matches!(err, Error::Conflict { found: Some(3), .. }));
    /// assert_eq!(Counter::increment(&rt, "a").await.unwrap(), 12);
    /// # }
    /// ```
    pub async fn replace_state<O: DurableObject>(
        &self,
        id: &str,
        state: O,
        expected_version: u64,
    ) -> Result<u64, Error> {
        let chain = outside_of::<O>(id)?;
        // Asked from a handler, as a call: not before the state it ran on is committed.
        crate::object::durability::leaving(&chain).await?;
        let (reply, receive) = oneshot::channel();
        let replacement = Replacement {
            state,
            expected_version,
            reply,
        };
        self.dispatch::<O>(id, Envelope::Replace(Box::new(replacement)));
        receive.await.unwrap_or(Err(Error::ShuttingDown))
    }
}

/// Checks `id`, and that the caller is not `(O, id)` itself (or a call it waits on): what it
/// asks would wait for the very handler asking. Returns the caller's call chain.
pub(crate) fn outside_of<O: DurableObject>(id: &str) -> Result<Chain, Error> {
    crate::id::validate_id(id)?;
    let chain = Chain::current();
    if let Some(chain) = chain.cycle_to(O::TYPE_NAME, id) {
        return Err(Error::CallCycle {
            key: ObjectKey::new(O::TYPE_NAME, id),
            chain,
        });
    }
    Ok(chain)
}
