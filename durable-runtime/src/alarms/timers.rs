//! The held alarms by due time: one queue, and one task that fires each when it is due.
//!
//! A timer task per held alarm would cost every firing a task (its allocation, its
//! scheduling) and a timer of its own; under a burst of due alarms that is most of what the
//! runtime spends per alarm besides the handler. Claims come in due order, so one queue and
//! one sleep until its earliest alarm do the same work.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::sync::Mutex;
use std::time::SystemTime;

use tokio::sync::Notify;

use crate::storage::AlarmRecord;

/// A held alarm, ordered by due time, then by arrival.
#[derive(Debug)]
struct Timed {
    due_at: SystemTime,
    arrival: u64,
    alarm: AlarmRecord,
}

impl PartialEq for Timed {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Timed {}

impl PartialOrd for Timed {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Timed {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.due_at, self.arrival).cmp(&(other.due_at, other.arrival))
    }
}

#[derive(Debug, Default)]
struct Queue {
    heap: BinaryHeap<Reverse<Timed>>,
    arrivals: u64,
}

/// The held alarms waiting for their due time.
#[derive(Debug, Default)]
pub(crate) struct Timers {
    queue: Mutex<Queue>,
    /// Wakes the firing task when an alarm due before the ones it waits for arrives.
    pub(crate) earlier: Notify,
}

impl Timers {
    /// Queues `alarms` until they are due.
    pub(crate) fn arm(&self, alarms: impl IntoIterator<Item = AlarmRecord>) {
        let mut queue = self.lock();
        let first = queue.heap.peek().map(|Reverse(timed)| timed.due_at);
        let mut earliest = first;
        for alarm in alarms {
            queue.arrivals += 1;
            let timed = Timed {
                due_at: alarm.due_at,
                arrival: queue.arrivals,
                alarm,
            };
            earliest = Some(earliest.map_or(timed.due_at, |at| at.min(timed.due_at)));
            queue.heap.push(Reverse(timed));
        }
        drop(queue);
        if earliest != first {
            self.earlier.notify_one();
        }
    }

    /// Takes up to `max` alarms due by `now`, earliest first, into `due`; returns the due time
    /// of the earliest one left.
    pub(crate) fn take_due(
        &self,
        now: SystemTime,
        max: usize,
        due: &mut Vec<AlarmRecord>,
    ) -> Option<SystemTime> {
        let mut queue = self.lock();
        while due.len() < max {
            match queue.heap.peek() {
                Some(Reverse(timed)) if timed.due_at <= now => {}
                _ => break,
            }
            let Some(Reverse(timed)) = queue.heap.pop() else {
                break;
            };
            due.push(timed.alarm);
        }
        queue.heap.peek().map(|Reverse(timed)| timed.due_at)
    }

    /// Takes every queued alarm (at shutdown).
    pub(crate) fn take_all(&self) -> Vec<AlarmRecord> {
        let mut queue = self.lock();
        std::mem::take(&mut queue.heap)
            .into_iter()
            .map(|Reverse(timed)| timed.alarm)
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        // Nothing panics while holding it; a poisoned queue is still consistent.
        self.queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;
    use crate::storage::ObjectKey;

    fn alarm(id: &str, due_secs: u64) -> AlarmRecord {
        AlarmRecord {
            key: ObjectKey::new("T", id),
            name: "a".to_owned(),
            due_at: UNIX_EPOCH + Duration::from_secs(due_secs),
            attempts: 0,
            claimed_at: Some(UNIX_EPOCH),
            last_error: None,
            dead: false,
            payload: None,
        }
    }

    fn ids(alarms: &[AlarmRecord]) -> Vec<&str> {
        alarms.iter().map(|a| a.key.object_id.as_str()).collect()
    }

    #[test]
    fn due_alarms_come_out_earliest_first_then_in_arrival_order_up_to_the_max() {
        let timers = Timers::default();
        timers.arm([alarm("c", 30), alarm("a", 10), alarm("b1", 20)]);
        timers.arm([alarm("b2", 20), alarm("late", 99)]);
        let mut due = Vec::new();
        let at = |secs| UNIX_EPOCH + Duration::from_secs(secs);
        assert_eq!(timers.take_due(at(5), 10, &mut due), Some(at(10)));
        assert!(due.is_empty());
        assert_eq!(timers.take_due(at(30), 3, &mut due), Some(at(30)));
        assert_eq!(ids(&due), ["a", "b1", "b2"]);
        due.clear();
        assert_eq!(timers.take_due(at(30), 10, &mut due), Some(at(99)));
        assert_eq!(ids(&due), ["c"]);
        assert_eq!(ids(&timers.take_all()), ["late"]);
        assert_eq!(timers.take_due(at(1000), 10, &mut due), None);
    }

    #[tokio::test]
    async fn only_an_alarm_earlier_than_every_queued_one_wakes_the_firing_task() {
        let timers = Timers::default();
        let woken = |timers: &Timers| {
            let notified = timers.earlier.notified();
            futures_util::FutureExt::now_or_never(notified).is_some()
        };
        timers.arm([alarm("a", 10)]);
        assert!(woken(&timers), "the first alarm");
        timers.arm([alarm("b", 20), alarm("c", 10)]);
        assert!(!woken(&timers), "none earlier than the queued one");
        timers.arm([alarm("d", 30), alarm("e", 5)]);
        assert!(woken(&timers), "one earlier");
    }
}
