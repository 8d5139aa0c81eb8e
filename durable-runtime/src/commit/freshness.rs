//! Other runtimes on the same database: the version checks behind validated reads, and the
//! warning when a version conflict shows that another runtime writes the objects of this one.
//!
//! Writes are fenced by versions whoever else writes the database; a live object's state in
//! memory is not. With validated reads ([`RuntimeBuilder::validate_reads`]) a read call first
//! asks storage for the object's version. Checks are queued here and sent in batches as loads
//! are ([`crate::loader`]): while a check is in flight, new ones queue up, and the next check
//! takes all of them with one [`Storage::load_versions`].
//!
//! [`RuntimeBuilder::validate_reads`]: crate::RuntimeBuilder::validate_reads

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::oneshot;

use crate::commit::batches::Queue;
use crate::storage::{CommitError, ObjectKey, Storage, StorageError, load_all_versions};

/// The most objects checked in one round trip.
const MAX_BATCH: usize = 256;

type Checked = Result<Option<u64>, StorageError>;

type Reply = oneshot::Sender<Checked>;

/// The sending side: what an object uses to learn its stored version.
#[derive(Clone, Debug)]
pub(crate) struct VersionChecks {
    queue: Queue<(ObjectKey, Reply)>,
}

impl VersionChecks {
    /// Starts the check loop on the current tokio runtime. It ends when every
    /// `VersionChecks` clone is dropped.
    pub(crate) fn start(storage: Arc<dyn Storage>) -> Self {
        Self {
            queue: Queue::start(storage, MAX_BATCH, check_batch),
        }
    }

    /// The version storage holds for `key` (`None`: nothing stored), read in a batch with the
    /// checks queued meanwhile.
    pub(crate) async fn version(&self, key: ObjectKey) -> Checked {
        let (reply, checked) = oneshot::channel();
        self.queue.send((key, reply));
        checked.await.unwrap_or_else(|_| {
            Err(StorageError::unavailable(std::io::Error::other(
                "the version check loop stopped before reading",
            )))
        })
    }
}

/// Checks a batch and answers each of its checks; a failed query fails every check of it.
async fn check_batch(storage: Arc<dyn Storage>, batch: Vec<(ObjectKey, Reply)>) {
    let (keys, replies): (Vec<ObjectKey>, Vec<Reply>) = batch.into_iter().unzip();
    match load_all_versions(storage.as_ref(), &keys).await {
        Ok(versions) => {
            for (reply, version) in replies.into_iter().zip(versions) {
                let _ = reply.send(Ok(version));
            }
        }
        Err(error) => {
            for reply in replies {
                let _ = reply.send(Err(error.duplicate()));
            }
        }
    }
}

/// Logs, once per runtime, that a version conflict showed another writer of this database.
#[derive(Debug, Default)]
pub(crate) struct SecondWriterWarning {
    logged: AtomicBool,
}

impl SecondWriterWarning {
    /// Warns on the first conflict this runtime meets; `validating` says whether its reads
    /// are validated already.
    pub(crate) fn conflict(&self, error: &CommitError, validating: bool) {
        let CommitError::Conflict {
            key,
            expected,
            found,
            ..
        } = error
        else {
            return;
        };
        if self.logged.swap(true, Ordering::Relaxed) {
            return;
        }
        let found = found.map_or_else(|| "none".to_owned(), |found| found.to_string());
        let reads = if validating {
            "reads are validated (`RuntimeBuilder::validate_reads`)"
        } else {
            "reads may serve state older than the other runtime's acknowledged writes; \
             `RuntimeBuilder::validate_reads` makes every read check the stored version first"
        };
        tracing::warn!(
            object = %key,
            expected_version = expected,
            found_version = %found,
            "another runtime wrote {key} (expected version {expected}, found {found}): \
             more than one runtime uses this database. Writes stay safe (versions fence \
             them); {reads}. See \"Two runtimes on one database\" in the book's storage \
             chapter. Logged once per runtime."
        );
    }
}
