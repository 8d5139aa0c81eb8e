//! Whether the state an object's handler runs on is committed: what anything leaving the
//! object waits for.
//!
//! An object runs its next call while the previous call's write is in flight, so a handler may
//! run on state that is not committed yet. The output gate (`gate.rs`) holds replies until
//! then. A call to another object made from inside the handler (a call, an alarm scheduled or
//! cancelled on it, its deletion) would carry that state out just as well, so it waits here
//! until every write staged before it has committed, and is not made at all if one of them
//! fails. Each object keeps one of these, shared by its task (which reports its writes) and
//! the calls its handlers make (which find it through the call chain).

use std::sync::atomic::{AtomicU8, Ordering, fence};
use std::sync::{Mutex, MutexGuard, OnceLock};

use tokio::sync::Notify;

use crate::error::Error;
use crate::object::chain::Chain;
use crate::storage::{CommitError, ObjectKey};

/// Every write staged so far has committed.
const COMMITTED: u8 = 0;
/// A write is staged or in flight.
const PENDING: u8 = 1;
/// A write failed: the state handlers run on until the object reloads will never commit.
const FAILED: u8 = 2;

/// The commit status of one object's state.
#[derive(Debug, Default)]
pub(crate) struct Durability {
    status: AtomicU8,
    /// Made the first time a call waits or a write fails: most objects never need it, and
    /// every live object holds a `Durability`.
    waits: OnceLock<Box<Waits>>,
}

/// What waiting on a [`Durability`] needs.
#[derive(Debug, Default)]
struct Waits {
    /// Woken when the status leaves `PENDING`.
    settled: Notify,
    /// Why the status is `FAILED`.
    failure: Mutex<Option<CommitError>>,
}

impl Durability {
    /// A write was staged (it is in flight, or waits for the one that is).
    pub(crate) fn staged(&self) {
        if self.status.load(Ordering::Relaxed) != PENDING {
            self.status.store(PENDING, Ordering::Release);
        }
    }

    /// Every staged write has committed.
    pub(crate) fn committed(&self) {
        if self.status.swap(COMMITTED, Ordering::SeqCst) != COMMITTED {
            self.wake();
        }
    }

    /// A write failed: the state staged so far will never be committed.
    pub(crate) fn failed(&self, error: &CommitError) {
        *self.waits().lock_failure() = Some(duplicate(error));
        self.status.store(FAILED, Ordering::SeqCst);
        self.wake();
    }

    /// The object loads its state again from storage: what it runs on from now on is
    /// committed.
    pub(crate) fn reloaded(&self) {
        if self.status.load(Ordering::Acquire) == FAILED {
            *self.waits().lock_failure() = None;
            self.status.store(COMMITTED, Ordering::Release);
        }
    }

    /// The error of the write that failed, as a call that saw its state but did not write
    /// gets it, if one failed since the object last loaded.
    pub(crate) fn failure(&self, key: &ObjectKey) -> Option<Error> {
        let failure = self.waits.get()?.lock_failure();
        failure
            .as_ref()
            .map(|error| crate::error::commit_error(key, error, false))
    }

    /// Waits until every write of the object `key` staged so far has committed; fails with
    /// the error of the first that did not.
    pub(crate) async fn wait(&self, key: &ObjectKey) -> Result<(), Error> {
        if self.status.load(Ordering::Acquire) == COMMITTED {
            return Ok(());
        }
        let settled = &self.waits().settled;
        loop {
            let notified = settled.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before the status is read, so a change in between is not missed
            // (the fence pairs with `wake`'s: one of the two sees what the other wrote).
            notified.as_mut().enable();
            fence(Ordering::SeqCst);
            match self.status.load(Ordering::SeqCst) {
                COMMITTED => return Ok(()),
                FAILED => {
                    if let Some(error) = self.failure(key) {
                        return Err(error);
                    }
                }
                _ => notified.await,
            }
        }
    }

    fn waits(&self) -> &Waits {
        self.waits.get_or_init(Box::default)
    }

    /// Wakes the calls waiting, if any ever waited.
    fn wake(&self) {
        fence(Ordering::SeqCst);
        if let Some(waits) = self.waits.get() {
            waits.settled.notify_waiters();
        }
    }
}

impl Waits {
    fn lock_failure(&self) -> MutexGuard<'_, Option<CommitError>> {
        self.failure
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Waits, before something leaves the object whose handler runs on this task (the innermost
/// object of `chain`), until the state that handler runs on is committed. Outside any handler
/// there is nothing to wait for.
pub(crate) async fn leaving(chain: &Chain) -> Result<(), Error> {
    match chain.innermost() {
        Some((key, Some(durability))) => durability.wait(key).await,
        _ => Ok(()),
    }
}

/// A copy of `error` (its source kept as text, as
/// [`StorageError::duplicate`](crate::storage::StorageError) does).
fn duplicate(error: &CommitError) -> CommitError {
    match error {
        CommitError::Conflict {
            index,
            key,
            expected,
            found,
        } => CommitError::Conflict {
            index: *index,
            key: key.clone(),
            expected: *expected,
            found: *found,
        },
        CommitError::KvLimit { index, key, limit } => CommitError::KvLimit {
            index: *index,
            key: key.clone(),
            limit: *limit,
        },
        CommitError::AlarmLimit {
            index,
            key,
            max,
            found,
        } => CommitError::AlarmLimit {
            index: *index,
            key: key.clone(),
            max: *max,
            found: *found,
        },
        CommitError::Fsm {
            index,
            key,
            refusal,
        } => CommitError::Fsm {
            index: *index,
            key: key.clone(),
            refusal: refusal.clone(),
        },
        CommitError::Storage(source) => CommitError::Storage(source.duplicate()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::StorageError;

    fn key() -> ObjectKey {
        ObjectKey::new("Account", "a")
    }

    #[tokio::test]
    async fn a_wait_ends_when_the_staged_writes_commit() {
        let durability = Durability::default();
        durability.wait(&key()).await.unwrap();
        durability.staged();
        let key = key();
        let mut wait = std::pin::pin!(durability.wait(&key));
        assert!(futures_util::poll!(wait.as_mut()).is_pending());
        durability.committed();
        assert!(matches!(
            futures_util::poll!(wait),
            std::task::Poll::Ready(Ok(()))
        ));
    }

    #[tokio::test]
    async fn a_failed_write_fails_every_wait_until_the_object_reloads() {
        let durability = Durability::default();
        durability.staged();
        let key = key();
        let mut wait = std::pin::pin!(durability.wait(&key));
        assert!(futures_util::poll!(wait.as_mut()).is_pending());
        let cause = StorageError::unavailable(std::io::Error::other("connection reset"));
        durability.failed(&CommitError::Storage(cause));
        let std::task::Poll::Ready(Err(Error::Storage { key: failed, .. })) =
            futures_util::poll!(wait)
        else {
            panic!("the wait did not fail with the write");
        };
        assert_eq!(failed, key);
        assert!(
            durability.wait(&key).await.is_err(),
            "failed until reloaded"
        );
        durability.reloaded();
        assert!(durability.failure(&key).is_none());
        durability.wait(&key).await.unwrap();
    }
}
