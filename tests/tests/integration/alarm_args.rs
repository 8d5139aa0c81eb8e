//! Alarms that carry an argument: the handler receives it typed, also after a restart on the
//! same database; an argument that no longer decodes fails the attempt like a handler error
//! (retried, then a dead alarm that keeps its argument), never the runtime.

use std::time::Duration;

use durable_runtime::storage::{AlarmChange, ObjectKey, ObjectWrite};
use durable_runtime::testing::TestRuntime;
use durable_runtime::{
    AlarmSettings, Context, MemoryStorage, RetryPolicy, Runtime, durable_object,
};
use durable_tests::{Backend, eventually};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reminder {
    text: String,
    times: u32,
}

#[durable_object]
pub struct Calendar {
    said: Vec<String>,
    attempts: Vec<u32>,
}

#[durable_object]
impl Calendar {
    #[handler]
    fn handle_said(&self) -> Vec<String> {
        self.said.clone()
    }

    #[handler]
    fn handle_plan(&mut self, ctx: &Context, text: String) {
        let reminder = Reminder { text, times: 1 };
        ctx.schedule_alarm_with(Calendar::REMIND, &reminder, Duration::ZERO)
            .expect("a reminder encodes");
    }

    #[alarm]
    fn remind(&mut self, reminder: Reminder, attempt: u32) {
        self.attempts.push(attempt);
        for _ in 0..reminder.times {
            self.said.push(reminder.text.clone());
        }
    }

    #[alarm]
    fn maybe(&mut self, note: Option<String>) {
        self.said.push(note.unwrap_or_else(|| "nothing".to_owned()));
    }

    #[alarm]
    fn ring(&mut self) {
        self.said.push("ring".to_owned());
    }
}

async fn said(rt: &Runtime, id: &str) -> Vec<String> {
    Calendar::said(rt, id).await.unwrap()
}

/// Scheduled by one runtime that never fires it, fired by the next one on the same database.
async fn payload_alarm_fires_after_a_restart(backend: &Backend) {
    let first = Runtime::builder(backend.store.clone())
        .manual_alarms()
        .build();
    let reminder = Reminder {
        text: "stand-up".into(),
        times: 2,
    };
    first
        .schedule_alarm_with("c1", Calendar::REMIND, &reminder, Duration::ZERO)
        .await
        .unwrap();
    first.shutdown().await;
    drop(first);

    let second = Runtime::new(backend.open_again().await);
    eventually(|| async { said(&second, "c1").await.len() == 2 }).await;
    assert_eq!(said(&second, "c1").await, ["stand-up", "stand-up"]);
    assert!(
        second
            .list_alarms::<Calendar>("c1")
            .await
            .unwrap()
            .is_empty()
    );
    second.shutdown().await;
}

#[tokio::test]
async fn payload_alarm_fires_after_a_restart_memory() {
    payload_alarm_fires_after_a_restart(&durable_tests::memory().await).await;
}

#[tokio::test]
async fn payload_alarm_fires_after_a_restart_sqlite() {
    payload_alarm_fires_after_a_restart(&durable_tests::sqlite().await).await;
}

#[tokio::test]
async fn payload_alarm_fires_after_a_restart_postgres() {
    if let Some(backend) = durable_tests::postgres().await {
        payload_alarm_fires_after_a_restart(&backend).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_handler_schedules_an_alarm_with_its_argument() {
    let rt = TestRuntime::new();
    Calendar::plan(&rt, "c1", "lunch".into()).await.unwrap();
    let stored = rt.list_alarms::<Calendar>("c1").await.unwrap();
    assert_eq!(
        stored[0].payload.as_deref(),
        Some(&br#"{"text":"lunch","times":1}"#[..])
    );
    assert_eq!(rt.fire_due_alarms(10).await.unwrap(), 1);
    assert_eq!(rt.state::<Calendar>("c1").await.said, ["lunch"]);
}

#[tokio::test(start_paused = true)]
async fn setting_again_replaces_the_argument() {
    let rt = TestRuntime::new();
    let first = Reminder {
        text: "first".into(),
        times: 1,
    };
    let second = Reminder {
        text: "second".into(),
        times: 1,
    };
    rt.schedule_alarm_with("c1", Calendar::REMIND, &first, Duration::from_secs(10))
        .await
        .unwrap();
    rt.schedule_alarm_with("c1", Calendar::REMIND, &second, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(rt.list_alarms::<Calendar>("c1").await.unwrap().len(), 1);
    assert_eq!(rt.fire_due_alarms(10).await.unwrap(), 1);
    assert_eq!(rt.state::<Calendar>("c1").await.said, ["second"]);
}

#[tokio::test(start_paused = true)]
async fn an_optional_argument_reads_an_alarm_set_without_one_as_none() {
    let rt = TestRuntime::new();
    rt.schedule_alarm_with(
        "c1",
        Calendar::MAYBE,
        &Some("note".to_owned()),
        Duration::ZERO,
    )
    .await
    .unwrap();
    rt.schedule_alarm("c1", Calendar::RING, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(rt.fire_due_alarms(10).await.unwrap(), 2);
    let mut said = rt.state::<Calendar>("c1").await.said;
    said.sort();
    assert_eq!(said, ["note", "ring"]);
    rt.schedule_alarm_with("c1", Calendar::MAYBE, &None, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(rt.fire_due_alarms(10).await.unwrap(), 1);
    assert!(
        rt.state::<Calendar>("c1")
            .await
            .said
            .contains(&"nothing".to_owned())
    );
}

/// An argument stored by hand that does not fit the handler's type: every attempt fails with
/// the decode error, the alarm ends dead with its argument kept, and the object keeps serving.
#[tokio::test(start_paused = true)]
async fn an_argument_that_does_not_decode_is_retried_then_dead() {
    let storage = MemoryStorage::new();
    let settings = AlarmSettings::default().with_retry(RetryPolicy::new(
        Duration::from_secs(1),
        Duration::from_secs(1),
        3,
    ));
    let builder = Runtime::builder(storage.clone())
        .register::<Calendar>()
        .alarm_settings(settings);
    let rt = TestRuntime::with_builder(storage.clone(), builder);
    let due_at = durable_runtime::storage::truncate_to_micros(rt.now());
    let write = ObjectWrite {
        key: ObjectKey::new("Calendar", "c1"),
        expected_version: 0,
        state: Some(br#"{"said":[],"attempts":[]}"#.to_vec()),
        alarms: vec![AlarmChange::Set {
            name: "remind".into(),
            due_at,
            payload: Some(br#"{"text":7}"#.to_vec()),
        }],
        kv: Vec::new(),
        idempotency: None,
        fsm: Default::default(),
    };
    durable_runtime::storage::Storage::commit(&storage, &[write])
        .await
        .unwrap();
    assert_eq!(rt.drain_alarms(10).await.unwrap(), 3);
    let alarm = &rt.list_alarms::<Calendar>("c1").await.unwrap()[0];
    assert!(alarm.dead);
    assert_eq!(alarm.attempts, 3);
    let error = alarm.last_error.as_deref().unwrap();
    assert!(
        error.contains("argument of alarm `remind` does not decode"),
        "{error}"
    );
    assert_eq!(alarm.payload.as_deref(), Some(&br#"{"text":7}"#[..]));
    assert!(rt.state::<Calendar>("c1").await.attempts.is_empty());

    // A re-queued dead alarm keeps its argument.
    assert!(rt.requeue_dead_alarm("c1", Calendar::REMIND).await.unwrap());
    let alarm = &rt.list_alarms::<Calendar>("c1").await.unwrap()[0];
    assert!(!alarm.dead);
    assert_eq!(alarm.payload.as_deref(), Some(&br#"{"text":7}"#[..]));
}
