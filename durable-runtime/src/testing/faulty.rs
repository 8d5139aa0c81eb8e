//! A storage wrapper that fails or delays operations on demand.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;

use crate::storage::{
    AlarmClaim, AlarmKey, AlarmPage, AlarmRecord, CommitError, IdPage, IdempotentReply, KvUsage,
    Loaded, ObjectKey, ObjectWrite, Storage, StorageError,
};

/// Wraps a [`Storage`] and injects failures and delays, to test what objects do when their
/// database misbehaves.
///
/// Clones share their switches, so a test keeps one clone and hands another to the runtime.
///
/// # Examples
///
/// ```
/// use durable_runtime::storage::{MemoryStorage, ObjectKey, ObjectWrite, Storage};
/// use durable_runtime::testing::FaultyStorage;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let store = FaultyStorage::new(MemoryStorage::new());
/// store.fail_commits(1);
/// let write = ObjectWrite {
///     key: ObjectKey::new("Counter", "a"),
///     expected_version: 0,
///     state: Some(b"{}".to_vec()),
///     alarms: vec![],
///     kv: Vec::new(),
///     idempotency: None,
///     fsm: Default::default(),
/// };
/// assert!(store.commit(std::slice::from_ref(&write)).await.is_err());
/// assert!(store.commit(std::slice::from_ref(&write)).await.is_ok());
/// assert_eq!(store.commits(), 1);
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct FaultyStorage<S> {
    inner: Arc<S>,
    switches: Arc<Switches>,
}

#[derive(Debug, Default)]
struct Switches {
    failing_commits: AtomicUsize,
    failing_loads: AtomicUsize,
    failing_deletes: AtomicUsize,
    commits_applied_then_failed: AtomicUsize,
    failing_fsm_commits: AtomicUsize,
    fsm_commits_applied_then_failed: AtomicUsize,
    commit_delay_micros: AtomicU64,
    load_delay_micros: AtomicU64,
    renewal_delay_micros: AtomicU64,
    commits: AtomicUsize,
    loads: AtomicUsize,
    batch_loads: AtomicUsize,
    version_checks: AtomicUsize,
    claims: AtomicUsize,
}

/// Sleeps for the delay a switch holds, in microseconds (none while it is zero).
async fn pause(delay_micros: &AtomicU64) {
    let delay = delay_micros.load(Ordering::SeqCst);
    if delay > 0 {
        tokio::time::sleep(Duration::from_micros(delay)).await;
    }
}

/// Takes one from a failure budget, returning whether a failure is due.
fn take_one(budget: &AtomicUsize) -> bool {
    budget
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

fn injected(what: &str) -> StorageError {
    StorageError::unavailable(std::io::Error::other(format!("injected {what} failure")))
}

impl<S: Storage> FaultyStorage<S> {
    /// Wraps `inner`, initially passing everything through.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::storage::{MemoryStorage, ObjectKey, ObjectWrite, Storage};
    /// use durable_runtime::testing::FaultyStorage;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let store = FaultyStorage::new(MemoryStorage::new());
    /// let key = ObjectKey::new("Counter", "a");
    /// let write = ObjectWrite {
    ///     key: key.clone(),
    ///     expected_version: 0,
    ///     state: Some(b"{}".to_vec()),
    ///     alarms: vec![],
    ///     kv: Vec::new(),
    ///     idempotency: None,
    ///     fsm: Default::default(),
    /// };
    /// store.commit(&[write]).await.unwrap();
    /// assert_eq!(store.load(&key).await.unwrap().version(), 1);
    /// # }
    /// ```
    pub fn new(inner: S) -> Self {
        Self {
            inner: Arc::new(inner),
            switches: Arc::default(),
        }
    }

    /// The wrapped storage.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::storage::{MemoryStorage, ObjectKey, ObjectWrite, Storage};
    /// use durable_runtime::testing::FaultyStorage;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let store = FaultyStorage::new(MemoryStorage::new());
    /// let key = ObjectKey::new("Counter", "a");
    /// let write = ObjectWrite {
    ///     key: key.clone(),
    ///     expected_version: 0,
    ///     state: Some(b"{}".to_vec()),
    ///     alarms: vec![],
    ///     kv: Vec::new(),
    ///     idempotency: None,
    ///     fsm: Default::default(),
    /// };
    /// // Straight to the wrapped storage: no failure injected, nothing counted.
    /// store.fail_commits(1);
    /// store.inner().commit(&[write]).await.unwrap();
    /// assert_eq!(store.commits(), 0);
    /// assert!(store.load(&key).await.unwrap().object().is_some());
    /// # }
    /// ```
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Makes the next `n` commits fail without applying anything.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::storage::{CommitError, MemoryStorage, ObjectKey, ObjectWrite, Storage};
    /// use durable_runtime::testing::FaultyStorage;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let store = FaultyStorage::new(MemoryStorage::new());
    /// let key = ObjectKey::new("Counter", "a");
    /// let write = ObjectWrite {
    ///     key: key.clone(),
    ///     expected_version: 0,
    ///     state: Some(b"{}".to_vec()),
    ///     alarms: vec![],
    ///     kv: Vec::new(),
    ///     idempotency: None,
    ///     fsm: Default::default(),
    /// };
    /// store.fail_commits(2);
    /// for _ in 0..2 {
    ///     let err = store.commit(std::slice::from_ref(&write)).await.unwrap_err();
    ///     assert!(matches!(err, CommitError::Storage(e) if e.is_retryable()));
    /// }
    /// assert!(store.inner().load(&key).await.unwrap().object().is_none()); // nothing applied
    /// store.commit(&[write]).await.unwrap();
    /// # }
    /// ```
    pub fn fail_commits(&self, n: usize) {
        self.switches.failing_commits.store(n, Ordering::SeqCst);
    }

    /// Makes the next `n` commits apply their batch and then report a failure, as when the
    /// connection drops after the database committed (an unknown outcome).
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::storage::{MemoryStorage, ObjectKey, ObjectWrite, Storage};
    /// use durable_runtime::testing::FaultyStorage;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let store = FaultyStorage::new(MemoryStorage::new());
    /// let key = ObjectKey::new("Counter", "a");
    /// let write = ObjectWrite {
    ///     key: key.clone(),
    ///     expected_version: 0,
    ///     state: Some(b"{}".to_vec()),
    ///     alarms: vec![],
    ///     kv: Vec::new(),
    ///     idempotency: None,
    ///     fsm: Default::default(),
    /// };
    /// store.fail_commits_after_applying(1);
    /// assert!(store.commit(&[write]).await.is_err());
    /// // Reported failed, yet applied.
    /// assert_eq!(store.load(&key).await.unwrap().version(), 1);
    /// assert_eq!(store.commits(), 1);
    /// # }
    /// ```
    pub fn fail_commits_after_applying(&self, n: usize) {
        self.switches
            .commits_applied_then_failed
            .store(n, Ordering::SeqCst);
    }

    /// Makes the next `n` commits whose batch carries FSM changes
    /// ([`ObjectWrite::fsm`]) fail without applying anything; other commits pass. Tests that
    /// an object's state and its FSM inserts and signals fail together.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::storage::{MemoryStorage, ObjectKey, ObjectWrite, Storage};
    /// use durable_runtime::testing::FaultyStorage;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let store = FaultyStorage::new(MemoryStorage::new());
    /// let write = ObjectWrite {
    ///     key: ObjectKey::new("Counter", "a"),
    ///     expected_version: 0,
    ///     state: Some(b"{}".to_vec()),
    ///     alarms: vec![],
    ///     kv: Vec::new(),
    ///     idempotency: None,
    ///     fsm: Default::default(),
    /// };
    /// store.fail_fsm_commits(1);
    /// // No FSM change in this batch: it passes, and the failure stays due.
    /// store.commit(&[write]).await.unwrap();
    /// # }
    /// ```
    pub fn fail_fsm_commits(&self, n: usize) {
        self.switches.failing_fsm_commits.store(n, Ordering::SeqCst);
    }

    /// Makes the next `n` commits whose batch carries FSM changes apply it and then report a
    /// failure (an unknown outcome); other commits pass.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::storage::MemoryStorage;
    /// use durable_runtime::testing::FaultyStorage;
    ///
    /// let store = FaultyStorage::new(MemoryStorage::new());
    /// store.fail_fsm_commits_after_applying(1);
    /// ```
    pub fn fail_fsm_commits_after_applying(&self, n: usize) {
        self.switches
            .fsm_commits_applied_then_failed
            .store(n, Ordering::SeqCst);
    }

    /// Makes the next `n` loads fail (a batched load counts as one, and so does a version
    /// check, [`Storage::load_versions`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::storage::{MemoryStorage, ObjectKey, Storage};
    /// use durable_runtime::testing::FaultyStorage;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let store = FaultyStorage::new(MemoryStorage::new());
    /// let keys = [ObjectKey::new("Counter", "a"), ObjectKey::new("Counter", "b")];
    /// store.fail_loads(2);
    /// assert!(store.load_many(&keys).await.is_err()); // one failure for the whole batch
    /// assert!(store.load(&keys[0]).await.unwrap_err().is_retryable());
    /// assert_eq!(store.load(&keys[0]).await.unwrap().object(), None);
    /// # }
    /// ```
    pub fn fail_loads(&self, n: usize) {
        self.switches.failing_loads.store(n, Ordering::SeqCst);
    }

    /// Makes the next `n` deletes ([`Storage::delete`]) fail without deleting anything.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::storage::{MemoryStorage, ObjectKey, ObjectWrite, Storage};
    /// use durable_runtime::testing::FaultyStorage;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let store = FaultyStorage::new(MemoryStorage::new());
    /// let key = ObjectKey::new("Counter", "a");
    /// let write = ObjectWrite {
    ///     key: key.clone(),
    ///     expected_version: 0,
    ///     state: Some(b"{}".to_vec()),
    ///     alarms: vec![],
    ///     kv: Vec::new(),
    ///     idempotency: None,
    ///     fsm: Default::default(),
    /// };
    /// store.commit(&[write]).await.unwrap();
    /// store.fail_deletes(1);
    /// assert!(store.delete(&key).await.unwrap_err().is_retryable());
    /// assert!(store.load(&key).await.unwrap().object().is_some()); // still there
    /// assert!(store.delete(&key).await.unwrap());
    /// # }
    /// ```
    pub fn fail_deletes(&self, n: usize) {
        self.switches.failing_deletes.store(n, Ordering::SeqCst);
    }

    /// How many times a scheduler looked for due alarms to claim
    /// ([`Storage::claim_due_alarms`]) through this storage.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::SystemTime;
    /// use durable_runtime::storage::{MemoryStorage, Storage};
    /// use durable_runtime::testing::FaultyStorage;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let store = FaultyStorage::new(MemoryStorage::new());
    /// let now = SystemTime::now();
    /// assert!(store.claim_due_alarms(now, now, now, 10).await.unwrap().is_empty());
    /// assert_eq!(store.claims(), 1);
    /// # }
    /// ```
    pub fn claims(&self) -> usize {
        self.switches.claims.load(Ordering::SeqCst)
    }

    /// Delays every load, single or batched, by `delay` (zero turns it off). A failure made
    /// due with [`fail_loads`](Self::fail_loads) is decided before the delay.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use durable_runtime::storage::{MemoryStorage, ObjectKey, Storage};
    /// use durable_runtime::testing::FaultyStorage;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let store = FaultyStorage::new(MemoryStorage::new());
    /// store.delay_loads(Duration::from_millis(20));
    /// let started = Instant::now();
    /// store.load(&ObjectKey::new("Counter", "a")).await.unwrap();
    /// assert!(started.elapsed() >= Duration::from_millis(20));
    /// # }
    /// ```
    pub fn delay_loads(&self, delay: Duration) {
        self.switches
            .load_delay_micros
            .store(delay.as_micros() as u64, Ordering::SeqCst);
    }

    /// Delays every renewal of alarm claims by `delay` (zero turns it off), as a store whose
    /// writes are slow to reach it would: the leases are extended only after the delay.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use durable_runtime::storage::{MemoryStorage, Storage};
    /// use durable_runtime::testing::FaultyStorage;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let store = FaultyStorage::new(MemoryStorage::new());
    /// store.delay_renewals(Duration::from_millis(20));
    /// let started = Instant::now();
    /// let lease_until = std::time::SystemTime::now();
    /// assert_eq!(store.renew_alarm_claims(&[], lease_until).await.unwrap(), 0);
    /// assert!(started.elapsed() >= Duration::from_millis(20));
    /// # }
    /// ```
    pub fn delay_renewals(&self, delay: Duration) {
        self.switches
            .renewal_delay_micros
            .store(delay.as_micros() as u64, Ordering::SeqCst);
    }

    /// Delays every commit by `delay` (zero turns it off).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// use durable_runtime::storage::{MemoryStorage, ObjectKey, ObjectWrite, Storage};
    /// use durable_runtime::testing::FaultyStorage;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let store = FaultyStorage::new(MemoryStorage::new());
    /// store.delay_commits(Duration::from_millis(20));
    /// let write = ObjectWrite {
    ///     key: ObjectKey::new("Counter", "a"),
    ///     expected_version: 0,
    ///     state: Some(b"{}".to_vec()),
    ///     alarms: vec![],
    ///     kv: Vec::new(),
    ///     idempotency: None,
    ///     fsm: Default::default(),
    /// };
    /// let started = Instant::now();
    /// store.commit(&[write]).await.unwrap();
    /// assert!(started.elapsed() >= Duration::from_millis(20));
    /// # }
    /// ```
    pub fn delay_commits(&self, delay: Duration) {
        self.switches
            .commit_delay_micros
            .store(delay.as_micros() as u64, Ordering::SeqCst);
    }

    /// How many commits reached the wrapped storage and succeeded.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::storage::{MemoryStorage, ObjectKey, ObjectWrite, Storage};
    /// use durable_runtime::testing::FaultyStorage;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let store = FaultyStorage::new(MemoryStorage::new());
    /// let key = ObjectKey::new("Counter", "a");
    /// let write = ObjectWrite {
    ///     key: key.clone(),
    ///     expected_version: 0,
    ///     state: Some(b"{}".to_vec()),
    ///     alarms: vec![],
    ///     kv: Vec::new(),
    ///     idempotency: None,
    ///     fsm: Default::default(),
    /// };
    /// store.commit(std::slice::from_ref(&write)).await.unwrap();
    /// assert!(store.commit(&[write]).await.is_err()); // a version conflict
    /// store.fail_commits(1);
    /// let next = ObjectWrite {
    ///     key,
    ///     expected_version: 1,
    ///     state: None,
    ///     alarms: vec![],
    ///     kv: Vec::new(),
    ///     idempotency: None,
    ///     fsm: Default::default(),
    /// };
    /// assert!(store.commit(&[next]).await.is_err()); // injected
    /// assert_eq!(store.commits(), 1);
    /// # }
    /// ```
    pub fn commits(&self) -> usize {
        self.switches.commits.load(Ordering::SeqCst)
    }

    /// How many single-object loads ([`Storage::load`]) reached the wrapped storage.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::storage::{MemoryStorage, ObjectKey, Storage};
    /// use durable_runtime::testing::FaultyStorage;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let store = FaultyStorage::new(MemoryStorage::new());
    /// let key = ObjectKey::new("Counter", "a");
    /// store.fail_loads(1);
    /// assert!(store.load(&key).await.is_err()); // failed before reaching it
    /// store.load(&key).await.unwrap();
    /// store.load_many(std::slice::from_ref(&key)).await.unwrap(); // counted apart
    /// assert_eq!(store.loads(), 1);
    /// # }
    /// ```
    pub fn loads(&self) -> usize {
        self.switches.loads.load(Ordering::SeqCst)
    }

    /// How many batched loads ([`Storage::load_many`]) reached the wrapped storage.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::storage::{Loaded, MemoryStorage, ObjectKey, Storage};
    /// use durable_runtime::testing::FaultyStorage;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let store = FaultyStorage::new(MemoryStorage::new());
    /// let keys = [ObjectKey::new("Counter", "a"), ObjectKey::new("Counter", "b")];
    /// let loaded = store.load_many(&keys).await.unwrap();
    /// assert_eq!(loaded, vec![Loaded::Absent, Loaded::Absent]);
    /// assert_eq!((store.batch_loads(), store.loads()), (1, 0));
    /// # }
    /// ```
    pub fn batch_loads(&self) -> usize {
        self.switches.batch_loads.load(Ordering::SeqCst)
    }

    /// How many version checks ([`Storage::load_versions`]) reached the wrapped storage (a
    /// check of several objects counts once). A load failure due with
    /// [`fail_loads`](Self::fail_loads) fails a version check too.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::storage::{MemoryStorage, ObjectKey, Storage};
    /// use durable_runtime::testing::FaultyStorage;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let store = FaultyStorage::new(MemoryStorage::new());
    /// let keys = [ObjectKey::new("Counter", "a"), ObjectKey::new("Counter", "b")];
    /// store.fail_loads(1);
    /// assert!(store.load_versions(&keys).await.is_err()); // failed before reaching it
    /// assert_eq!(store.load_versions(&keys).await.unwrap(), vec![None, None]);
    /// assert_eq!((store.version_checks(), store.batch_loads()), (1, 0));
    /// # }
    /// ```
    pub fn version_checks(&self) -> usize {
        self.switches.version_checks.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl<S: Storage> Storage for FaultyStorage<S> {
    async fn load(&self, key: &ObjectKey) -> Result<Loaded, StorageError> {
        if take_one(&self.switches.failing_loads) {
            return Err(injected("load"));
        }
        self.switches.loads.fetch_add(1, Ordering::SeqCst);
        pause(&self.switches.load_delay_micros).await;
        self.inner.load(key).await
    }

    /// Fails as a whole when a load failure is due.
    async fn load_many(&self, keys: &[ObjectKey]) -> Result<Vec<Loaded>, StorageError> {
        if take_one(&self.switches.failing_loads) {
            return Err(injected("load"));
        }
        self.switches.batch_loads.fetch_add(1, Ordering::SeqCst);
        pause(&self.switches.load_delay_micros).await;
        self.inner.load_many(keys).await
    }

    /// Fails as a whole when a load failure is due.
    async fn load_versions(&self, keys: &[ObjectKey]) -> Result<Vec<Option<u64>>, StorageError> {
        if take_one(&self.switches.failing_loads) {
            return Err(injected("load"));
        }
        self.switches.version_checks.fetch_add(1, Ordering::SeqCst);
        pause(&self.switches.load_delay_micros).await;
        self.inner.load_versions(keys).await
    }

    async fn commit(&self, batch: &[ObjectWrite]) -> Result<(), CommitError> {
        pause(&self.switches.commit_delay_micros).await;
        let carries_fsm = batch.iter().any(|write| !write.fsm.is_empty());
        if take_one(&self.switches.failing_commits)
            || (carries_fsm && take_one(&self.switches.failing_fsm_commits))
        {
            return Err(injected("commit").into());
        }
        self.inner.commit(batch).await?;
        self.switches.commits.fetch_add(1, Ordering::SeqCst);
        if take_one(&self.switches.commits_applied_then_failed)
            || (carries_fsm && take_one(&self.switches.fsm_commits_applied_then_failed))
        {
            return Err(injected("commit acknowledgement").into());
        }
        Ok(())
    }

    fn max_concurrent_commits(&self) -> usize {
        self.inner.max_concurrent_commits()
    }

    async fn delete(&self, key: &ObjectKey) -> Result<bool, StorageError> {
        if take_one(&self.switches.failing_deletes) {
            return Err(injected("delete"));
        }
        self.inner.delete(key).await
    }

    async fn list_ids(
        &self,
        object_type: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<IdPage, StorageError> {
        self.inner.list_ids(object_type, after, limit).await
    }

    async fn list_alarms(&self, key: &ObjectKey) -> Result<Vec<AlarmRecord>, StorageError> {
        self.inner.list_alarms(key).await
    }

    async fn list_object_types(&self) -> Result<Vec<String>, StorageError> {
        self.inner.list_object_types().await
    }

    async fn list_dead_alarms(
        &self,
        object_type: Option<&str>,
        after: Option<&AlarmKey>,
        limit: usize,
    ) -> Result<AlarmPage, StorageError> {
        self.inner.list_dead_alarms(object_type, after, limit).await
    }

    async fn next_alarm_due(&self) -> Result<Option<SystemTime>, StorageError> {
        self.inner.next_alarm_due().await
    }

    async fn claim_due_alarms(
        &self,
        now: SystemTime,
        due_by: SystemTime,
        lease_until: SystemTime,
        limit: usize,
    ) -> Result<Vec<AlarmRecord>, StorageError> {
        self.switches.claims.fetch_add(1, Ordering::SeqCst);
        self.inner
            .claim_due_alarms(now, due_by, lease_until, limit)
            .await
    }

    async fn renew_alarm_claims(
        &self,
        claims: &[AlarmClaim],
        lease_until: SystemTime,
    ) -> Result<usize, StorageError> {
        pause(&self.switches.renewal_delay_micros).await;
        self.inner.renew_alarm_claims(claims, lease_until).await
    }

    async fn finish_alarm(
        &self,
        key: &ObjectKey,
        name: &str,
        claimed_at: SystemTime,
    ) -> Result<bool, StorageError> {
        self.inner.finish_alarm(key, name, claimed_at).await
    }

    async fn fail_alarm(
        &self,
        key: &ObjectKey,
        name: &str,
        claimed_at: SystemTime,
        attempts: u32,
        error: &str,
        retry_at: Option<SystemTime>,
    ) -> Result<bool, StorageError> {
        self.inner
            .fail_alarm(key, name, claimed_at, attempts, error, retry_at)
            .await
    }

    async fn release_alarm(
        &self,
        key: &ObjectKey,
        name: &str,
        claimed_at: SystemTime,
    ) -> Result<bool, StorageError> {
        self.inner.release_alarm(key, name, claimed_at).await
    }

    /// Fails like a load when a load failure is due.
    async fn kv_get(&self, key: &ObjectKey, name: &str) -> Result<Option<Vec<u8>>, StorageError> {
        if take_one(&self.switches.failing_loads) {
            return Err(injected("key-value read"));
        }
        self.inner.kv_get(key, name).await
    }

    /// Fails like a load when a load failure is due.
    async fn kv_list(
        &self,
        key: &ObjectKey,
        prefix: &str,
        start_after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<(String, Vec<u8>)>, StorageError> {
        if take_one(&self.switches.failing_loads) {
            return Err(injected("key-value listing"));
        }
        self.inner.kv_list(key, prefix, start_after, limit).await
    }

    async fn kv_usage(&self, key: &ObjectKey) -> Result<KvUsage, StorageError> {
        self.inner.kv_usage(key).await
    }

    async fn load_idempotent_reply(
        &self,
        key: &ObjectKey,
        idempotency_key: &str,
    ) -> Result<Option<IdempotentReply>, StorageError> {
        self.inner.load_idempotent_reply(key, idempotency_key).await
    }

    async fn sweep_idempotency(
        &self,
        now: SystemTime,
        limit: usize,
    ) -> Result<usize, StorageError> {
        self.inner.sweep_idempotency(now, limit).await
    }

    // Cluster mode fences the wrapped store; the faults stay on this side of it.
    fn cluster_backend(&self) -> Option<std::sync::Arc<dyn crate::cluster::ClusterBackend>> {
        self.inner.cluster_backend()
    }
}
