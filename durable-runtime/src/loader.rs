//! Group load: objects starting at the same time share one storage read.
//!
//! An object that is not in memory reads its state when its first call arrives. When many
//! start at once — after a restart, a deploy, a burst over cold ids — one read per object is
//! one round trip per object, on a pool of a few connections. Reads are instead queued here:
//! while a read is in flight, new ones queue up, and the next read takes all of them (up to
//! [`MAX_BATCH`]) with [`Storage::load_many`]. Nothing waits for a batch to fill: a lone load
//! is sent at once, as a plain [`Storage::load`].

use std::sync::Arc;

use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::storage::{ObjectKey, Storage, StorageError, StoredObject};

/// The most objects read in one round trip.
const MAX_BATCH: usize = 256;

type Loaded = Result<Option<StoredObject>, StorageError>;

type Reply = oneshot::Sender<Loaded>;

/// The sending side: what an object uses to read its state.
#[derive(Clone, Debug)]
pub(crate) struct Loader {
    queue: mpsc::UnboundedSender<(ObjectKey, Reply)>,
}

impl Loader {
    /// Starts the load loop on the current tokio runtime. It ends when every `Loader` clone is
    /// dropped.
    pub(crate) fn start(storage: Arc<dyn Storage>) -> Self {
        // Unbounded is bounded in practice: an object has at most one read in flight.
        let (queue, receive) = mpsc::unbounded_channel();
        tokio::spawn(run(storage, receive));
        Self { queue }
    }

    /// Reads `key`'s stored state, in a batch with the reads queued meanwhile.
    pub(crate) async fn load(&self, key: ObjectKey) -> Loaded {
        let (reply, loaded) = oneshot::channel();
        // If the loop is gone (its runtime is being torn down) the reply is dropped.
        let _ = self.queue.send((key, reply));
        loaded.await.unwrap_or_else(|_| {
            Err(StorageError::unavailable(std::io::Error::other(
                "the load loop stopped before reading",
            )))
        })
    }
}

async fn run(storage: Arc<dyn Storage>, mut queue: mpsc::UnboundedReceiver<(ObjectKey, Reply)>) {
    // Reads overlap as much as commits do: a server serves several, an embedded database one.
    let concurrency = storage.max_concurrent_commits().max(1);
    let in_flight = Arc::new(Semaphore::new(concurrency));
    loop {
        // Wait for a free slot first, so that reads arriving meanwhile join the batch.
        let Ok(permit) = Arc::clone(&in_flight).acquire_owned().await else {
            return;
        };
        let Some(first) = queue.recv().await else {
            return;
        };
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(read) => batch.push(read),
                Err(_) => break,
            }
        }
        if concurrency == 1 {
            load_batch(storage.as_ref(), batch).await;
            drop(permit);
            continue;
        }
        let storage = Arc::clone(&storage);
        tokio::spawn(async move {
            load_batch(storage.as_ref(), batch).await;
            drop(permit);
        });
    }
}

/// Reads a batch and answers each of its reads; a failed read fails every read of its batch.
async fn load_batch(storage: &dyn Storage, mut batch: Vec<(ObjectKey, Reply)>) {
    if batch.len() == 1 {
        if let Some((key, reply)) = batch.pop() {
            let _ = reply.send(storage.load(&key).await);
        }
        return;
    }
    let (keys, replies): (Vec<ObjectKey>, Vec<Reply>) = batch.into_iter().unzip();
    match storage.load_many(&keys).await {
        Ok(loaded) if loaded.len() == keys.len() => {
            for (reply, stored) in replies.into_iter().zip(loaded) {
                let _ = reply.send(Ok(stored));
            }
        }
        Ok(loaded) => {
            let error = StorageError::rejected(std::io::Error::other(format!(
                "a batched load of {} objects answered {}",
                keys.len(),
                loaded.len()
            )));
            for reply in replies {
                let _ = reply.send(Err(error.duplicate()));
            }
        }
        Err(error) => {
            for reply in replies {
                let _ = reply.send(Err(error.duplicate()));
            }
        }
    }
}
