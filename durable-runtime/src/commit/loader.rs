//! Group load: objects starting at the same time share one storage read.
//!
//! An object that is not in memory reads its state when its first call arrives. When many
//! start at once — after a restart, a deploy, a burst over cold ids — one read per object is
//! one round trip per object, on a pool of a few connections. Reads are instead queued here:
//! while a read is in flight, new ones queue up, and the next read takes all of them (up to
//! [`MAX_BATCH`]) with [`Storage::load_many`]. Nothing waits for a batch to fill: a lone load
//! is sent at once, as a plain [`Storage::load`].

use std::sync::Arc;

use tokio::sync::oneshot;

use crate::commit::batches::Queue;
use crate::storage::{Loaded, ObjectKey, Storage, StorageError, load_all};

/// The most objects read in one round trip.
const MAX_BATCH: usize = 256;

type Read = Result<Loaded, StorageError>;

type Reply = oneshot::Sender<Read>;

/// The sending side: what an object uses to read its state.
#[derive(Clone, Debug)]
pub(crate) struct Loader {
    queue: Queue<(ObjectKey, Reply)>,
}

impl Loader {
    /// Starts the load loop on the current tokio runtime (reads overlap as much as commits
    /// do: a server serves several, an embedded database one). It ends when every `Loader`
    /// clone is dropped.
    pub(crate) fn start(storage: Arc<dyn Storage>) -> Self {
        Self {
            queue: Queue::start(storage, MAX_BATCH, load_batch),
        }
    }

    /// Reads `key`'s stored state, in a batch with the reads queued meanwhile.
    pub(crate) async fn load(&self, key: ObjectKey) -> Read {
        let (reply, loaded) = oneshot::channel();
        self.queue.send((key, reply));
        loaded.await.unwrap_or_else(|_| {
            Err(StorageError::unavailable(std::io::Error::other(
                "the load loop stopped before reading",
            )))
        })
    }
}

/// Reads a batch and answers each of its reads; a failed read fails every read of its batch.
async fn load_batch(storage: Arc<dyn Storage>, mut batch: Vec<(ObjectKey, Reply)>) {
    if batch.len() == 1 {
        if let Some((key, reply)) = batch.pop() {
            let _ = reply.send(storage.load(&key).await);
        }
        return;
    }
    let (keys, replies): (Vec<ObjectKey>, Vec<Reply>) = batch.into_iter().unzip();
    match load_all(storage.as_ref(), &keys).await {
        Ok(loaded) => {
            for (reply, stored) in replies.into_iter().zip(loaded) {
                let _ = reply.send(Ok(stored));
            }
        }
        Err(error) => {
            for reply in replies {
                let _ = reply.send(Err(error.duplicate()));
            }
        }
    }
}
