//! The idle timers of one object type's live objects, kept together rather than as a tokio
//! timer in each object's task.
//!
//! A timer in every task would cost each live object a tokio `Sleep` (over a hundred bytes,
//! for the object's whole life). Here an object arms its timer once per idle deadline: the
//! entry is its inbox's weak handle under the deadline's millisecond, and one task per type
//! sleeps until the earliest and then flags each due inbox, waking its task. An entry whose
//! object re-armed earlier since, or ended, is skipped when it comes due.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::activation::inbox::Inbox;
use crate::object::DurableObject;
use crate::object::handle::{Runtime, Shared};

/// Deadlines (uptime milliseconds) and the inboxes armed for each.
type Armed<O> = BTreeMap<u64, Vec<Weak<Inbox<O>>>>;

/// Room made for the inboxes of a new deadline: a busy type arms many in the same millisecond,
/// and growing the list one doubling at a time costs a reallocation for each.
const DEADLINE_CAPACITY: usize = 16;

/// The idle timers of one type's live objects.
pub(crate) struct IdleTimers<O: DurableObject> {
    armed: Mutex<Armed<O>>,
    /// Wakes the timer task when an earlier deadline is armed.
    changed: Notify,
    started: AtomicBool,
}

impl<O: DurableObject> IdleTimers<O> {
    pub(crate) fn new() -> Self {
        Self {
            armed: Mutex::new(BTreeMap::new()),
            changed: Notify::new(),
            started: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Armed<O>> {
        self.armed
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Arms `inbox`'s timer for `at` (uptime milliseconds) unless it is armed no later,
    /// starting the timer task on first use.
    pub(crate) fn arm(self: &Arc<Self>, runtime: &Runtime, inbox: &Arc<Inbox<O>>, at: u64) {
        if inbox.arm_timer(at) {
            self.insert(runtime, inbox, at);
        }
    }

    /// Arms `inbox`'s timer for `at` only, or for nothing: a timer armed earlier no longer
    /// wakes it (its entry is skipped when it comes due).
    pub(crate) fn rearm(
        self: &Arc<Self>,
        runtime: &Runtime,
        inbox: &Arc<Inbox<O>>,
        at: Option<u64>,
    ) {
        if inbox.rearm_timer(at)
            && let Some(at) = at
        {
            self.insert(runtime, inbox, at);
        }
    }

    /// Adds `inbox` under the deadline `at`, starting the timer task on first use.
    fn insert(self: &Arc<Self>, runtime: &Runtime, inbox: &Arc<Inbox<O>>, at: u64) {
        let earliest = {
            let mut armed = self.lock();
            let earliest = armed.keys().next().is_none_or(|first| at < *first);
            armed
                .entry(at)
                .or_insert_with(|| Vec::with_capacity(DEADLINE_CAPACITY))
                .push(Arc::downgrade(inbox));
            earliest
        };
        if !self.started.swap(true, Ordering::AcqRel) {
            runtime.spawn_task(run(
                Arc::clone(self),
                runtime.downgrade(),
                runtime.shutdown_token(),
            ));
        } else if earliest {
            self.changed.notify_one();
        }
    }

    /// Takes the inboxes armed for `now` or earlier.
    fn take_due(&self, now: u64) -> Vec<(u64, Vec<Weak<Inbox<O>>>)> {
        let mut armed = self.lock();
        let later = armed.split_off(&now.saturating_add(1));
        std::mem::replace(&mut *armed, later).into_iter().collect()
    }

    fn earliest(&self) -> Option<u64> {
        self.lock().keys().next().copied()
    }
}

/// The timer task of one type: sleeps until the earliest deadline, then flags the inboxes due.
async fn run<O: DurableObject>(
    timers: Arc<IdleTimers<O>>,
    runtime: Weak<Shared>,
    shutdown: CancellationToken,
) {
    loop {
        match wait_for_deadline(&runtime, timers.earliest(), &timers.changed, &shutdown).await {
            Wake::Stopped => return,
            Wake::Changed => continue,
            Wake::Due => {}
        }
        let Some(runtime) = Runtime::upgrade(&runtime) else {
            return;
        };
        let now = runtime.uptime_millis();
        drop(runtime);
        for (at, inboxes) in timers.take_due(now) {
            for inbox in inboxes.iter().filter_map(Weak::upgrade) {
                inbox.timer_fired(at);
            }
        }
    }
}

/// What ended a timer task's wait.
pub(crate) enum Wake {
    /// The deadline passed.
    Due,
    /// `changed` was notified: the earliest deadline may be another now.
    Changed,
    /// The runtime is shutting down or gone.
    Stopped,
}

/// The wait of a timer task (idle timers, dormant objects' expiries): until the uptime
/// `deadline` in milliseconds (forever without one), a notification of `changed`, or the
/// runtime's shutdown.
pub(crate) async fn wait_for_deadline(
    runtime: &Weak<Shared>,
    deadline: Option<u64>,
    changed: &Notify,
    shutdown: &CancellationToken,
) -> Wake {
    let due = match (deadline, Runtime::upgrade(runtime)) {
        (Some(at), Some(runtime)) => Some(runtime.instant_at_uptime(at)),
        (None, Some(_)) => None,
        (_, None) => return Wake::Stopped,
    };
    let sleep = async {
        match due {
            Some(due) => tokio::time::sleep_until(due).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        () = shutdown.cancelled() => Wake::Stopped,
        () = changed.notified() => Wake::Changed,
        () = sleep => Wake::Due,
    }
}
