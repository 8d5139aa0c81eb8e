//! One live object: a task that owns the object's state and handles its calls one at a time.
//!
//! The persistence contract lives here: a `&mut self` handler's state is encoded after it
//! returns; if the bytes changed they are committed before the reply is released; a handler
//! error or panic restores the last committed state; a failed or unknown commit throws the
//! activation away so that the next call reloads what storage holds.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::time::{Instant, sleep_until};
use tracing::Instrument;

use crate::call::{Access, Outcome};
use crate::chain::Chain;
use crate::codec;
use crate::context::Context;
use crate::error::Error;
use crate::events::Event;
use crate::metrics;
use crate::object::{DurableObject, ObjectOptions};
use crate::registry::{Envelope, InstanceCell, Residency, TypeEntry};
use crate::runtime::Runtime;
use crate::storage::{AlarmChange, CommitError, ObjectKey, ObjectWrite};

/// How many times activation retries after losing a creation race to another runtime.
const ACTIVATION_ATTEMPTS: usize = 3;

/// The options of one object type with every default applied.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Settings {
    pub(crate) hibernate_after: Option<Duration>,
    pub(crate) shutdown_after: Option<Duration>,
    pub(crate) call_timeout: Option<Duration>,
    pub(crate) queue_capacity: usize,
}

impl Settings {
    /// Settings from fully resolved options (every default already applied).
    pub(crate) fn from_options(options: ObjectOptions) -> Self {
        Self {
            hibernate_after: options.hibernate_after,
            shutdown_after: options.shutdown_after,
            call_timeout: options.call_timeout,
            queue_capacity: options.queue_capacity.unwrap_or(1).max(1),
        }
    }
}

/// What the instance holds of its object.
enum Slot<O> {
    /// Nothing in memory: the next call loads from storage.
    Unloaded,
    /// Decoded and ready. `committed` is the encoding of the last committed state.
    Active {
        state: O,
        committed: Vec<u8>,
        version: u64,
    },
    /// The decoded state was dropped to save memory; the committed bytes wake it without a
    /// storage read.
    Hibernated { committed: Vec<u8>, version: u64 },
}

pub(crate) struct Instance<O: DurableObject> {
    entry: Arc<TypeEntry<O>>,
    generation: u64,
    mailbox: mpsc::Receiver<Envelope<O>>,
    cell: Arc<InstanceCell>,
    ctx: Context,
    slot: Slot<O>,
    last_activity: Instant,
    /// The chain of a call that came from outside any handler: just this object.
    own_chain: Chain,
}

impl<O: DurableObject> Drop for Instance<O> {
    fn drop(&mut self) {
        self.runtime().release_live_slot();
        metrics::live_objects(O::TYPE_NAME, -1.0);
    }
}

/// Why the task loop woke up.
enum Wake<O> {
    Envelope(Envelope<O>),
    Idle(Idle),
    Closed,
    RuntimeShutdown,
}

/// An idle transition.
#[derive(Clone, Copy, Debug)]
enum Idle {
    Hibernate,
    Shutdown,
}

impl<O: DurableObject> Instance<O> {
    pub(crate) fn new(
        runtime: Runtime,
        entry: Arc<TypeEntry<O>>,
        key: ObjectKey,
        generation: u64,
        mailbox: mpsc::Receiver<Envelope<O>>,
        cell: Arc<InstanceCell>,
    ) -> Self {
        Self {
            entry,
            generation,
            mailbox,
            cell,
            own_chain: Chain::default().push(key.clone()),
            ctx: Context::new(key, runtime),
            slot: Slot::Unloaded,
            last_activity: Instant::now(),
        }
    }

    fn key(&self) -> &ObjectKey {
        self.ctx.key()
    }

    fn runtime(&self) -> &Runtime {
        self.ctx.runtime()
    }

    /// The task body: handle envelopes until idle long enough to shut down, or until the
    /// runtime shuts down.
    pub(crate) async fn run(mut self) {
        let shutdown = self.runtime().shutdown_token();
        loop {
            let wake = match self.next_deadline() {
                Some((deadline, idle)) => tokio::select! {
                    envelope = self.mailbox.recv() => envelope.map_or(Wake::Closed, Wake::Envelope),
                    () = sleep_until(deadline) => Wake::Idle(idle),
                    () = shutdown.cancelled() => Wake::RuntimeShutdown,
                },
                None => tokio::select! {
                    envelope = self.mailbox.recv() => envelope.map_or(Wake::Closed, Wake::Envelope),
                    () = shutdown.cancelled() => Wake::RuntimeShutdown,
                },
            };
            match wake {
                Wake::Envelope(envelope) => {
                    self.handle(envelope).await;
                    self.last_activity = Instant::now();
                    self.cell.finished(self.runtime().uptime_millis());
                }
                Wake::Idle(Idle::Hibernate) => self.hibernate(),
                Wake::Idle(Idle::Shutdown) => {
                    if self.try_shutdown() {
                        return;
                    }
                }
                Wake::Closed => {
                    // Evicted to make room: the registry dropped the mailbox while idle.
                    metrics::count(metrics::SHUTDOWNS, O::TYPE_NAME);
                    self.emit(|key| Event::ShutDown { key });
                    return;
                }
                Wake::RuntimeShutdown => return self.drain().await,
            }
        }
    }

    /// Runtime shutdown: handle what is already queued (each committed before its reply),
    /// then leave.
    async fn drain(mut self) {
        self.mailbox.close();
        while let Some(envelope) = self.mailbox.recv().await {
            self.handle(envelope).await;
            self.cell.finished(self.runtime().uptime_millis());
        }
        let id = self.key().object_id.clone();
        self.entry.deregister(&id, self.generation, || true);
        self.emit(|key| Event::ShutDown { key });
    }

    /// The next idle transition and when it is due, if any.
    fn next_deadline(&self) -> Option<(Instant, Idle)> {
        let settings = &self.entry.settings;
        let hibernate = match self.slot {
            Slot::Active { .. } => settings
                .hibernate_after
                .map(|after| (self.last_activity + after, Idle::Hibernate)),
            _ => None,
        };
        let shutdown = settings
            .shutdown_after
            .map(|after| (self.last_activity + after, Idle::Shutdown));
        match (hibernate, shutdown) {
            (Some(h), Some(s)) => Some(if h.0 < s.0 { h } else { s }),
            (h, s) => h.or(s),
        }
    }

    fn hibernate(&mut self) {
        if let Slot::Active {
            committed, version, ..
        } = std::mem::replace(&mut self.slot, Slot::Unloaded)
        {
            self.slot = Slot::Hibernated { committed, version };
            self.cell.set_residency(Residency::Hibernated);
            metrics::count(metrics::HIBERNATIONS, O::TYPE_NAME);
            self.emit(|key| Event::Hibernated { key });
        }
    }

    fn emit(&self, event: impl FnOnce(ObjectKey) -> Event) {
        self.runtime().emit(|| event(self.key().clone()));
    }

    /// Leaves the registry if no call is waiting. Returns whether the instance may end.
    fn try_shutdown(&mut self) -> bool {
        let mailbox = &self.mailbox;
        let id = &self.ctx.key().object_id;
        let removed = self
            .entry
            .deregister(id, self.generation, || mailbox.is_empty());
        if removed {
            metrics::count(metrics::SHUTDOWNS, O::TYPE_NAME);
            self.emit(|key| Event::ShutDown { key });
        }
        removed
    }

    fn set_slot_unloaded(&mut self) {
        self.slot = Slot::Unloaded;
        self.cell.set_residency(Residency::Unloaded);
    }

    async fn handle(&mut self, envelope: Envelope<O>) {
        match envelope {
            Envelope::Call(call) => {
                let span = tracing::debug_span!(
                    "durable.call",
                    object_type = O::TYPE_NAME,
                    handler = call.handler()
                );
                self.handle_call(call).instrument(span).await;
            }
            Envelope::Delete(reply) => self.delete(reply).await,
        }
    }

    async fn delete(&mut self, reply: oneshot::Sender<Result<bool, Error>>) {
        let key = self.key().clone();
        let result = self.runtime().storage().delete(&key).await;
        // Whatever happened, storage is the truth from now on.
        self.set_slot_unloaded();
        let result = match result {
            Ok(existed) => {
                self.emit(|key| Event::Deleted { key });
                Ok(existed)
            }
            Err(source) => {
                metrics::count(metrics::PERSISTENCE_FAILURES, O::TYPE_NAME);
                Err(Error::Storage { key, source })
            }
        };
        let _ = reply.send(result);
    }

    async fn handle_call(&mut self, mut call: Box<dyn crate::call::Invocation<O>>) {
        let started = Instant::now();
        let handler = call.handler();
        if let Err(error) = self.activate().await {
            metrics::call_finished(
                O::TYPE_NAME,
                handler,
                "activation_failed",
                started.elapsed(),
            );
            call.fail(error);
            return;
        }
        let access = call.access();
        self.ctx.set_writable(access == Access::Write);
        let chain = if call.chain().is_empty() {
            self.own_chain.clone()
        } else {
            call.chain().push(self.key().clone())
        };
        let Slot::Active { state, .. } = &mut self.slot else {
            unreachable!("activate leaves the slot active");
        };
        let run = chain.scope(call.run(state, &self.ctx));
        let outcome = match self.entry.settings.call_timeout {
            Some(limit) => tokio::time::timeout(limit, run).await,
            None => Ok(run.await),
        };
        let Ok(outcome) = outcome else {
            // The handler was cut off at an arbitrary await point: its in-memory changes
            // cannot be trusted, so the activation goes.
            self.ctx.take_alarm_changes();
            self.set_slot_unloaded();
            metrics::call_finished(O::TYPE_NAME, handler, "timeout", started.elapsed());
            let key = self.key().clone();
            call.fail(Error::Timeout { key, handler });
            return;
        };
        let label = match outcome {
            Outcome::Returned if access == Access::Read => {
                self.ctx.take_alarm_changes();
                call.reply();
                "ok"
            }
            Outcome::Returned => match self.persist().await {
                Ok(()) => {
                    call.reply();
                    "ok"
                }
                Err(error) => {
                    call.fail(error);
                    "persistence_failed"
                }
            },
            Outcome::HandlerError => {
                self.rollback(access);
                call.reply();
                "handler_error"
            }
            Outcome::Panicked(message) => {
                self.rollback(access);
                let key = self.key().clone();
                call.fail(Error::Panicked {
                    key,
                    handler,
                    message,
                });
                "panicked"
            }
        };
        metrics::call_finished(O::TYPE_NAME, handler, label, started.elapsed());
    }

    /// Makes the slot active: wakes a hibernated state or loads from storage.
    async fn activate(&mut self) -> Result<(), Error> {
        match std::mem::replace(&mut self.slot, Slot::Unloaded) {
            active @ Slot::Active { .. } => {
                self.slot = active;
                Ok(())
            }
            Slot::Hibernated { committed, version } => {
                let started = Instant::now();
                let state = self.decode(&committed)?;
                self.slot = Slot::Active {
                    state,
                    committed,
                    version,
                };
                self.cell.set_residency(Residency::Active);
                metrics::woken(O::TYPE_NAME, started.elapsed());
                self.emit(|key| Event::Woken { key });
                Ok(())
            }
            Slot::Unloaded => {
                let span = tracing::debug_span!("durable.load", object_type = O::TYPE_NAME);
                let mut attempt = 1;
                loop {
                    match self.load().instrument(span.clone()).await {
                        Err(Error::Conflict { .. }) if attempt < ACTIVATION_ATTEMPTS => {
                            attempt += 1;
                        }
                        Err(error) => {
                            if matches!(error, Error::Storage { .. }) {
                                metrics::count(metrics::PERSISTENCE_FAILURES, O::TYPE_NAME);
                            }
                            return Err(error);
                        }
                        Ok(()) => {
                            self.cell.set_residency(Residency::Active);
                            metrics::count(metrics::ACTIVATIONS, O::TYPE_NAME);
                            return Ok(());
                        }
                    }
                }
            }
        }
    }

    /// Loads (or creates) the state, runs the after-load hook and commits what it changed.
    async fn load(&mut self) -> Result<(), Error> {
        let key = self.key().clone();
        let stored = self
            .runtime()
            .storage()
            .load(&key)
            .await
            .map_err(|source| Error::Storage {
                key: key.clone(),
                source,
            })?;
        let (mut state, before, version) = match stored {
            Some(stored) => {
                let state: O = self.decode(&stored.state)?;
                let before = self.encode(&state)?;
                (state, Some(before), stored.version)
            }
            None => (O::default(), None, 0),
        };
        let created = before.is_none();
        self.ctx.set_writable(true);
        let hook = std::panic::AssertUnwindSafe(state.after_load(&self.ctx));
        let hook_result = futures_util::FutureExt::catch_unwind(hook).await;
        let alarms = self.ctx.take_alarm_changes();
        let message = match hook_result {
            Ok(Ok(())) => None,
            Ok(Err(error)) => Some(error.to_string()),
            Err(_panic) => Some("after_load panicked".to_owned()),
        };
        if let Some(message) = message {
            return Err(Error::AfterLoad { key, message });
        }
        let after = self.encode(&state)?;
        let changed = before.as_deref() != Some(after.as_slice());
        let mut committed_version = version;
        if changed || !alarms.is_empty() {
            let write = ObjectWrite {
                key,
                expected_version: version,
                state: changed.then(|| after.clone()),
                alarms,
            };
            self.commit(write).await?;
            committed_version += 1;
        }
        self.slot = Slot::Active {
            state,
            committed: after,
            version: committed_version,
        };
        self.emit(|key| {
            if created {
                Event::Created { key }
            } else {
                Event::Loaded { key }
            }
        });
        Ok(())
    }

    /// Commits the active state if it changed (with the call's alarm changes).
    async fn persist(&mut self) -> Result<(), Error> {
        let alarms = self.ctx.take_alarm_changes();
        let Slot::Active {
            state,
            committed,
            version,
        } = &self.slot
        else {
            unreachable!("persist runs on an active slot");
        };
        let encoded = match codec::encode(state) {
            Ok(encoded) => encoded,
            Err(message) => {
                let key = self.key().clone();
                self.rollback(Access::Write);
                return Err(Error::Encode { key, message });
            }
        };
        let changed = encoded != *committed;
        if !changed && alarms.is_empty() {
            return Ok(());
        }
        let write = ObjectWrite {
            key: self.key().clone(),
            expected_version: *version,
            state: changed.then_some(encoded),
            alarms,
        };
        let span = tracing::debug_span!("durable.commit", object_type = O::TYPE_NAME);
        match self.commit(write).instrument(span).await {
            Ok(write) => {
                if let Slot::Active {
                    committed, version, ..
                } = &mut self.slot
                {
                    *version = write.new_version();
                    if let Some(state) = write.state {
                        *committed = state;
                    }
                }
                Ok(())
            }
            Err(error) => {
                // Failed or unknown outcome: storage is the truth, reload it next time.
                metrics::count(metrics::PERSISTENCE_FAILURES, O::TYPE_NAME);
                self.set_slot_unloaded();
                Err(error)
            }
        }
    }

    /// Commits one write, returning it on success.
    async fn commit(&self, write: ObjectWrite) -> Result<ObjectWrite, Error> {
        match self.runtime().committer().commit(write).await {
            Ok(write) => {
                if write
                    .alarms
                    .iter()
                    .any(|change| matches!(change, AlarmChange::Set { .. }))
                {
                    self.runtime().signal_alarm_scheduled();
                }
                Ok(write)
            }
            Err(CommitError::Conflict { key, found, .. }) => Err(Error::Conflict { key, found }),
            Err(CommitError::Storage(source)) => Err(Error::Storage {
                key: self.key().clone(),
                source,
            }),
        }
    }

    /// Restores the last committed state after a failed `&mut self` call.
    fn rollback(&mut self, access: Access) {
        self.ctx.take_alarm_changes();
        if access == Access::Read {
            return;
        }
        if let Slot::Active {
            state, committed, ..
        } = &mut self.slot
        {
            match codec::decode::<O>(committed) {
                Ok(restored) => *state = restored,
                // Cannot happen for bytes this runtime encoded; reload from storage if it does.
                Err(_) => self.set_slot_unloaded(),
            }
        }
    }

    fn decode(&self, bytes: &[u8]) -> Result<O, Error> {
        codec::decode(bytes).map_err(|failure| Error::Decode {
            key: self.key().clone(),
            path: failure.path,
            message: failure.message,
        })
    }

    fn encode(&self, state: &O) -> Result<Vec<u8>, Error> {
        codec::encode(state).map_err(|message| Error::Encode {
            key: self.key().clone(),
            message,
        })
    }
}
