//! The scheduler's shared side, which committing objects signal.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use tokio::sync::Notify;

use crate::alarms::claims::Claims;
use crate::alarms::timers::Timers;

/// The scheduler's shared side: wakes it when an alarm is committed, and holds the claims it
/// took that have not fired yet, with their alarms queued by due time.
#[derive(Debug, Default)]
pub(crate) struct SchedulerHandle {
    pub(crate) notify: Notify,
    claims: Claims,
    timers: Timers,
    /// While the scheduler sleeps: the due time (microseconds since the Unix epoch) from which
    /// on it claims an alarm on time without being woken, since it looks at storage again
    /// early enough before it (`claim_ahead`, or longer when storage is slow). Zero while it
    /// is awake: every scheduled alarm wakes it then.
    horizon: AtomicU64,
}

impl SchedulerHandle {
    /// An alarm due at `due_at` (at an unknown time if `None`) was committed: wakes the
    /// scheduler unless its next look at storage is early enough for that alarm anyway, so
    /// that calls scheduling alarms far ahead (timeouts, expiries) do not each cost a claim.
    pub(crate) fn alarm_scheduled(&self, due_at: Option<SystemTime>) {
        let horizon = self.horizon.load(Ordering::SeqCst);
        let later =
            due_at.is_some_and(|due_at| horizon != 0 && micros_since_epoch(due_at) >= horizon);
        if !later {
            self.notify.notify_one();
        }
    }

    /// The scheduler is about to look at storage: every alarm committed from now on wakes it.
    /// (A wake-up while it looks is kept and ends its next sleep at once.)
    pub(crate) fn awake(&self) {
        self.horizon.store(0, Ordering::SeqCst);
    }

    /// The scheduler sleeps, and will claim the alarms due before `horizon` when it wakes.
    /// `None`: a horizon too far to represent, so every new alarm is due before it.
    pub(crate) fn sleeping(&self, horizon: Option<SystemTime>) {
        let horizon = horizon.map_or(u64::MAX, micros_since_epoch);
        self.horizon.store(horizon.max(1), Ordering::SeqCst);
    }

    /// The claims held until they fire.
    pub(crate) fn claims(&self) -> &Claims {
        &self.claims
    }

    /// The held alarms, queued until they are due.
    pub(crate) fn timers(&self) -> &Timers {
        &self.timers
    }
}

/// Microseconds since the Unix epoch (zero before it).
fn micros_since_epoch(time: SystemTime) -> u64 {
    time.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_micros()).unwrap_or(u64::MAX)
        })
}
