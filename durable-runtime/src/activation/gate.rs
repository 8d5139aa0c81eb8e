//! The output gate: calls that ran on state not yet committed wait here for their reply.
//!
//! An object does not wait for its write to commit before running the next queued call. That
//! call sees the uncommitted state, so its reply is held until every write it depends on has
//! committed. Writes of calls that ran while a write was in flight are coalesced into the
//! object's next write (one write carries the latest state and every alarm change, in order).
//! At most one write per object is in flight, so writes commit in the order the calls ran.
//!
//! If a write fails, every call that saw its state fails with it, and the object reloads its
//! last committed state.

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::activation::call::{Access, Invocation};
use crate::error::{Error, commit_error};
use crate::observe::metrics::CallMetrics;
use crate::storage::{
    AlarmChange, CommitError, FsmChanges, IdempotentReply, KvChange, ObjectKey, ObjectWrite,
};

/// The call outcome recorded when the write a call depends on fails.
pub(crate) const PERSISTENCE_FAILED: &str = "persistence_failed";

/// A finished call whose reply may wait for a commit. Its metrics are recorded when the reply
/// goes out, so that they count the outcome the caller sees and the time until it sees it.
pub(crate) struct Held<O> {
    call: Box<dyn Invocation<O>>,
    /// A runtime error (a panic, an unencodable state) sent instead of the handler's result,
    /// unless the commit fails first.
    error: Option<Error>,
    /// The call's outcome label if the commit succeeds.
    outcome: &'static str,
    /// When the object took the call.
    started: Instant,
}

impl<O: 'static> Held<O> {
    /// A call that replies with the handler's own result.
    pub(crate) fn reply(
        call: Box<dyn Invocation<O>>,
        outcome: &'static str,
        started: Instant,
    ) -> Self {
        Self {
            call,
            error: None,
            outcome,
            started,
        }
    }

    /// A call that replies with `error`.
    pub(crate) fn fail(
        call: Box<dyn Invocation<O>>,
        error: Error,
        outcome: &'static str,
        started: Instant,
    ) -> Self {
        Self {
            call,
            error: Some(error),
            outcome,
            started,
        }
    }

    /// The commit it waited for succeeded (or it waited for none).
    fn release(self, metrics: &CallMetrics, now: Instant) {
        metrics.finished(self.call.handler(), self.outcome, now - self.started);
        match self.error {
            None => self.call.reply(),
            Some(error) => self.call.fail(error),
        }
    }

    /// The commit it waited for failed.
    fn commit_failed(
        self,
        key: &ObjectKey,
        error: &CommitError,
        metrics: &CallMetrics,
        now: Instant,
    ) {
        metrics.finished(self.call.handler(), PERSISTENCE_FAILED, now - self.started);
        // Only a call whose own changes the write carried may have been applied.
        let wrote = self.error.is_none() && self.call.access() == Access::Write;
        self.call.fail(commit_error(key, error, wrote));
    }
}

/// The write in flight and the calls released by it.
pub(crate) struct InFlight<O> {
    pub(crate) outcome: oneshot::Receiver<Result<ObjectWrite, CommitError>>,
    held: Vec<Held<O>>,
}

/// Changes waiting for the in-flight write to finish, and the calls that made or saw them.
pub(crate) struct Next<O> {
    held: Vec<Held<O>>,
    /// Whether the state changed since the in-flight write.
    pub(crate) state_changed: bool,
    pub(crate) alarms: Vec<AlarmChange>,
    /// Key-value changes, in order.
    pub(crate) kv: Vec<KvChange>,
    /// The reply of a call with an idempotency key, stored with the write (boxed: rare, and
    /// the gate is part of every live object's task).
    pub(crate) idempotency: Option<Box<IdempotentReply>>,
    /// FSM inserts and signals, in order.
    pub(crate) fsm: FsmChanges,
}

impl<O> Default for Next<O> {
    fn default() -> Self {
        Self {
            held: Vec::new(),
            state_changed: false,
            alarms: Vec::new(),
            kv: Vec::new(),
            idempotency: None,
            fsm: FsmChanges::default(),
        }
    }
}

impl<O> Next<O> {
    /// Whether it holds changes that need a write.
    pub(crate) fn needs_write(&self) -> bool {
        self.state_changed
            || !self.alarms.is_empty()
            || !self.kv.is_empty()
            || self.idempotency.is_some()
            || !self.fsm.is_empty()
    }
}

/// The gate of one object.
pub(crate) struct Gate<O> {
    pub(crate) in_flight: Option<InFlight<O>>,
    pub(crate) next: Next<O>,
}

impl<O: 'static> Gate<O> {
    pub(crate) fn new() -> Self {
        Self {
            in_flight: None,
            next: Next::default(),
        }
    }

    /// Nothing in flight and nothing held: replies may go out at once.
    pub(crate) fn is_open(&self) -> bool {
        self.in_flight.is_none() && self.next.held.is_empty() && !self.next.needs_write()
    }

    /// How many calls wait for a reply.
    pub(crate) fn held(&self) -> usize {
        self.next.held.len() + self.in_flight.as_ref().map_or(0, |f| f.held.len())
    }

    /// Holds a call until the state it saw is committed.
    pub(crate) fn hold(&mut self, held: Held<O>) {
        if self.next.needs_write() || self.in_flight.is_none() {
            self.next.held.push(held);
        } else {
            // It saw only what the in-flight write carries.
            match &mut self.in_flight {
                Some(in_flight) => in_flight.held.push(held),
                None => self.next.held.push(held),
            }
        }
    }

    /// Replies at once if nothing is pending, else holds the call.
    pub(crate) fn reply_or_hold(&mut self, held: Held<O>, metrics: &CallMetrics) {
        if self.is_open() {
            held.release(metrics, Instant::now());
        } else {
            self.hold(held);
        }
    }

    /// Takes the next group to write, recording it as in flight with `outcome`.
    pub(crate) fn start(&mut self, outcome: oneshot::Receiver<Result<ObjectWrite, CommitError>>) {
        let next = std::mem::take(&mut self.next);
        self.in_flight = Some(InFlight {
            outcome,
            held: next.held,
        });
    }

    /// The in-flight write committed: release its calls. Calls held for the next write with
    /// no change of their own are released too (they saw only committed state now).
    pub(crate) fn committed(&mut self, metrics: &CallMetrics) {
        let now = Instant::now();
        if let Some(in_flight) = self.in_flight.take() {
            for held in in_flight.held {
                held.release(metrics, now);
            }
        }
        if !self.next.needs_write() {
            for held in std::mem::take(&mut self.next.held) {
                held.release(metrics, now);
            }
        }
    }

    /// The in-flight write failed: every held call fails with a copy of `error`, and the
    /// next changes are dropped.
    pub(crate) fn failed(&mut self, key: &ObjectKey, error: &CommitError, metrics: &CallMetrics) {
        let now = Instant::now();
        let in_flight = self.in_flight.take().map(|f| f.held).unwrap_or_default();
        let next = std::mem::take(&mut self.next).held;
        for held in in_flight.into_iter().chain(next) {
            held.commit_failed(key, error, metrics, now);
        }
    }
}
