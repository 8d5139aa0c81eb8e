//! Many timed events on one alarm.
//!
//! An object has one alarm per alarm handler, but may need a timer per event: one per
//! reminder, per delivery, per retry. Keep the events in the state and one `drain` alarm
//! pointed at the earliest. When it fires it processes the due events (a bounded batch at a
//! time) and re-arms itself for the next one, for as long as events are pending. State lives
//! in an SQLite file in a temporary directory.
//!
//! ```text
//! cargo run -p durable-examples --example alarm_queue
//! ```

// ANCHOR: object
use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant, SystemTime};

use durable_runtime::{Context, Runtime, durable_object};
use serde::{Deserialize, Serialize};

/// Most events processed by one firing of the alarm, to keep each call (and commit) short.
const BATCH: usize = 25;

/// Something to do at a given time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub id: String,
    pub due_at: SystemTime,
    pub payload: String,
}

/// A queue of timed events, drained by one alarm.
#[durable_object]
pub struct EventQueue {
    /// Events waiting for their time, by id: scheduling an id again replaces the event.
    pending: BTreeMap<String, Event>,
    /// Ids of the processed events, in the order they ran (this example's "work").
    processed: Vec<String>,
    /// How many times the alarm fired.
    drains: u32,
}

#[durable_object(expose)]
impl EventQueue {
    /// Adds (or replaces) events.
    #[handler]
    fn handle_schedule(&mut self, ctx: &Context, events: Vec<Event>) {
        for event in events {
            self.pending.insert(event.id.clone(), event);
        }
        self.arm(ctx);
    }

    /// Removes a pending event; returns whether it was pending.
    #[handler]
    fn handle_cancel(&mut self, ctx: &Context, id: String) -> bool {
        let removed = self.pending.remove(&id).is_some();
        self.arm(ctx);
        removed
    }

    #[handler]
    fn handle_pending(&self) -> usize {
        self.pending.len()
    }

    #[handler]
    fn handle_processed(&self) -> (Vec<String>, u32) {
        (self.processed.clone(), self.drains)
    }

    /// Processes up to `BATCH` due events, earliest first, then re-arms.
    #[alarm]
    fn drain(&mut self, ctx: &Context) {
        self.drains += 1;
        let now = ctx.now();
        let mut due: Vec<Event> = self
            .pending
            .values()
            .filter(|event| event.due_at <= now)
            .cloned()
            .collect();
        due.sort_by(|a, b| (a.due_at, &a.id).cmp(&(b.due_at, &b.id)));
        for event in due.into_iter().take(BATCH) {
            // Removed from `pending` in the same commit as its effect: if this call fails, the
            // event is still pending and the retried alarm processes it again.
            self.pending.remove(&event.id);
            self.processed.push(event.id);
        }
        // More due events re-arm for now, the next future one for its time, none: stop.
        self.arm(ctx);
    }
}

impl EventQueue {
    /// Points the alarm at the earliest pending event, or cancels it when none is left.
    fn arm(&self, ctx: &Context) {
        match self.pending.values().map(|event| event.due_at).min() {
            // Replaces the alarm's due time; a time in the past fires at once.
            Some(earliest) => ctx.schedule_alarm(EventQueue::DRAIN, earliest),
            None => ctx.cancel_alarm(EventQueue::DRAIN),
        }
    }
}
// ANCHOR_END: object

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let rt = Runtime::builder(durable_sqlx::SqliteStore::open(dir.path().join("queue.db")).await?)
        .register::<EventQueue>()
        .build();

    // ANCHOR: usage
    // 120 events due at 40 moments over the next half second, in no particular order, and
    // 30 that are already due: 150 timers on one alarm.
    let now = SystemTime::now();
    let mut events: Vec<Event> = (0..120_u64)
        .map(|i| Event {
            id: format!("later-{i:03}"),
            due_at: now + Duration::from_millis(100 + (i * 37 % 40) * 10),
            payload: format!("reminder {i}"),
        })
        .collect();
    events.extend((0..30).map(|i| Event {
        id: format!("now-{i:02}"),
        due_at: now - Duration::from_secs(1),
        payload: format!("overdue {i}"),
    }));
    let due: BTreeMap<String, SystemTime> =
        events.iter().map(|e| (e.id.clone(), e.due_at)).collect();
    EventQueue::schedule(&rt, "queue:reminders", events).await?;
    assert!(EventQueue::cancel(&rt, "queue:reminders", "later-007".to_owned()).await?);

    let started = Instant::now();
    while EventQueue::pending(&rt, "queue:reminders").await? > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "events are late"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (processed, drains) = EventQueue::processed(&rt, "queue:reminders").await?;
    println!(
        "{} events processed in {drains} firings of one alarm",
        processed.len()
    );
    // ANCHOR_END: usage

    // Every event but the cancelled one ran, once, in the order of its due time.
    assert_eq!(processed.len(), 149);
    assert!(!processed.contains(&"later-007".to_owned()));
    assert_eq!(processed.iter().collect::<HashSet<_>>().len(), 149);
    assert!(processed.is_sorted_by_key(|id| (due[id], id.clone())));
    // The overdue burst took two batches; the rest ran as they fell due, a few per firing.
    assert!((2..149).contains(&drains), "{drains} firings");
    // Nothing is left scheduled.
    assert!(
        rt.list_alarms::<EventQueue>("queue:reminders")
            .await?
            .is_empty()
    );

    rt.shutdown().await;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    run().await
}

#[cfg(test)]
mod tests {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn runs() {
        super::run().await.unwrap();
    }
}
