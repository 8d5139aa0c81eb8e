//! One live object: a task that owns the object's state and handles its calls one at a time.
//!
//! The persistence contract lives here: a `&mut self` handler's state is encoded after it
//! returns; if the bytes changed they are committed before the reply is released; a handler
//! error or panic restores the last committed state; a failed or unknown commit throws the
//! activation away so that the next call reloads what storage holds.

use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::Instrument;

use crate::activation::call::{Access, Outcome, Run};
use crate::activation::gate::{Gate, Held};
use crate::activation::inbox::Inbox;
use crate::activation::registry::{Envelope, Replacement, Residency, TypeEntry};
use crate::commit::codec;
use crate::error::Error;
use crate::object::context::Context;
use crate::object::handle::{Runtime, Shared};
use crate::object::{BoxFuture, DurableObject, ObjectOptions};
use crate::observe::events::Event;
use crate::observe::metrics;
use crate::storage::{CommitError, KvChange, Loaded, ObjectKey, ObjectWrite};

/// How long an idle object keeps its task before it parks it in its inbox. Waking a parked
/// object spawns a task, which costs more than waking a waiting one: an object called more
/// often than this keeps its task, and one idle longer gives its memory back.
pub(crate) const PARK_AFTER: Duration = Duration::from_secs(1);

/// How many times activation retries after losing a creation race to another runtime.
const ACTIVATION_ATTEMPTS: usize = 3;

/// The largest queue capacity: an inbox counts its envelopes in 32 bits.
const MAX_QUEUE_CAPACITY: usize = u32::MAX as usize - 1;

/// The options of one object type with every default applied.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Settings {
    pub(crate) hibernate_after: Option<Duration>,
    pub(crate) shutdown_after: Option<Duration>,
    pub(crate) call_timeout: Option<Duration>,
    pub(crate) queue_capacity: usize,
    pub(crate) kv: crate::kv::KvLimits,
    /// The type's alarm limit, if set; else the runtime's.
    pub(crate) max_alarms: Option<u64>,
}

impl Settings {
    /// Settings from fully resolved options (every default already applied).
    pub(crate) fn from_options(options: ObjectOptions) -> Self {
        Self {
            hibernate_after: options.hibernate_after,
            shutdown_after: options.shutdown_after,
            call_timeout: options.call_timeout,
            queue_capacity: options
                .queue_capacity
                .unwrap_or(1)
                .clamp(1, MAX_QUEUE_CAPACITY),
            kv: {
                let defaults = crate::kv::KvLimits::default();
                crate::kv::KvLimits {
                    max_keys: options.kv_max_keys.unwrap_or(defaults.max_keys),
                    max_value_bytes: options
                        .kv_max_value_bytes
                        .unwrap_or(defaults.max_value_bytes),
                    max_bytes: options.kv_max_bytes.unwrap_or(defaults.max_bytes),
                    cache_bytes: options.kv_cache_bytes.unwrap_or(defaults.cache_bytes),
                }
            },
            max_alarms: options.max_alarms,
        }
    }
}

/// What the instance holds of its object.
enum Slot {
    /// Nothing in memory: the next call loads from storage.
    Unloaded,
    /// Decoded and ready; the decoded state is in the inbox, where a read-only call may run
    /// on it from the caller's task while the object is idle. `committed` is the encoding of
    /// the state as of the last finished call (committed, or carried by the writes the output
    /// gate waits for); `version` is the last committed version (a deleted object's tombstone's,
    /// or 0, while `stored` is false).
    Active {
        committed: Box<[u8]>,
        version: u64,
        /// Whether storage holds the object. One that was never stored (or was deleted) runs
        /// on its default state without a row until a change: its first write carries the
        /// state, whatever changed, since it creates the object.
        stored: bool,
    },
    /// Woken from dormancy (or hibernated while the object could not go dormant): the
    /// committed bytes wake it without a storage read.
    Hibernated { committed: Box<[u8]>, version: u64 },
    /// Started with what storage held, read together with other objects' (the alarm
    /// scheduler reads the objects of a claimed batch at once): the task decodes it as it
    /// starts, without a storage read of its own. (Boxed: rare, and the slot is part of
    /// every live object's task.)
    Fetched(Box<Loaded>),
}

/// What a new instance starts from.
pub(crate) enum Origin {
    /// Nothing yet: the first call loads from storage.
    Storage,
    /// A hibernated object's record, taken from the registry as it wakes: the encoding of its
    /// last committed state and that state's version.
    Dormant { committed: Box<[u8]>, version: u64 },
    /// What storage held when it was read on the instance's behalf.
    Fetched(Loaded),
}

pub(crate) struct Instance<O: DurableObject> {
    entry: Arc<TypeEntry<O>>,
    /// Shared with the registry entry while the object is registered.
    inbox: Arc<Inbox<O>>,
    ctx: Context,
    slot: Slot,
    /// Calls whose replies wait for their writes.
    gate: Gate<O>,
    /// What the object is once this task ends.
    after: After,
    /// The instance left the registry on request (see [`Envelope::Unload`]): the task ends
    /// once the envelope that asked is finished.
    left: bool,
}

/// What an object is once its task ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum After {
    /// Gone from memory (or the task failed): it leaves the live objects.
    Gone,
    /// Dormant: it stays live (holding its slot), the registry keeping its encoded state.
    Dormant,
    /// Parked in its inbox while idle: it stays live as it is, and a task starts again when
    /// something wakes it.
    Parked,
}

impl<O: DurableObject> Drop for Instance<O> {
    fn drop(&mut self) {
        match self.after {
            After::Parked => {}
            After::Dormant => {
                self.inbox.abandon();
                // Still hibernated: the registry's dormant entry counts it from here.
                self.inbox.set_residency(Residency::Unloaded);
            }
            After::Gone => {
                // Calls still queued (the task panicked or was aborted) fail at once.
                self.inbox.abandon();
                self.set_residency(Residency::Unloaded);
                self.runtime().release_live_slot();
                metrics::live_objects::<O>(-1.0);
            }
        }
    }
}

/// What an idle object's task leaves in its inbox when it parks: what the next task needs to
/// take over. (Weak handles: the inbox belongs to the registry, which the runtime owns.)
pub(crate) struct Parked<O: DurableObject> {
    entry: Weak<TypeEntry<O>>,
    runtime: Weak<Shared>,
    slot: Slot,
}

impl<O: DurableObject> Parked<O> {
    /// Starts a task for the object again, from what its last task left.
    pub(crate) fn resume(self, inbox: Arc<Inbox<O>>) {
        let Some(instance) = self.into_instance(inbox) else {
            return;
        };
        if tokio::runtime::Handle::try_current().is_ok() {
            instance.runtime().clone().spawn_task(instance.run());
        }
        // Outside any tokio runtime (its registry dropped there), nothing can run the
        // object: the instance ends here, failing whatever was queued.
    }

    /// Shuts the object down where it is, without a task: a parked object has nothing to
    /// flush. (Runtime shutdown and a shard leaving the node close many objects at once; a
    /// task each would cost a burst of allocations.) The caller removes its registry entry.
    pub(crate) fn leave(self, inbox: Arc<Inbox<O>>) {
        let Some(instance) = self.into_instance(inbox) else {
            return;
        };
        if !instance.runtime().is_closing() {
            metrics::count::<O>(metrics::SHUTDOWNS);
        }
        instance.emit(|key| Event::ShutDown { key });
        // Dropped: it leaves the live objects.
    }

    /// The instance the record was parked from, unless its runtime is gone (then nothing is
    /// left to run, and a parked object has no write pending).
    fn into_instance(self, inbox: Arc<Inbox<O>>) -> Option<Instance<O>> {
        let entry = self.entry.upgrade()?;
        let runtime = Runtime::upgrade(&self.runtime)?;
        Some(Instance::with_slot(runtime, entry, inbox, self.slot))
    }
}

/// Why the task loop woke up.
enum Wake<O> {
    Envelope(Envelope<O>),
    Idle(Idle),
    Closed,
    /// Something changed (a commit, a timer that fired early): look again.
    Again,
}

/// An idle transition.
#[derive(Clone, Copy, Debug)]
enum Idle {
    /// The task parks in the inbox ([`PARK_AFTER`]).
    Park,
    Hibernate,
    Shutdown,
}

impl<O: DurableObject> Instance<O> {
    pub(crate) fn new(
        runtime: Runtime,
        entry: Arc<TypeEntry<O>>,
        inbox: Arc<Inbox<O>>,
        origin: Origin,
    ) -> Self {
        let slot = match origin {
            Origin::Storage => Slot::Unloaded,
            Origin::Dormant { committed, version } => Slot::Hibernated { committed, version },
            Origin::Fetched(stored) => Slot::Fetched(Box::new(stored)),
        };
        inbox.touch(runtime.uptime_millis_at(Instant::now()));
        Self::with_slot(runtime, entry, inbox, slot)
    }

    /// An instance holding `slot`, with a fresh context and an empty output gate.
    fn with_slot(
        runtime: Runtime,
        entry: Arc<TypeEntry<O>>,
        inbox: Arc<Inbox<O>>,
        slot: Slot,
    ) -> Self {
        Self {
            entry,
            ctx: Context::with_root(inbox.root().clone(), runtime),
            inbox,
            slot,
            gate: Gate::new(),
            after: After::Gone,
            left: false,
        }
    }

    fn key(&self) -> &ObjectKey {
        self.ctx.key()
    }

    fn runtime(&self) -> &Runtime {
        self.ctx.runtime()
    }

    /// The task body: handle envelopes until idle long enough to shut down, or until the
    /// inbox closes (eviction, runtime shutdown) and what it queued is handled.
    ///
    /// A block capturing `self` rather than an `async fn`: an `async fn` keeps its arguments
    /// twice in its future (as captured and as moved into the body), and this future is
    /// allocated once per live object.
    #[allow(
        clippy::manual_async_fn,
        reason = "an `async fn` would hold `self` twice"
    )]
    pub(crate) fn run(mut self) -> impl Future<Output = ()> + Send + 'static {
        async move {
            if matches!(self.slot, Slot::Fetched(_)) {
                // Started ahead of an alarm from its claim's batched read: decoded now, before
                // the alarm is due, so that its call finds the state ready without a call of
                // its own to activate it. A failure leaves it unloaded: the alarm's call loads
                // again and reports it.
                let activate = Box::pin(self.activate());
                if let Err(error) = activate.await {
                    tracing::debug!(%error, object = %self.key(), "activating an object ahead of its alarm failed");
                }
            }
            loop {
                match self.next_wake().await {
                    Wake::Envelope(envelope) => {
                        let started = Instant::now();
                        if let Err(envelope) = self.handle_in_place(envelope, started) {
                            // Boxed: a running envelope's state would otherwise be part of
                            // every task's size. One allocation per envelope that waits
                            // buys that space back.
                            let handle = Box::pin(self.handle(envelope, started));
                            handle.await;
                        }
                        let now = Instant::now();
                        self.inbox.set_gate_busy(!self.gate.is_open());
                        self.inbox.finished(self.runtime().uptime_millis_at(now));
                        if self.left {
                            return;
                        }
                    }
                    Wake::Again => {}
                    Wake::Idle(Idle::Park) => {
                        if self.park() {
                            return;
                        }
                    }
                    Wake::Idle(Idle::Hibernate) => {
                        if self.hibernate() {
                            return;
                        }
                    }
                    Wake::Idle(Idle::Shutdown) => {
                        if self.try_shutdown() {
                            return;
                        }
                    }
                    Wake::Closed => {
                        // Cold paths are boxed so that the task stays small. (Boxed in a
                        // statement of its own: a temporary would keep the unboxed future's
                        // space in this one.)
                        let close = Box::pin(self.close());
                        return close.await;
                    }
                }
            }
        }
    }

    /// Arms the idle timer for the next idle transition, if any is due (while nothing waits
    /// for a commit: idle transitions wait until every reply is out). The timer lives across
    /// calls and tasks: it is armed again only when it fires early (the object was used since)
    /// or when a deadline moves earlier, not around every call. (A timer armed no later than
    /// the deadline is kept.) Returns whether a transition is due at all.
    fn arm_idle_timer(&self, park: bool) -> bool {
        let deadline = self
            .gate
            .is_open()
            .then(|| self.next_deadline(park))
            .flatten();
        if let Some((at, _)) = deadline {
            let at = self.runtime().uptime_millis_at(at);
            self.entry.idle_timers.arm(self.runtime(), &self.inbox, at);
        }
        deadline.is_some()
    }

    /// Ends the task, the object idle since [`PARK_AFTER`]: nothing is queued and no reply
    /// waits for a commit. What it holds is parked in its inbox, where the next envelope, its
    /// idle timer or the inbox closing starts a task again. Returns whether the task is to end.
    fn park(&mut self) -> bool {
        if !self.gate.is_open() || self.inbox.has_outstanding() {
            return false;
        }
        // Armed for the next transition, hibernation or shutdown, which a new task makes; not
        // for parking any more (armed for a moment already past, with the object used since
        // in a caller's task, that would only start a task to park again, and again).
        let next = self
            .next_deadline(false)
            .map(|(at, _)| self.runtime().uptime_millis_at(at));
        self.entry
            .idle_timers
            .rearm(self.runtime(), &self.inbox, next);
        let (entry, ctx, slot) = (&self.entry, &self.ctx, &mut self.slot);
        let parked = self.inbox.park(|| Parked {
            entry: Arc::downgrade(entry),
            runtime: ctx.runtime().downgrade(),
            slot: std::mem::replace(slot, Slot::Unloaded),
        });
        if parked {
            self.after = After::Parked;
        }
        parked
    }

    /// Waits for what the task does next. A future of its own, so that the task's future
    /// holds either this wait or a running envelope, never both.
    async fn next_wake(&mut self) -> Wake<O> {
        let idle_timer = self.arm_idle_timer(true);
        // New calls wait while the gate already holds a queue's worth.
        let accepting = self.gate.held() < self.entry.settings.queue_capacity;
        tokio::select! {
            // Commits first (they release replies), then calls, then idle transitions.
            biased;
            outcome = in_flight(&mut self.gate) => {
                self.committed(outcome);
                self.inbox.set_gate_busy(!self.gate.is_open());
                Wake::Again
            }
            envelope = self.inbox.recv(), if accepting => {
                envelope.map_or(Wake::Closed, Wake::Envelope)
            }
            // Computed again: reads in callers' tasks may have used the object meanwhile.
            () = self.inbox.timer(), if idle_timer => match self.next_deadline(true) {
                // The timer was armed for an earlier deadline: the object was used since
                // (armed again on the next wait).
                Some((at, _)) if at > Instant::now() => Wake::Again,
                Some((_, transition)) => Wake::Idle(transition),
                None => Wake::Again,
            },
        }
    }

    /// The inbox closed and is empty: evicted to make room (the registry dropped the entry
    /// while idle), or the runtime shuts down. Leaves once every write is committed.
    async fn close(mut self) {
        self.flush().await;
        let id = self.key().object_id.clone();
        self.entry.deregister(&id, &self.inbox);
        if !self.runtime().is_closing() {
            metrics::count::<O>(metrics::SHUTDOWNS);
        }
        self.emit(|key| Event::ShutDown { key });
    }

    /// Waits until every held reply is out: the in-flight write and the ones after it.
    async fn flush(&mut self) {
        while self.gate.in_flight.is_some() {
            let outcome = in_flight(&mut self.gate).await;
            self.committed(outcome);
        }
        self.inbox.set_gate_busy(false);
    }

    /// The in-flight write finished: release or fail the calls it gates, then write what
    /// accumulated meanwhile.
    fn committed(&mut self, outcome: Result<ObjectWrite, CommitError>) {
        match outcome {
            Ok(write) => {
                self.runtime().alarms_committed(&write.alarms);
                self.settle_alarm_changes(Some(&write));
                if !write.kv.is_empty() {
                    self.inbox.root().kv().committed();
                }
                if let Slot::Active {
                    version, stored, ..
                } = &mut self.slot
                {
                    *version = write.new_version();
                    *stored = true;
                }
                self.gate.committed(&self.entry.call_metrics);
                if self.gate.next.needs_write() {
                    self.start_write();
                } else {
                    self.inbox.root().durability().committed();
                }
            }
            Err(error) => {
                // Failed or unknown outcome: every call that saw this state fails, and
                // storage is the truth from now on.
                metrics::count::<O>(metrics::PERSISTENCE_FAILURES);
                self.runtime().commit_failed(&error);
                let key = self.key().clone();
                self.inbox.root().durability().failed(&error);
                self.gate.failed(&key, &error, &self.entry.call_metrics);
                // Neither this write nor the ones queued behind it will be committed.
                self.settle_alarm_changes(None);
                self.set_slot_unloaded();
            }
        }
    }

    /// Submits the gate's pending changes as the object's next write.
    fn start_write(&mut self) {
        let Slot::Active {
            committed,
            version,
            stored,
        } = &self.slot
        else {
            return;
        };
        let mut kv = std::mem::take(&mut self.gate.next.kv);
        if !kv.is_empty() {
            let limits = self.entry.settings.kv;
            kv.push(KvChange::Limit {
                max_keys: limits.max_keys,
                max_bytes: limits.max_bytes,
            });
            self.inbox.root().kv().submitted();
        }
        let mut alarms = std::mem::take(&mut self.gate.next.alarms);
        crate::alarms::limit::check_sets(&mut alarms, self.max_alarms());
        let write = ObjectWrite {
            key: self.ctx.key().clone(),
            expected_version: *version,
            state: (self.gate.next.state_changed || !*stored).then(|| committed.to_vec()),
            alarms,
            kv,
            idempotency: self.gate.next.idempotency.take().map(|reply| *reply),
            fsm: std::mem::take(&mut self.gate.next.fsm),
        };
        let outcome = self.ctx.runtime().committer().submit(write);
        self.gate.start(outcome);
    }

    /// The next idle transition and when it is due, if any; parking among them with `park`
    /// (a task that parks arms its timer for what comes after).
    fn next_deadline(&self, park: bool) -> Option<(Instant, Idle)> {
        let settings = &self.entry.settings;
        // Counted from the last call, whichever task ran it.
        let last_used = self.runtime().instant_at_uptime(self.inbox.last_used());
        // A deadline past what `Instant` can hold is never reached.
        let after = |after: Option<Duration>| after.and_then(|after| last_used.checked_add(after));
        let hibernate = match self.slot {
            Slot::Active { stored: true, .. } => {
                after(settings.hibernate_after).map(|at| (at, Idle::Hibernate))
            }
            // Nothing decoded to keep: started ahead of a call that never came (its alarm was
            // revoked), so what was read may go stale; or unloaded after a deletion, a failed
            // load or commit, or a timeout; or not stored, so that its default state is all
            // there is to keep. Either way the task goes.
            Slot::Active { stored: false, .. } | Slot::Fetched(_) | Slot::Unloaded => {
                after(settings.hibernate_after).map(|at| (at, Idle::Shutdown))
            }
            Slot::Hibernated { .. } => None,
        };
        let shutdown = after(settings.shutdown_after).map(|at| (at, Idle::Shutdown));
        let transition = match (hibernate, shutdown) {
            (Some(h), Some(s)) => Some(if h.0 < s.0 { h } else { s }),
            (h, s) => h.or(s),
        };
        if !park {
            return transition;
        }
        // Parking comes first only if it is strictly earlier (the other two end the task too)
        // and the other is not already due (parking would only wake the object again for it).
        match (after(Some(PARK_AFTER)), transition) {
            (Some(park), Some((at, _))) if park < at && at > Instant::now() => {
                Some((park, Idle::Park))
            }
            (Some(park), None) => Some((park, Idle::Park)),
            (_, transition) => transition,
        }
    }

    /// Drops the decoded state. The object goes dormant: the registry keeps only the encoded
    /// state and this task ends (returns true). If that cannot be done at this moment (a call
    /// is already waiting, the runtime shuts down), the task keeps the encoded state instead.
    fn hibernate(&mut self) -> bool {
        let Slot::Active {
            committed,
            version,
            stored: true,
        } = &self.slot
        else {
            return false;
        };
        // Counted as hibernated from here, whether the object goes dormant or keeps its task.
        self.set_residency(Residency::Hibernated);
        let runtime = self.ctx.runtime();
        let idle_since = self.inbox.last_used();
        let dormant = self.entry.make_dormant(
            runtime,
            &self.ctx.key().object_id,
            &self.inbox,
            committed,
            *version,
            idle_since,
        );
        self.inbox.clear_state();
        self.inbox.root().kv().reset();
        if dormant {
            self.slot = Slot::Unloaded;
            self.after = After::Dormant;
        } else if let Slot::Active {
            committed, version, ..
        } = std::mem::replace(&mut self.slot, Slot::Unloaded)
        {
            self.slot = Slot::Hibernated { committed, version };
        }
        metrics::count::<O>(metrics::HIBERNATIONS);
        self.emit(|key| Event::Hibernated { key });
        dormant
    }

    /// Records what the object holds in memory, keeping the counts of active and hibernated
    /// objects exact: each moves only when the object enters or leaves its state.
    fn set_residency(&self, residency: Residency) {
        let before = self.inbox.set_residency(residency);
        metrics::residency_changed::<O>(before, residency);
    }

    fn emit(&self, event: impl FnOnce(ObjectKey) -> Event) {
        self.runtime().emit(|| event(self.key().clone()));
    }

    /// Leaves the registry if no call is waiting. Returns whether the instance may end.
    fn try_shutdown(&mut self) -> bool {
        let id = &self.ctx.key().object_id;
        let removed = self.entry.deregister(id, &self.inbox);
        if removed {
            metrics::count::<O>(metrics::SHUTDOWNS);
            self.emit(|key| Event::ShutDown { key });
        }
        removed
    }

    fn set_slot_unloaded(&mut self) {
        self.slot = Slot::Unloaded;
        self.inbox.clear_state();
        self.inbox.root().kv().reset();
        self.set_residency(Residency::Unloaded);
    }

    /// Handles one envelope, taken at `started`.
    async fn handle(&mut self, envelope: Envelope<O>, started: Instant) {
        match envelope {
            Envelope::Call(call) => {
                let handler = call.handler();
                self.handle_call(call, started)
                    .instrument(call_span::<O>(handler))
                    .await;
            }
            Envelope::Delete(reply) => {
                let delete = Box::pin(self.delete(reply));
                delete.await;
            }
            Envelope::Unload { leave, reply } => {
                let unload = Box::pin(self.unload(leave));
                unload.await;
                let _ = reply.send(Ok(()));
            }
            Envelope::Replace(replacement) => {
                let Replacement {
                    state,
                    expected_version,
                    reply,
                } = *replacement;
                let replace = Box::pin(self.replace(state, expected_version));
                let _ = reply.send(replace.await);
            }
        }
    }

    /// Drops what the object holds in memory once its writes are committed: the next call
    /// loads from storage. With `leave`, the instance also leaves the registry (unless a call
    /// is already queued behind this envelope: it then stays, unloaded, and runs that call).
    async fn unload(&mut self, leave: bool) {
        self.flush().await;
        self.set_slot_unloaded();
        if leave && self.try_shutdown() {
            self.left = true;
        }
    }

    /// Commits `state` as the object's state if storage holds `expected_version` (checked by
    /// the commit itself, so another runtime's writes count), after the object's own writes.
    /// Whatever the outcome, the object then holds nothing in memory: the next call loads
    /// what storage holds, and runs `after_load` on it.
    async fn replace(&mut self, state: O, expected_version: u64) -> Result<u64, Error> {
        self.flush().await;
        let key = self.key().clone();
        let encoded = self.encode(&state)?;
        drop(state);
        codec::check_round_trip::<O>(&encoded).map_err(|message| Error::Encode {
            key: key.clone(),
            message,
        })?;
        let write = ObjectWrite {
            key,
            expected_version,
            state: Some(encoded),
            alarms: Vec::new(),
            kv: Vec::new(),
            idempotency: None,
            fsm: Default::default(),
        };
        let result = self.commit(write).await.map(|write| write.new_version());
        if matches!(result, Err(Error::Storage { .. })) {
            metrics::count::<O>(metrics::PERSISTENCE_FAILURES);
        }
        self.set_slot_unloaded();
        result
    }

    async fn delete(&mut self, reply: oneshot::Sender<Result<bool, Error>>) {
        self.flush().await;
        let key = self.key().clone();
        let claims = self.runtime().scheduler().claims();
        claims.revoke_all(&key);
        let result = self.runtime().storage().delete(&key).await;
        // A failed delete left the alarms, and their claims, in storage.
        let unreleased = claims.settle(&key, None, result.is_ok());
        crate::activation::scheduler::release_claims(self.runtime(), unreleased);
        // Whatever happened, storage is the truth from now on.
        self.set_slot_unloaded();
        let result = match result {
            Ok(existed) => {
                self.emit(|key| Event::Deleted { key });
                Ok(existed)
            }
            Err(source) => {
                metrics::count::<O>(metrics::PERSISTENCE_FAILURES);
                Err(Error::Storage { key, source })
            }
        };
        let _ = reply.send(result);
    }

    /// Runs one call, taken at `started`.
    async fn handle_call(
        &mut self,
        mut call: Box<dyn crate::activation::call::Invocation<O>>,
        started: Instant,
    ) {
        let handler = call.handler();
        if call.idempotency_key().is_some() {
            let Some(unanswered) = self.replay(call, started).await else {
                return;
            };
            call = unanswered;
        }
        // Cluster mode: a read answers from memory, so it runs only while this node still
        // serves the object's shard (a write is fenced in its commit instead).
        if call.access() == Access::Read
            && let Some(node) = self.runtime().cluster_node()
            && let Err(error) = node.admit(O::TYPE_NAME, &self.key().object_id)
        {
            self.entry
                .call_metrics
                .finished(handler, "not_owner", started.elapsed());
            call.fail(error);
            return;
        }
        let activated = if call.access() == Access::Read && self.runtime().validates_reads() {
            self.activate_validated().await
        } else {
            self.activate().await
        };
        if let Err(error) = activated {
            self.entry
                .call_metrics
                .finished(handler, "activation_failed", started.elapsed());
            call.fail(error);
            return;
        }
        // Taken out of the inbox while the handler runs (it may wait): calls from other tasks
        // find the object busy meanwhile.
        let Some(mut state) = self.inbox.state().take() else {
            unreachable!("an activated object's state is in its inbox");
        };
        // A context of the handler's own, so that the task may commit while the handler runs.
        let ctx = self.ctx.fork();
        let outcome = match self.run_call(&ctx, &mut call, &mut state) {
            Run::Finished(outcome) => Some(outcome),
            Run::Running(future) => self.run_committing(future).await,
        };
        self.ctx.absorb(ctx);
        // A write the handler's state came from failed while it ran: the slot is unloaded.
        let failed = !matches!(self.slot, Slot::Active { .. });
        if outcome.is_some() && !failed {
            *self.inbox.state() = Some(state);
        }
        let Some(outcome) = outcome else {
            // The handler was cut off at an arbitrary await point: its in-memory changes
            // cannot be trusted, so the activation goes, once the writes of the calls before
            // it (which carry their own encoded state) are committed.
            self.ctx.discard_changes();
            let flush = Box::pin(self.flush());
            flush.await;
            self.set_slot_unloaded();
            let key = self.key().clone();
            self.entry
                .call_metrics
                .finished(handler, "timeout", started.elapsed());
            call.fail(Error::Timeout { key, handler });
            return;
        };
        if failed {
            // Whatever the handler did rests on state that will never be committed.
            self.ctx.discard_changes();
            let key = self.key().clone();
            let Some(error) = self.inbox.root().durability().failure(&key) else {
                unreachable!("the slot is unloaded under a running handler only by a failed write");
            };
            let held = Held::fail(
                call,
                error,
                crate::activation::gate::PERSISTENCE_FAILED,
                started,
            );
            self.gate.reply_or_hold(held, &self.entry.call_metrics);
            return;
        }
        self.settle_call(call, outcome, started);
    }

    /// A call with an idempotency key: once every earlier write of the object is committed
    /// (so that storage holds every reply this object stored), answers it from the reply
    /// stored under its key if there is one that has not expired. Returns the call if it was
    /// not answered.
    async fn replay(
        &mut self,
        call: Box<dyn crate::activation::call::Invocation<O>>,
        started: Instant,
    ) -> Option<Box<dyn crate::activation::call::Invocation<O>>> {
        let flush = Box::pin(self.flush());
        flush.await;
        let idempotency_key = call.idempotency_key()?;
        let key = self.key().clone();
        let handler = call.handler();
        let now = self.runtime().now();
        let stored = self
            .runtime()
            .storage()
            .load_idempotent_reply(&key, idempotency_key)
            .await;
        let outcome = match stored {
            Ok(Some(stored)) if stored.expires_at > now => {
                call.replay(&key, stored);
                "replayed"
            }
            Ok(_) => return Some(call),
            Err(source) => {
                call.fail(Error::Storage { key, source });
                "storage_failed"
            }
        };
        self.entry
            .call_metrics
            .finished(handler, outcome, started.elapsed());
        None
    }

    /// Runs an `async` handler to its end while the object's earlier writes commit: the
    /// replies they hold go out as each commits, and the handler's calls to other objects,
    /// which wait for those writes, can go on. If one fails, the slot is unloaded under the
    /// running handler.
    async fn run_committing(&mut self, future: BoxFuture<'_, Option<Outcome>>) -> Option<Outcome> {
        let mut future = future;
        loop {
            tokio::select! {
                biased;
                outcome = &mut future => return outcome,
                commit = in_flight(&mut self.gate) => {
                    self.committed(commit);
                    self.inbox.set_gate_busy(!self.gate.is_open());
                }
            }
        }
    }

    /// Handles a call of a synchronous handler to an active object without a future: nothing
    /// in it waits. Returns the envelope if it needs [`handle`](Self::handle).
    fn handle_in_place(
        &mut self,
        envelope: Envelope<O>,
        started: Instant,
    ) -> Result<(), Envelope<O>> {
        let mut call = match envelope {
            Envelope::Call(call)
                if call.runs_in_place()
                    && matches!(self.slot, Slot::Active { .. })
                    && !(call.access() == Access::Read && self.runtime().validates_reads()) =>
            {
                call
            }
            other => return Err(other),
        };
        let handler = call.handler();
        let _entered = call_span::<O>(handler).entered();
        let outcome = {
            let mut state = self.inbox.state();
            let Some(state) = state.as_mut() else {
                unreachable!("an active object's state is in its inbox");
            };
            let Run::Finished(outcome) = self.run_call(&self.ctx, &mut call, state) else {
                unreachable!("a call that runs in place finishes at once");
            };
            outcome
        };
        self.settle_call(call, outcome, started);
        Ok(())
    }

    /// Starts the handler of `call` on the active state, with `ctx` as its context.
    fn run_call<'a>(
        &self,
        ctx: &'a Context,
        call: &'a mut Box<dyn crate::activation::call::Invocation<O>>,
        state: &'a mut O,
    ) -> Run<'a> {
        ctx.set_writable(call.access() == Access::Write);
        let chain = call.chain().enter(self.inbox.root());
        call.run(state, ctx, chain, self.entry.settings.call_timeout)
    }

    /// Stages the write of a finished call, or rolls it back, and hands its reply to the gate,
    /// which records the call's metrics when the reply goes out.
    fn settle_call(
        &mut self,
        call: Box<dyn crate::activation::call::Invocation<O>>,
        outcome: Outcome,
        started: Instant,
    ) {
        let access = call.access();
        // A call with an idempotency key stores its reply (a value or the handler's own error)
        // with its write: a read or a failed call then writes too.
        let expires_at = self.runtime().now() + self.runtime().idempotency_retention();
        let stored = match &outcome {
            Outcome::Panicked(_) => None,
            _ => call.stored_reply(expires_at),
        };
        let stored = match stored {
            Some(Ok(reply)) => Some(reply),
            None => None,
            Some(Err(message)) => {
                self.rollback(access);
                let key = self.key().clone();
                let message = format!("the reply cannot be stored: {message}");
                let held = Held::fail(
                    call,
                    Error::Encode { key, message },
                    "encode_failed",
                    started,
                );
                self.gate.reply_or_hold(held, &self.entry.call_metrics);
                return;
            }
        };
        let replying = stored.is_some();
        self.gate.next.idempotency = stored.map(Box::new);
        let held = match outcome {
            Outcome::Returned if access == Access::Read => {
                self.ctx.discard_changes();
                if replying {
                    self.stage_reply();
                }
                Held::reply(call, "ok", started)
            }
            Outcome::Returned => match self.stage_write() {
                Ok(()) => Held::reply(call, "ok", started),
                Err(error) => {
                    self.gate.next.idempotency = None;
                    Held::fail(call, error, "encode_failed", started)
                }
            },
            Outcome::HandlerError => {
                self.rollback(access);
                if replying {
                    self.stage_reply();
                }
                Held::reply(call, "handler_error", started)
            }
            Outcome::Panicked(message) => {
                self.rollback(access);
                let key = self.key().clone();
                let handler = call.handler();
                let error = Error::Panicked {
                    key,
                    handler,
                    message,
                };
                Held::fail(call, error, "panicked", started)
            }
        };
        self.gate.reply_or_hold(held, &self.entry.call_metrics);
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
                *self.inbox.state() = Some(state);
                self.slot = Slot::Active {
                    committed,
                    version,
                    stored: true,
                };
                self.set_residency(Residency::Active);
                metrics::woken::<O>(started.elapsed());
                self.emit(|key| Event::Woken { key });
                Ok(())
            }
            // Boxed: a cold path, kept out of every live task's size.
            Slot::Unloaded => {
                let load = Box::pin(self.activate_from_storage(None));
                load.await
            }
            Slot::Fetched(stored) => {
                let load = Box::pin(self.activate_from_storage(Some(*stored)));
                load.await
            }
        }
    }

    /// [`activate`](Self::activate) for a validated read: the state is what storage holds
    /// now. Unless it was just loaded, the stored version is checked (once the object's own
    /// writes are committed, so that the version in memory is known) and a state another
    /// writer has replaced is thrown away and loaded again.
    async fn activate_validated(&mut self) -> Result<(), Error> {
        self.flush().await;
        let loads_now = matches!(self.slot, Slot::Unloaded);
        self.activate().await?;
        let Slot::Active { version, .. } = self.slot else {
            return Ok(());
        };
        if loads_now {
            return Ok(());
        }
        let key = self.key().clone();
        let stored = self
            .runtime()
            .versions()
            .version(key.clone())
            .await
            .map_err(|source| {
                metrics::count::<O>(metrics::PERSISTENCE_FAILURES);
                Error::Storage { key, source }
            })?;
        // Nothing stored counts as version 0, the version of an object never written.
        if stored.unwrap_or(0) == version {
            return Ok(());
        }
        tracing::debug!(
            object_type = O::TYPE_NAME,
            version,
            stored = stored.unwrap_or(0),
            "another writer replaced the state: reloading before the read"
        );
        metrics::count::<O>(metrics::STALE_RELOADS);
        self.set_slot_unloaded();
        self.activate().await
    }

    /// Loads the state, from `fetched` if it was read already, else from storage; a lost
    /// creation race is retried with a fresh read.
    async fn activate_from_storage(&mut self, mut fetched: Option<Loaded>) -> Result<(), Error> {
        let span = tracing::debug_span!("durable.load", object_type = O::TYPE_NAME);
        // What a failed write left uncommitted is gone: the state loaded now is what storage holds.
        self.inbox.root().durability().reloaded();
        let mut attempt = 1;
        loop {
            match self.load(fetched.take()).instrument(span.clone()).await {
                Err(Error::Conflict { .. }) if attempt < ACTIVATION_ATTEMPTS => {
                    attempt += 1;
                }
                Err(error) => {
                    if matches!(error, Error::Storage { .. }) {
                        metrics::count::<O>(metrics::PERSISTENCE_FAILURES);
                    }
                    return Err(error);
                }
                Ok(()) => {
                    self.set_residency(Residency::Active);
                    metrics::count::<O>(metrics::ACTIVATIONS);
                    return Ok(());
                }
            }
        }
    }

    /// Loads the state (the default one if none is stored), from `fetched` if it was read
    /// already, runs the after-load hook and commits what it changed. An object not stored
    /// stays so unless the hook changed its state or scheduled alarms.
    async fn load(&mut self, fetched: Option<Loaded>) -> Result<(), Error> {
        let key = self.key().clone();
        // The read and the hook's commit are boxed: held inline they would make this future,
        // boxed for every activation, too large for the allocator's fast path, and an object
        // started from a state read ahead (a burst of alarms) needs neither.
        let loaded = match fetched {
            Some(loaded) => loaded,
            None => Box::pin(self.runtime().loader().load(key.clone()))
                .await
                .map_err(|source| Error::Storage {
                    key: key.clone(),
                    source,
                })?,
        };
        // Not stored (never, or deleted): the first write expects the tombstone's version.
        let version = loaded.version();
        let (mut state, stored) = match loaded {
            Loaded::Object(stored) => (self.decode(&stored.state)?, true),
            Loaded::Absent | Loaded::Deleted { .. } => (O::default(), false),
        };
        let before = self.encode(&state)?;
        self.ctx.set_writable(true);
        let hook = std::panic::AssertUnwindSafe(state.after_load(&self.ctx));
        let hook_result = futures_util::FutureExt::catch_unwind(hook).await;
        let alarms = self.ctx.take_alarm_changes();
        let kv = self.ctx.take_kv();
        let fsm = self.ctx.take_fsm();
        let message = match hook_result {
            Ok(Ok(())) => None,
            Ok(Err(error)) => Some(error.to_string()),
            Err(_panic) => Some("after_load panicked".to_owned()),
        };
        if let Some(message) = message {
            return Err(Error::AfterLoad { key, message });
        }
        let after = self.encode(&state)?;
        let changed = before != after;
        let mut committed_version = version;
        let mut now_stored = stored;
        if changed || !alarms.is_empty() || !kv.is_empty() || !fsm.is_empty() {
            // Settled by `commit`, whatever its outcome.
            self.runtime().scheduler().claims().revoke(&key, &alarms);
            // The hook's changes are pending like a call's until committed.
            let mut kv = if kv.is_empty() {
                Vec::new()
            } else {
                self.inbox.root().kv().stage(kv)
            };
            if !kv.is_empty() {
                let limits = self.entry.settings.kv;
                kv.push(KvChange::Limit {
                    max_keys: limits.max_keys,
                    max_bytes: limits.max_bytes,
                });
                self.inbox.root().kv().submitted();
            }
            let mut alarms = alarms;
            crate::alarms::limit::check_sets(&mut alarms, self.max_alarms());
            let write = ObjectWrite {
                key,
                expected_version: version,
                state: (changed || !stored).then(|| after.clone()),
                alarms,
                kv,
                idempotency: None,
                fsm,
            };
            match Box::pin(self.commit(write)).await {
                Ok(write) if !write.kv.is_empty() => self.inbox.root().kv().committed(),
                Ok(_) => {}
                Err(error) => {
                    self.inbox.root().kv().reset();
                    return Err(error);
                }
            }
            committed_version += 1;
            now_stored = true;
        }
        *self.inbox.state() = Some(state);
        self.slot = Slot::Active {
            // Without the encoder's spare capacity.
            committed: after.into_boxed_slice(),
            version: committed_version,
            stored: now_stored,
        };
        self.emit(|key| {
            if !stored {
                Event::Created { key }
            } else {
                Event::Loaded { key }
            }
        });
        Ok(())
    }

    /// Submits the reply of a call with an idempotency key, staged in the gate, unless a write
    /// is in flight (then it joins the next one).
    fn stage_reply(&mut self) {
        self.inbox.root().durability().staged();
        if self.gate.in_flight.is_none() {
            self.start_write();
        }
    }

    /// Records what a `&mut self` call changed (state and alarms) in the gate, and submits
    /// a write unless one is in flight (then it joins the next one).
    fn stage_write(&mut self) -> Result<(), Error> {
        let alarms = self.ctx.take_alarm_changes();
        let kv = self.ctx.take_kv();
        let fsm = self.ctx.take_fsm();
        let Slot::Active { committed, .. } = &mut self.slot else {
            unreachable!("stage_write runs on an active slot");
        };
        let encoded = match self.inbox.state().as_ref().map(codec::encode) {
            Some(encoded) => encoded,
            None => unreachable!("an active object's state is in its inbox"),
        };
        // A new encoding that would not decode back is refused like one that failed.
        let staged = encoded.and_then(|encoded| {
            let changed = encoded[..] != committed[..];
            if changed {
                codec::check_round_trip::<O>(&encoded)?;
            }
            Ok((encoded, changed))
        });
        let (encoded, changed) = match staged {
            Ok(staged) => staged,
            Err(message) => {
                let key = self.key().clone();
                self.rollback(Access::Write);
                return Err(Error::Encode { key, message });
            }
        };
        if !changed
            && alarms.is_empty()
            && kv.is_empty()
            && fsm.is_empty()
            && self.gate.next.idempotency.is_none()
        {
            return Ok(());
        }
        if changed {
            // Kept until the next change: without the encoder's spare capacity.
            *committed = encoded.into_boxed_slice();
        }
        if !alarms.is_empty() {
            // Before the write commits: a later call of this object (or a held alarm about to
            // fire in it) must already see the claim gone.
            self.ctx
                .runtime()
                .scheduler()
                .claims()
                .revoke(self.ctx.key(), &alarms);
        }
        self.gate.next.state_changed |= changed;
        self.gate.next.alarms.extend(alarms);
        self.gate.next.fsm.append(fsm);
        if !kv.is_empty() {
            let changes = self.inbox.root().kv().stage(kv);
            self.gate.next.kv.extend(changes);
        }
        self.inbox.root().durability().staged();
        if self.gate.in_flight.is_none() {
            self.start_write();
        }
        Ok(())
    }

    /// The write carrying staged alarm changes is settled (`None`: failed, with every write
    /// after it): claim queries from now on see storage as it left it, and the claims a
    /// failed write revoked are released, so that the unchanged alarms fire at their time.
    fn settle_alarm_changes(&self, committed: Option<&ObjectWrite>) {
        let count = match committed {
            Some(write) => match crate::alarms::claims::revoking(&write.alarms) {
                0 => return,
                count => Some(count),
            },
            None => None,
        };
        let unreleased =
            self.runtime()
                .scheduler()
                .claims()
                .settle(self.key(), count, committed.is_some());
        crate::activation::scheduler::release_claims(self.runtime(), unreleased);
    }

    /// The most alarms an object of this type may have.
    fn max_alarms(&self) -> u64 {
        crate::alarms::limit::max_alarms(self.entry.settings.max_alarms, self.runtime())
    }

    /// Commits one write, returning it on success.
    async fn commit(&mut self, write: ObjectWrite) -> Result<ObjectWrite, Error> {
        let outcome = self.runtime().committer().commit(write).await;
        self.settle_alarm_changes(outcome.as_ref().ok());
        if let Err(error) = &outcome {
            self.runtime().commit_failed(error);
        }
        match outcome {
            Ok(write) => {
                self.runtime().alarms_committed(&write.alarms);
                Ok(write)
            }
            Err(CommitError::Conflict { key, found, .. }) => Err(Error::Conflict { key, found }),
            Err(
                error @ (CommitError::KvLimit { .. }
                | CommitError::AlarmLimit { .. }
                | CommitError::Fsm { .. }),
            ) => Err(crate::error::commit_error(self.key(), &error, false)),
            Err(CommitError::Storage(source))
                if source.kind() == crate::storage::StorageErrorKind::Fenced =>
            {
                Err(crate::error::fenced(self.key()))
            }
            Err(CommitError::Storage(source)) => Err(Error::Storage {
                key: self.key().clone(),
                source,
            }),
        }
    }

    /// Restores the last committed state after a failed `&mut self` call.
    fn rollback(&mut self, access: Access) {
        self.ctx.discard_changes();
        if access == Access::Read {
            return;
        }
        if let Slot::Active { committed, .. } = &self.slot {
            match codec::decode::<O>(committed) {
                Ok(restored) => *self.inbox.state() = Some(restored),
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

/// The span of one call, from the moment the object takes it to its reply.
pub(crate) fn call_span<O: DurableObject>(handler: &'static str) -> tracing::Span {
    tracing::debug_span!("durable.call", object_type = O::TYPE_NAME, handler)
}

/// The outcome of the gate's in-flight write; pending forever when none is in flight.
/// (A `poll_fn` rather than an `async fn`: it is part of every live task's future.)
fn in_flight<O: 'static>(
    gate: &mut Gate<O>,
) -> impl Future<Output = Result<ObjectWrite, CommitError>> + '_ {
    std::future::poll_fn(move |cx| match &mut gate.in_flight {
        Some(in_flight) => std::pin::Pin::new(&mut in_flight.outcome)
            .poll(cx)
            .map(|outcome| outcome.unwrap_or_else(|_| Err(crate::commit::committer::stopped()))),
        None => std::task::Poll::Pending,
    })
}
