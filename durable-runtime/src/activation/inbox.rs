//! One live object's inbox: its queue of envelopes, its decoded state, what the registry
//! knows of its activity, and where its task is.
//!
//! An object has a task while it works. Once it has been idle for a while (nothing queued, no
//! reply waiting for a commit, for [`PARK_AFTER`](crate::activation::instance::PARK_AFTER)) its
//! task parks what it holds in the inbox and ends; whatever wakes it next (an envelope, its idle
//! timer, the inbox closing) starts a task from that record. An idle live object so costs its
//! inbox and its state, not a task.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Poll, Waker};

use crate::activation::instance::Parked;
use crate::activation::registry::{Envelope, Residency};
use crate::object::DurableObject;
use crate::object::chain::Root;
use crate::storage::ObjectKey;

/// Why an envelope was not enqueued.
pub(crate) enum SendError<O> {
    /// The inbox holds its capacity.
    Full(Envelope<O>),
    /// The inbox takes nothing more: its instance is ending.
    Closed(Envelope<O>),
}

/// One live object's queue of envelopes, its decoded state and what the registry knows of its
/// activity, shared by its registry entry and its task. (A plain queue under a lock: far
/// smaller than a channel, which preallocates a block of slots and pads its fields to cache
/// lines.)
pub(crate) struct Inbox<O: DurableObject> {
    queue: Mutex<Queue<O>>,
    /// The decoded state while the object is active, `None` otherwise. Under a lock of its own
    /// so that a read-only call can run on it from the caller's task while the object is idle
    /// ([`crate::activation::direct`]); whoever runs a call holds the lock (or has taken the state out).
    state: Mutex<Option<O>>,
    /// The object's key, as the root of the call chains its handlers run in.
    root: Root,
    residency: AtomicU8,
    /// Envelopes enqueued and not yet fully handled. Incremented under the entry's read
    /// guard, so a zero seen under its write guard means the object is idle. (At most the
    /// queue's capacity, which is kept below `u32::MAX`, plus the one running.)
    outstanding: AtomicU32,
    /// When the object last finished a call (or started), in milliseconds of the runtime's
    /// uptime, rounded up: the idle timer and the least-recently-used order count from it.
    last_used: AtomicU64,
    /// Whether replies wait in the object's output gate (writes not yet committed).
    gate_busy: AtomicBool,
    /// Nothing more is accepted; the task ends once the queue is empty. Read and written only
    /// under the queue's lock (kept out of the queue, where it would cost a padded word).
    closed: AtomicBool,
    /// The deadline (uptime milliseconds) the object's idle timer is armed for among its
    /// type's [`IdleTimers`](crate::activation::idle::IdleTimers); `u64::MAX` if none.
    timer_at: AtomicU64,
    /// The armed timer fired and the task has not seen it yet. Read and written only under
    /// the queue's lock, like `closed`.
    timer_fired: AtomicBool,
}

struct Queue<O: DurableObject> {
    envelopes: Envelopes<O>,
    task: Task<O>,
}

/// Where the object's task is.
enum Task<O: DurableObject> {
    /// Running (or ended, or about to poll the inbox): nothing to wake.
    Running,
    /// Waiting for the next envelope or its idle timer.
    Waiting(Waker),
    /// Ended while the object was idle, leaving what it held: the next wake-up starts a task
    /// from it.
    Parked(Parked<O>),
}

impl<O: DurableObject> Task<O> {
    /// Wakes the task taken out of a queue (outside the queue's lock: a parked one starts).
    fn wake(self, inbox: &Arc<Inbox<O>>) {
        match self {
            Self::Running => {}
            Self::Waiting(waker) => waker.wake(),
            Self::Parked(parked) => parked.resume(Arc::clone(inbox)),
        }
    }
}

impl<O: DurableObject> Queue<O> {
    /// Registers the polling task's waker (the task is running: it cannot be parked).
    fn register(&mut self, waker: &Waker) {
        match &self.task {
            Task::Waiting(registered) if registered.will_wake(waker) => {}
            _ => self.task = Task::Waiting(waker.clone()),
        }
    }

    /// Takes the task to wake, leaving it counted as running.
    fn take_task(&mut self) -> Task<O> {
        std::mem::replace(&mut self.task, Task::Running)
    }
}

/// A first-in first-out queue whose first envelope is held inline: an object mostly has one
/// envelope queued at a time, and a `VecDeque` keeps the buffer of its first push (four
/// envelopes) for the object's whole life.
struct Envelopes<O> {
    first: Option<Envelope<O>>,
    /// The ones behind `first` (empty while `first` is).
    rest: VecDeque<Envelope<O>>,
}

impl<O> Default for Envelopes<O> {
    fn default() -> Self {
        Self {
            first: None,
            rest: VecDeque::new(),
        }
    }
}

impl<O> Envelopes<O> {
    fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.rest.len()
    }

    fn is_empty(&self) -> bool {
        self.first.is_none()
    }

    fn push_back(&mut self, envelope: Envelope<O>) {
        if self.first.is_none() {
            self.first = Some(envelope);
        } else {
            self.rest.push_back(envelope);
        }
    }

    fn pop_front(&mut self) -> Option<Envelope<O>> {
        let first = self.first.take()?;
        self.first = self.rest.pop_front();
        if self.rest.is_empty() && self.rest.capacity() > 0 {
            // A burst is over: its buffer goes with it.
            self.rest = VecDeque::new();
        }
        Some(first)
    }
}

impl<O: DurableObject> Inbox<O> {
    pub(crate) fn new(residency: Residency, key: ObjectKey, kv: crate::kv::KvLimits) -> Self {
        Self {
            queue: Mutex::new(Queue {
                envelopes: Envelopes::default(),
                task: Task::Running,
            }),
            state: Mutex::new(None),
            root: Root::new(key, kv),
            residency: AtomicU8::new(residency as u8),
            outstanding: AtomicU32::new(0),
            last_used: AtomicU64::new(0),
            gate_busy: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            timer_at: AtomicU64::new(u64::MAX),
            timer_fired: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Queue<O>> {
        self.queue
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The next envelope; `None` once the inbox is closed and empty. (A `poll_fn` rather than
    /// an `async fn`: it is part of every live task's future.)
    pub(crate) fn recv(&self) -> impl Future<Output = Option<Envelope<O>>> + '_ {
        std::future::poll_fn(move |cx| {
            let mut queue = self.lock();
            if let Some(envelope) = queue.envelopes.pop_front() {
                return Poll::Ready(Some(envelope));
            }
            if self.closed.load(Ordering::Relaxed) {
                return Poll::Ready(None);
            }
            queue.register(cx.waker());
            Poll::Pending
        })
    }

    /// Records `at` (uptime milliseconds) as the idle timer's deadline unless one no later is
    /// armed. Returns whether the timer is to be armed for `at`.
    pub(crate) fn arm_timer(&self, at: u64) -> bool {
        self.timer_at.fetch_min(at, Ordering::AcqRel) > at
    }

    /// Records `at` as the idle timer's only deadline (`None`: none), whatever was armed.
    /// Returns whether the timer is to be armed for it anew.
    pub(crate) fn rearm_timer(&self, at: Option<u64>) -> bool {
        let at = at.unwrap_or(u64::MAX);
        self.timer_at.swap(at, Ordering::AcqRel) != at
    }

    /// Waits until the idle timer fires. (A `poll_fn`, like [`recv`](Self::recv).)
    pub(crate) fn timer(&self) -> impl Future<Output = ()> + '_ {
        std::future::poll_fn(move |cx| {
            let mut queue = self.lock();
            if self.timer_fired.swap(false, Ordering::Relaxed) {
                return Poll::Ready(());
            }
            queue.register(cx.waker());
            Poll::Pending
        })
    }

    /// Closes and drops what is queued (its callers see the runtime shutting down) and the
    /// state: the task is gone.
    pub(crate) fn abandon(&self) {
        let envelopes = {
            let mut queue = self.lock();
            self.closed.store(true, Ordering::Relaxed);
            // The task is ending: there is nothing left to wake.
            let task = queue.take_task();
            (std::mem::take(&mut queue.envelopes), task)
        };
        drop(envelopes);
        self.clear_state();
    }

    /// Drops the decoded state, once a read running on it in a caller's task is done (and
    /// outside the lock: dropping a state may take a while).
    pub(crate) fn clear_state(&self) {
        let state = self.state().take();
        drop(state);
    }

    /// The decoded state, locked.
    pub(crate) fn state(&self) -> MutexGuard<'_, Option<O>> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The decoded state, if the object is active, idle and nobody else holds it.
    ///
    /// Idleness is checked under the state's lock: the task counts an envelope as finished
    /// only after marking its writes as in flight, and takes the lock to run it, so an object
    /// found idle here has no call running and its state is committed.
    pub(crate) fn try_idle_state(&self) -> Option<MutexGuard<'_, Option<O>>> {
        let guard = match self.state.try_lock() {
            Ok(guard) => guard,
            Err(std::sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        (guard.is_some() && self.is_idle()).then_some(guard)
    }

    /// The root of the object's call chains (its key).
    pub(crate) fn root(&self) -> &Root {
        &self.root
    }

    pub(crate) fn is_closed(&self) -> bool {
        let _queue = self.lock();
        self.closed.load(Ordering::Relaxed)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.lock().envelopes.is_empty()
    }

    /// Sets what the object holds in memory; returns what it held before.
    pub(crate) fn set_residency(&self, residency: Residency) -> Residency {
        Residency::from_u8(self.residency.swap(residency as u8, Ordering::Relaxed))
    }

    pub(crate) fn residency(&self) -> Residency {
        Residency::from_u8(self.residency.load(Ordering::Relaxed))
    }

    /// An envelope was handled.
    pub(crate) fn finished(&self, at_millis: u64) {
        self.touch(at_millis);
        self.outstanding.fetch_sub(1, Ordering::AcqRel);
    }

    /// The object was used at `at_millis` (uptime, rounded up).
    pub(crate) fn touch(&self, at_millis: u64) {
        self.last_used.store(at_millis, Ordering::Relaxed);
    }

    /// When the object was last used (uptime milliseconds, rounded up).
    pub(crate) fn last_used(&self) -> u64 {
        self.last_used.load(Ordering::Relaxed)
    }

    /// Set before the envelope that made the gate busy is counted as finished.
    pub(crate) fn set_gate_busy(&self, busy: bool) {
        self.gate_busy.store(busy, Ordering::Release);
    }

    /// Whether the object's task is parked here (it has none).
    #[cfg(test)]
    pub(crate) fn is_parked(&self) -> bool {
        matches!(self.lock().task, Task::Parked(_))
    }

    /// Whether envelopes are queued or running.
    pub(crate) fn has_outstanding(&self) -> bool {
        self.outstanding.load(Ordering::Acquire) > 0
    }

    pub(crate) fn is_idle(&self) -> bool {
        self.outstanding.load(Ordering::Acquire) == 0 && !self.gate_busy.load(Ordering::Acquire)
    }
}

/// What wakes the object's task, and parks it: each wake-up starts a task if it is parked.
impl<O: DurableObject> Inbox<O> {
    /// Enqueues without waiting, counting the envelope as outstanding, and wakes the task
    /// (starting one if the object is parked).
    pub(crate) fn try_send(
        self: &Arc<Self>,
        envelope: Envelope<O>,
        capacity: usize,
    ) -> Result<(), SendError<O>> {
        let mut queue = self.lock();
        if self.closed.load(Ordering::Relaxed) {
            return Err(SendError::Closed(envelope));
        }
        if queue.envelopes.len() >= capacity {
            return Err(SendError::Full(envelope));
        }
        self.outstanding.fetch_add(1, Ordering::AcqRel);
        queue.envelopes.push_back(envelope);
        let task = queue.take_task();
        drop(queue);
        task.wake(self);
        Ok(())
    }

    /// The idle timer armed for `at` fired: the task is woken to see it (unless it armed an
    /// earlier one since, which fired or will).
    pub(crate) fn timer_fired(self: &Arc<Self>, at: u64) {
        let task = {
            let queue = &mut *self.lock();
            if self
                .timer_at
                .compare_exchange(at, u64::MAX, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                return;
            }
            self.timer_fired.store(true, Ordering::Relaxed);
            queue.take_task()
        };
        task.wake(self);
    }

    /// Closes the inbox if the object is parked, handing back its record (nothing is queued:
    /// the object is idle). `None`, and nothing changed, if it has a task.
    pub(crate) fn close_parked(&self) -> Option<Parked<O>> {
        let mut queue = self.lock();
        match queue.take_task() {
            Task::Parked(parked) => {
                self.closed.store(true, Ordering::Relaxed);
                Some(parked)
            }
            task => {
                queue.task = task;
                None
            }
        }
    }

    /// Accepts nothing more; what is queued is still handled.
    pub(crate) fn close(self: &Arc<Self>) {
        let task = {
            let mut queue = self.lock();
            self.closed.store(true, Ordering::Relaxed);
            queue.take_task()
        };
        task.wake(self);
    }

    /// Parks the idle object's task: what `parked` makes stays here, and the task may end
    /// (returns true). Refused if anything is already there to wake it: an envelope, its fired
    /// idle timer, or the inbox closing.
    pub(crate) fn park(&self, parked: impl FnOnce() -> Parked<O>) -> bool {
        let mut queue = self.lock();
        if !queue.envelopes.is_empty()
            || self.closed.load(Ordering::Relaxed)
            || self.timer_fired.load(Ordering::Relaxed)
        {
            return false;
        }
        queue.task = Task::Parked(parked());
        true
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_inbox_queue_is_first_in_first_out_across_its_inline_first_envelope() {
        use super::{Envelope, Envelopes};
        let mut queue = Envelopes::<()>::default();
        let mut receivers = Vec::new();
        let mut push = |queue: &mut Envelopes<()>| {
            let (reply, receiver) = tokio::sync::oneshot::channel();
            queue.push_back(Envelope::Delete(reply));
            receivers.push(receiver);
        };
        // Interleaved pushes and pops: every envelope comes out once, in order.
        push(&mut queue);
        push(&mut queue);
        push(&mut queue);
        assert_eq!(queue.len(), 3);
        let mut popped = Vec::new();
        popped.push(queue.pop_front());
        push(&mut queue);
        while let Some(envelope) = queue.pop_front() {
            popped.push(Some(envelope));
        }
        assert!(queue.is_empty());
        assert_eq!(queue.len(), 0, "nothing counted");
        assert_eq!(popped.len(), 4);
        for (n, envelope) in popped.into_iter().enumerate() {
            let Some(Envelope::Delete(reply)) = envelope else {
                panic!("envelope {n} missing");
            };
            reply.send(Ok(n % 2 == 0)).expect("receiver kept");
        }
        for (n, mut receiver) in receivers.into_iter().enumerate() {
            assert_eq!(
                receiver.try_recv().expect("answered").ok(),
                Some(n % 2 == 0)
            );
        }
    }
}
