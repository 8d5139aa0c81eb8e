//! One live object: a task that owns the object's state and handles its calls one at a time.
//!
//! The persistence contract lives here: a `&mut self` handler's state is encoded after it
//! returns; if the bytes changed they are committed before the reply is released; a handler
//! error or panic restores the last committed state; a failed or unknown commit throws the
//! activation away so that the next call reloads what storage holds.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};

use crate::call::{Access, Outcome};
use crate::codec;
use crate::context::Context;
use crate::error::Error;
use crate::object::{DurableObject, ObjectOptions};
use crate::registry::{Envelope, TypeEntry};
use crate::runtime::Runtime;
use crate::storage::{CommitError, ObjectKey, ObjectWrite};

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
    pub(crate) fn from_options(options: ObjectOptions) -> Self {
        Self {
            hibernate_after: options.hibernate_after,
            shutdown_after: options.shutdown_after,
            call_timeout: options.call_timeout,
            queue_capacity: options.queue_capacity.unwrap_or(1024),
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
    ctx: Context,
    slot: Slot<O>,
    last_activity: Instant,
}

impl<O: DurableObject> Instance<O> {
    pub(crate) fn new(
        runtime: Runtime,
        entry: Arc<TypeEntry<O>>,
        key: ObjectKey,
        generation: u64,
        mailbox: mpsc::Receiver<Envelope<O>>,
    ) -> Self {
        Self {
            entry,
            generation,
            mailbox,
            ctx: Context::new(key, runtime),
            slot: Slot::Unloaded,
            last_activity: Instant::now(),
        }
    }

    fn key(&self) -> &ObjectKey {
        self.ctx.key()
    }

    /// The task body: handle calls until idle long enough to shut down.
    pub(crate) async fn run(mut self) {
        loop {
            let call = match self.next_deadline() {
                Some((deadline, idle)) => tokio::select! {
                    call = self.mailbox.recv() => call,
                    () = sleep_until(deadline) => {
                        match idle {
                            Idle::Hibernate => self.hibernate(),
                            Idle::Shutdown => {
                                if self.try_shutdown() {
                                    return;
                                }
                            }
                        }
                        continue;
                    }
                },
                None => self.mailbox.recv().await,
            };
            let Some(call) = call else { return };
            self.handle(call).await;
            self.last_activity = Instant::now();
        }
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
        }
    }

    /// Leaves the registry if no call is waiting. Returns whether the instance may end.
    fn try_shutdown(&mut self) -> bool {
        let mailbox = &self.mailbox;
        let id = &self.ctx.key().object_id;
        self.entry
            .deregister(id, self.generation, || mailbox.is_empty())
    }

    async fn handle(&mut self, mut call: Envelope<O>) {
        if let Err(error) = self.activate().await {
            call.fail(error);
            return;
        }
        let Slot::Active { state, .. } = &mut self.slot else {
            unreachable!("activate leaves the slot active");
        };
        let access = call.access();
        let handler = call.handler();
        let run = call.run(state, &self.ctx);
        let outcome = match self.entry.settings.call_timeout {
            Some(limit) => tokio::time::timeout(limit, run).await,
            None => Ok(run.await),
        };
        let outcome = match outcome {
            Ok(outcome) => outcome,
            Err(_elapsed) => {
                // The handler was cut off at an arbitrary await point: its in-memory changes
                // cannot be trusted, so the activation goes.
                self.ctx.take_alarm_changes();
                self.slot = Slot::Unloaded;
                let key = self.key().clone();
                call.fail(Error::Timeout { key, handler });
                return;
            }
        };
        match outcome {
            Outcome::Returned if access == Access::Read => {
                self.ctx.take_alarm_changes();
                call.reply();
            }
            Outcome::Returned => match self.persist().await {
                Ok(()) => call.reply(),
                Err(error) => call.fail(error),
            },
            Outcome::HandlerError => {
                self.rollback(access);
                call.reply();
            }
            Outcome::Panicked(message) => {
                self.rollback(access);
                let key = self.key().clone();
                call.fail(Error::Panicked {
                    key,
                    handler,
                    message,
                });
            }
        }
    }

    /// Makes the slot active: wakes a hibernated state or loads from storage.
    async fn activate(&mut self) -> Result<(), Error> {
        match std::mem::replace(&mut self.slot, Slot::Unloaded) {
            active @ Slot::Active { .. } => {
                self.slot = active;
                Ok(())
            }
            Slot::Hibernated { committed, version } => {
                let state = self.decode(&committed)?;
                self.slot = Slot::Active {
                    state,
                    committed,
                    version,
                };
                Ok(())
            }
            Slot::Unloaded => {
                let mut attempt = 1;
                loop {
                    match self.load().await {
                        Err(Error::Conflict { .. }) if attempt < ACTIVATION_ATTEMPTS => {
                            attempt += 1;
                        }
                        result => return result,
                    }
                }
            }
        }
    }

    /// Loads (or creates) the state, runs the after-load hook and commits what it changed.
    async fn load(&mut self) -> Result<(), Error> {
        let key = self.key().clone();
        let stored = self
            .ctx
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
        let hook = std::panic::AssertUnwindSafe(state.after_load(&self.ctx));
        let hook_result = futures_util::FutureExt::catch_unwind(hook).await;
        let alarms = self.ctx.take_alarm_changes();
        match hook_result {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                return Err(Error::AfterLoad {
                    key,
                    message: error.to_string(),
                });
            }
            Err(_panic) => {
                return Err(Error::AfterLoad {
                    key,
                    message: "after_load panicked".to_owned(),
                });
            }
        }
        let after = self.encode(&state)?;
        let changed = before.as_deref() != Some(after.as_slice());
        let mut committed_version = version;
        if changed || !alarms.is_empty() {
            let write = ObjectWrite {
                key: key.clone(),
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
        match self.commit(write).await {
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
                self.slot = Slot::Unloaded;
                Err(error)
            }
        }
    }

    /// Commits one write, returning it on success.
    async fn commit(&self, write: ObjectWrite) -> Result<ObjectWrite, Error> {
        let storage = self.ctx.runtime().storage();
        match storage.commit(std::slice::from_ref(&write)).await {
            Ok(()) => Ok(write),
            Err(CommitError::Conflict { key, found, .. }) => Err(Error::Conflict { key, found }),
            Err(CommitError::Storage(source)) => Err(Error::Storage {
                key: write.key,
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
                Err(_) => self.slot = Slot::Unloaded,
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

/// An idle transition.
#[derive(Clone, Copy, Debug)]
enum Idle {
    Hibernate,
    Shutdown,
}
