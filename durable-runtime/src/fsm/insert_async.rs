//! Batched, fire-and-forget inserts: [`Engine::insert_async`] queues an instance in a
//! bounded channel and a background task inserts what has queued up in one statement per
//! batch ([`FsmStore::insert_batch`](super::store::FsmStore::insert_batch)). A caller that
//! wants the id awaits the [`PendingInsert`]; one that does not drops it.
//!
//! Like group commit, the task never waits for a batch to fill: it takes everything queued
//! while the previous batch was being written (up to the batch size). On shutdown the queue
//! is closed and what it holds is written before the engine's tasks end, so nothing accepted
//! is lost on a graceful shutdown.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::{mpsc, oneshot};

use super::engine::{Engine, EngineBuilder, Shared};
use super::error::Error;
use super::metrics;
use super::outcome::AnyInstance;
use super::run;
use super::status::InstanceId;
use super::store::NewInstance;

/// The insert queue's settings (see [`EngineBuilder::insert_queue`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct InsertSettings {
    pub(crate) capacity: usize,
    pub(crate) batch: usize,
}

impl Default for InsertSettings {
    fn default() -> Self {
        Self {
            capacity: 10_000,
            batch: 500,
        }
    }
}

/// One queued instance and who waits for its id.
pub(crate) struct Queued {
    row: NewInstance,
    reply: oneshot::Sender<Result<InstanceId, Error>>,
}

/// The queue's sending side, held by the engine.
pub(crate) type InsertQueue = mpsc::Sender<Queued>;

/// A new queue and its receiving side, for [`start`].
pub(crate) fn channel(settings: InsertSettings) -> (InsertQueue, mpsc::Receiver<Queued>) {
    mpsc::channel(settings.capacity.max(1))
}

/// An instance queued by [`Engine::insert_async`]: await it for its id once its batch has
/// committed, or drop it to not wait (the instance is inserted all the same).
///
/// It resolves to [`Error::Duplicate`] when its correlation key was occupied,
/// [`Error::Storage`] when its batch failed (the batch is one transaction: none of it, or,
/// when the commit's answer was lost, maybe all of it, was stored), and [`Error::Stopped`]
/// when the engine stopped before writing it (only after an ungraceful stop).
#[derive(Debug)]
pub struct PendingInsert {
    reply: oneshot::Receiver<Result<InstanceId, Error>>,
}

impl Future for PendingInsert {
    type Output = Result<InstanceId, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.reply)
            .poll(cx)
            .map(|answer| answer.unwrap_or(Err(Error::Stopped)))
    }
}

/// Why [`Engine::try_insert_async`] did not queue an instance.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TryInsertError {
    /// The queue holds its capacity of instances not yet written: try again later, or
    /// `insert_async(..).await`, which waits for room.
    #[error("the insert queue is full ({capacity} instances wait to be written); try again later")]
    Full {
        /// The queue's capacity.
        capacity: usize,
    },
    /// The instance cannot be stored, or the engine has stopped.
    #[error(transparent)]
    Engine(#[from] Error),
}

impl EngineBuilder {
    /// The queue of [`Engine::insert_async`]: at most `capacity` instances wait to be written
    /// (default 10,000; `insert_async` then waits for room, `try_insert_async` answers
    /// [`TryInsertError::Full`]), written at most `batch` to a statement (default 500).
    pub fn insert_queue(mut self, capacity: usize, batch: usize) -> Self {
        self.settings.inserts = InsertSettings {
            capacity: capacity.max(1),
            batch: batch.max(1),
        };
        self
    }
}

impl Engine {
    /// Queues one instance to be inserted in a batch with others, waiting while the queue is
    /// full, and returns at once after that: await the [`PendingInsert`] for its id (once its
    /// batch has committed), or drop it.
    ///
    /// Batches are written by a task of the engine, one statement (one transaction) each;
    /// [`shutdown`](Self::shutdown) writes what is queued before it returns.
    ///
    /// # Errors
    ///
    /// [`Error::Unencodable`] when its state cannot be stored, [`Error::Stopped`] once the
    /// engine is shutting down.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::fsm::{job, Engine, Job, MemoryFsmStore, StepContext};
    ///
    /// #[job]
    /// pub struct Ping {
    ///     n: u32,
    /// }
    ///
    /// impl Job for Ping {
    ///     type Error = String;
    ///
    ///     async fn perform(&self, _ctx: &StepContext) -> Result<(), String> {
    ///         Ok(())
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let engine = Engine::builder(MemoryFsmStore::new()).register::<Ping>().build()?;
    /// // Fire and forget:
    /// for n in 0..100 {
    ///     drop(engine.insert_async(Ping { n }).await?);
    /// }
    /// // Or wait for the id:
    /// let id = engine.insert_async(Ping { n: 100 }).await?.await?;
    /// assert!(engine.get(id).await?.is_some());
    /// engine.shutdown().await; // writes whatever is still queued
    /// # Ok(()) }
    /// ```
    pub async fn insert_async(
        &self,
        instance: impl Into<AnyInstance>,
    ) -> Result<PendingInsert, Error> {
        let (queued, pending) = self.queued(instance.into())?;
        self.shared
            .inserts
            .send(queued)
            .await
            .map_err(|_| Error::Stopped)?;
        Ok(pending)
    }

    /// Queues one instance as [`insert_async`](Self::insert_async) does, without waiting:
    /// a full queue is an error.
    ///
    /// # Errors
    ///
    /// [`TryInsertError::Full`] when the queue is full (nothing is queued),
    /// [`TryInsertError::Engine`] with [`Error::Unencodable`] or [`Error::Stopped`].
    pub fn try_insert_async(
        &self,
        instance: impl Into<AnyInstance>,
    ) -> Result<PendingInsert, TryInsertError> {
        let (queued, pending) = self.queued(instance.into())?;
        self.shared
            .inserts
            .try_send(queued)
            .map_err(|error| match error {
                mpsc::error::TrySendError::Full(_) => TryInsertError::Full {
                    capacity: self.shared.settings.inserts.capacity,
                },
                mpsc::error::TrySendError::Closed(_) => TryInsertError::Engine(Error::Stopped),
            })?;
        Ok(pending)
    }

    /// The row of `instance`, stamped now (its start delay counts from the call).
    fn queued(&self, instance: AnyInstance) -> Result<(Queued, PendingInsert), Error> {
        let row = run::new_instance(&instance, self.shared.clock.now()).map_err(|message| {
            Error::Unencodable {
                what: "state",
                message,
            }
        })?;
        let (reply, answer) = oneshot::channel();
        Ok((Queued { row, reply }, PendingInsert { reply: answer }))
    }
}

/// Starts the task that writes the queue's batches.
pub(crate) fn start(shared: &Arc<Shared>, queue: mpsc::Receiver<Queued>) {
    shared.maintenance.spawn(writer(Arc::clone(shared), queue));
}

/// Writes batches until the engine stops, then closes the queue and writes what it holds.
async fn writer(shared: Arc<Shared>, mut queue: mpsc::Receiver<Queued>) {
    let batch_size = shared.settings.inserts.batch;
    loop {
        let first = tokio::select! {
            // Queued instances go first: a stop does not cut the queue short.
            biased;
            first = queue.recv() => first,
            () = shared.stop_maintenance.cancelled() => None,
        };
        let Some(first) = first else { break };
        let batch = fill(&mut queue, first, batch_size);
        write(&shared, batch).await;
    }
    // Refuse new instances, then write those already accepted.
    queue.close();
    while let Some(first) = queue.recv().await {
        let batch = fill(&mut queue, first, batch_size);
        write(&shared, batch).await;
    }
}

/// `first` and whatever else is queued, up to `size`.
fn fill(queue: &mut mpsc::Receiver<Queued>, first: Queued, size: usize) -> Vec<Queued> {
    let mut batch = vec![first];
    while batch.len() < size {
        match queue.try_recv() {
            Ok(next) => batch.push(next),
            Err(_) => break,
        }
    }
    batch
}

/// Inserts one batch in one statement and answers each waiting caller.
async fn write(shared: &Shared, batch: Vec<Queued>) {
    let (rows, replies): (Vec<NewInstance>, Vec<_>) =
        batch.into_iter().map(|q| (q.row, q.reply)).unzip();
    shared.know_queues(rows.iter().map(|row| row.queue.as_str()));
    let written = shared.store.insert_batch(&rows, shared.clock.now()).await;
    metrics::insert_batch(rows.len(), written.is_ok());
    match written {
        Ok(ids) => {
            shared.changed.notify_waiters();
            for ((row, reply), id) in rows.into_iter().zip(replies).zip(ids) {
                let answer = id.ok_or_else(|| Error::Duplicate {
                    key: row.correlation_key.unwrap_or_default(),
                });
                let _ = reply.send(answer);
            }
        }
        Err(error) => {
            tracing::warn!(%error, rows = rows.len(), "a batch of queued FSM inserts failed");
            for reply in replies {
                let _ = reply.send(Err(Error::Storage(error.duplicate())));
            }
        }
    }
}
