//! The loop behind group commit and group load: requests queue up while a batch is in flight,
//! and the next batch takes all of them.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use tokio::sync::{Semaphore, mpsc};

use crate::storage::Storage;

/// The sending side of a batching loop over a storage.
pub(crate) struct Queue<T> {
    sender: mpsc::UnboundedSender<T>,
}

impl<T> Clone for Queue<T> {
    fn clone(&self) -> Self {
        Self {
            sender: self.sender.clone(),
        }
    }
}

impl<T> fmt::Debug for Queue<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Queue").finish_non_exhaustive()
    }
}

impl<T: Send + 'static> Queue<T> {
    /// Starts a loop on the current tokio runtime that hands batches of up to `max` requests
    /// to `process`, with as many in flight as the storage overlaps commits
    /// ([`Storage::max_concurrent_commits`]). It ends when every clone of the queue is dropped.
    pub(crate) fn start<F, Fut>(storage: Arc<dyn Storage>, max: usize, process: F) -> Self
    where
        F: Fn(Arc<dyn Storage>, Vec<T>) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        // Unbounded is bounded in practice: an object has at most one request in flight.
        let (sender, receive) = mpsc::unbounded_channel();
        tokio::spawn(run(receive, storage, max, process));
        Self { sender }
    }

    /// Queues `request` for the next batch. If the loop is gone (its runtime is being torn
    /// down) the request is dropped, and with it whatever would have answered it.
    pub(crate) fn send(&self, request: T) {
        let _ = self.sender.send(request);
    }
}

/// Nothing waits for a batch to fill: a lone request is a batch of one. With one batch at a
/// time, `process` runs in this loop's task, without a hand-off to another.
async fn run<T, F, Fut>(
    mut queue: mpsc::UnboundedReceiver<T>,
    storage: Arc<dyn Storage>,
    max: usize,
    process: F,
) where
    F: Fn(Arc<dyn Storage>, Vec<T>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let concurrency = storage.max_concurrent_commits().max(1);
    let in_flight = Arc::new(Semaphore::new(concurrency));
    loop {
        // Wait for a free slot first, so that requests arriving meanwhile join the batch.
        let Ok(permit) = Arc::clone(&in_flight).acquire_owned().await else {
            return;
        };
        let Some(first) = queue.recv().await else {
            return;
        };
        let mut batch = vec![first];
        while batch.len() < max {
            match queue.try_recv() {
                Ok(request) => batch.push(request),
                Err(_) => break,
            }
        }
        let processed = process(Arc::clone(&storage), batch);
        if concurrency == 1 {
            processed.await;
            drop(permit);
            continue;
        }
        tokio::spawn(async move {
            processed.await;
            drop(permit);
        });
    }
}
