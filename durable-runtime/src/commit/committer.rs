//! Group commit: writes from concurrent calls share one storage transaction.
//!
//! Every object sends its call's write here and waits for the outcome before it replies, so
//! per-call durability is exactly what it would be with one transaction per call. While a
//! batch is being committed, new writes queue up; the next batch takes all of them (up to
//! `max_batch`). Nothing waits for a batch to fill: an idle system commits each write at
//! once, a busy one commits many per transaction.
//!
//! A batch is all-or-nothing in storage, but its calls succeed or fail one by one: a version
//! conflict fails only the conflicting write and the rest is committed again without it; a
//! storage error on a batch of several writes commits them one at a time, so that one bad
//! write cannot fail its neighbours. That storage error may have come after the batch was
//! applied, so a write that then conflicts alone is answered with the batch's storage error
//! (an unknown outcome), not with a conflict, which would say that nothing was written. A write
//! whose key-value changes exceed a limit, or whose FSM changes are refused, fails alone like a
//! conflicting one.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::oneshot;

use crate::commit::batches::Queue;

use crate::storage::{CommitError, ObjectWrite, Storage};

/// The most writes committed in one transaction.
const MAX_BATCH: usize = 512;

type Reply = oneshot::Sender<Result<ObjectWrite, CommitError>>;

/// Where a submitted write's outcome arrives.
pub(crate) type Outcome = oneshot::Receiver<Result<ObjectWrite, CommitError>>;

/// The error of a write whose commit loop stopped before answering.
pub(crate) fn stopped() -> CommitError {
    CommitError::Storage(crate::storage::StorageError::unavailable(
        std::io::Error::other("the commit loop stopped with the write's outcome unknown"),
    ))
}

/// The sending side: what an object uses to commit a write.
#[derive(Clone, Debug)]
pub(crate) struct Committer {
    queue: Queue<(ObjectWrite, Reply)>,
}

impl Committer {
    /// Starts the commit loop on the current tokio runtime. It ends when every `Committer`
    /// clone is dropped.
    pub(crate) fn start(storage: Arc<dyn Storage>) -> Self {
        Self {
            queue: Queue::start(storage, MAX_BATCH, |storage, batch| async move {
                let (writes, replies) = batch.into_iter().unzip();
                commit_batch(storage.as_ref(), writes, replies).await;
            }),
        }
    }

    /// Commits `write` in the next batch; returns it once durable.
    pub(crate) async fn commit(&self, write: ObjectWrite) -> Result<ObjectWrite, CommitError> {
        Self::outcome(&mut self.submit(write)).await
    }

    /// Queues `write` for the next batch; the receiver yields it back once durable.
    pub(crate) fn submit(&self, write: ObjectWrite) -> Outcome {
        let (reply, outcome) = oneshot::channel();
        // If the loop is gone (its runtime is being torn down) the reply is dropped, and
        // `outcome` reports the write as not committed.
        self.queue.send((write, reply));
        outcome
    }

    /// Waits for a submitted write.
    pub(crate) async fn outcome(outcome: &mut Outcome) -> Result<ObjectWrite, CommitError> {
        outcome.await.unwrap_or_else(|_| Err(stopped()))
    }
}

/// Commits a batch, isolating failures to the writes that cause them.
async fn commit_batch(
    storage: &dyn Storage,
    mut writes: Vec<ObjectWrite>,
    mut replies: Vec<Reply>,
) {
    crate::observe::metrics::commit_batch(writes.len());
    loop {
        match timed_commit(storage, &writes).await {
            Ok(()) => {
                for (write, reply) in writes.into_iter().zip(replies) {
                    let _ = reply.send(Ok(write));
                }
                return;
            }
            Err(CommitError::Conflict {
                index,
                key,
                expected,
                found,
            }) if writes.len() > 1 && index < writes.len() => {
                // Only that write lost a race: fail it and commit the others again.
                writes.remove(index);
                let conflict = CommitError::Conflict {
                    index: 0,
                    key,
                    expected,
                    found,
                };
                let _ = replies.remove(index).send(Err(conflict));
            }
            Err(CommitError::KvLimit { index, key, limit })
                if writes.len() > 1 && index < writes.len() =>
            {
                // Only that write exceeded a limit, and nothing was applied: as for a conflict.
                writes.remove(index);
                let exceeded = CommitError::KvLimit {
                    index: 0,
                    key,
                    limit,
                };
                let _ = replies.remove(index).send(Err(exceeded));
            }
            Err(CommitError::AlarmLimit {
                index,
                key,
                max,
                found,
            }) if writes.len() > 1 && index < writes.len() => {
                // The same for an alarm limit.
                writes.remove(index);
                let exceeded = CommitError::AlarmLimit {
                    index: 0,
                    key,
                    max,
                    found,
                };
                let _ = replies.remove(index).send(Err(exceeded));
            }
            Err(CommitError::Fsm {
                index,
                key,
                refusal,
            }) if writes.len() > 1 && index < writes.len() => {
                // The same for refused FSM changes.
                writes.remove(index);
                let refused = CommitError::Fsm {
                    index: 0,
                    key,
                    refusal,
                };
                let _ = replies.remove(index).send(Err(refused));
            }
            Err(error) if writes.len() == 1 => {
                if let Some(reply) = replies.pop() {
                    let _ = reply.send(Err(error));
                }
                return;
            }
            Err(error) => {
                // Which write the failure belongs to is unknown: commit them one at a time.
                // A storage failure may also have applied the batch, so a write that now finds
                // a newer version may be finding its own: its outcome is the batch's, unknown,
                // never a conflict that says nothing was written.
                let ambiguous = match &error {
                    // A fenced batch was refused by the database: nothing of it was applied.
                    CommitError::Storage(cause)
                        if cause.kind() == crate::storage::StorageErrorKind::Fenced =>
                    {
                        None
                    }
                    CommitError::Storage(cause) => Some(cause),
                    CommitError::Conflict { .. }
                    | CommitError::KvLimit { .. }
                    | CommitError::AlarmLimit { .. }
                    | CommitError::Fsm { .. } => None,
                };
                for (write, reply) in writes.into_iter().zip(replies) {
                    let alone = timed_commit(storage, std::slice::from_ref(&write)).await;
                    let outcome = match (alone, ambiguous) {
                        (Err(CommitError::Conflict { .. }), Some(cause)) => {
                            Err(CommitError::Storage(cause.duplicate()))
                        }
                        (outcome, _) => outcome,
                    };
                    let _ = reply.send(outcome.map(|()| write));
                }
                return;
            }
        }
    }
}

/// `storage.commit(writes)`, with its duration and outcome recorded.
async fn timed_commit(storage: &dyn Storage, writes: &[ObjectWrite]) -> Result<(), CommitError> {
    let started = Instant::now();
    let committed = storage.commit(writes).await;
    let outcome = match &committed {
        Ok(()) => "ok",
        Err(CommitError::Conflict { .. }) => "conflict",
        Err(CommitError::KvLimit { .. }) => "kv_limit",
        Err(CommitError::AlarmLimit { .. }) => "alarm_limit",
        Err(CommitError::Fsm { .. }) => "fsm_refused",
        Err(_) => "error",
    };
    crate::observe::metrics::committed(outcome, started.elapsed());
    committed
}
