//! The testing kit (`durable_runtime::testing`), helper by helper: `TestRuntime`'s alarm
//! helpers on paused time, `state`, `with_builder`, and `context` with `scheduled_alarms` for
//! calling handlers directly.

use std::time::{Duration, SystemTime};

use durable_runtime::storage::AlarmChange;
use durable_runtime::testing::{DrainError, TestRuntime, context, scheduled_alarms};
use durable_runtime::{
    AlarmSettings, Context, Error, MemoryStorage, ObjectOptions, RetryPolicy, Runtime,
    durable_object,
};

/// Where alarms of other objects write down that they fired, in order.
#[durable_object]
pub struct Journal {
    entries: Vec<String>,
}

#[durable_object]
impl Journal {
    #[handler]
    fn handle_record(&mut self, entry: String) {
        self.entries.push(entry);
    }

    #[handler]
    fn handle_entries(&self) -> Vec<String> {
        self.entries.clone()
    }
}

/// Rings once after a delay; re-arms itself `repeat` more times.
#[durable_object]
pub struct Reminder {
    rung: u32,
    repeat: u32,
}

#[durable_object]
impl Reminder {
    #[handler]
    fn handle_arm(&mut self, ctx: &Context, after_secs: u64, repeat: u32) {
        self.repeat = repeat;
        ctx.schedule_alarm(Reminder::RING, Duration::from_secs(after_secs));
    }

    #[alarm]
    async fn ring(&mut self, ctx: &Context) -> Result<(), String> {
        self.rung += 1;
        Journal::record(ctx.runtime(), "journal", ctx.id().to_owned())
            .await
            .map_err(|e| e.to_string())?;
        if self.repeat > 0 {
            self.repeat -= 1;
            ctx.schedule_alarm(Reminder::RING, Duration::from_secs(60));
        }
        Ok(())
    }
}

/// An alarm that re-arms itself forever.
#[durable_object]
pub struct Ticker {
    ticks: u32,
}

#[durable_object]
impl Ticker {
    #[handler]
    fn handle_start(&mut self, ctx: &Context) {
        ctx.schedule_alarm(Ticker::TICK, Duration::from_secs(1));
    }

    #[alarm]
    fn tick(&mut self, ctx: &Context) {
        self.ticks += 1;
        ctx.schedule_alarm(Ticker::TICK, Duration::from_secs(1));
    }
}

/// An alarm that always fails (after changing the state, which is rolled back).
#[durable_object]
pub struct Broken {
    attempts_seen: u32,
}

#[durable_object]
impl Broken {
    #[handler]
    fn handle_arm(&mut self, ctx: &Context) {
        ctx.schedule_alarm(Broken::FAIL, Duration::from_secs(5));
    }

    #[handler]
    fn handle_attempts_seen(&self) -> u32 {
        self.attempts_seen
    }

    #[alarm]
    fn fail(&mut self, attempt: u32) -> Result<(), String> {
        self.attempts_seen = attempt;
        Err(format!("failed attempt {attempt}"))
    }
}

/// A lock for the direct-call tests.
#[durable_object]
pub struct Lock {
    holder: Option<String>,
}

#[durable_object]
impl Lock {
    #[handler]
    fn handle_acquire(&mut self, ctx: &Context, who: String) -> bool {
        if self.holder.is_some() {
            return false;
        }
        self.holder = Some(who);
        ctx.schedule_alarm(Lock::RELEASE, Duration::from_secs(30));
        true
    }

    #[handler]
    fn handle_release_now(&mut self, ctx: &Context) {
        self.holder = None;
        ctx.cancel_alarm(Lock::RELEASE);
    }

    #[handler]
    fn handle_reset(&mut self, ctx: &Context) {
        self.holder = None;
        ctx.cancel_all_alarms();
    }

    #[alarm]
    fn release(&mut self) {
        self.holder = None;
    }
}

async fn journal(rt: &TestRuntime) -> Vec<String> {
    Journal::entries(rt, "journal").await.unwrap()
}

async fn due_at(rt: &TestRuntime, id: &str) -> Option<SystemTime> {
    let alarms = rt.list_alarms::<Reminder>(id).await.unwrap();
    alarms.first().map(|alarm| alarm.due_at)
}

// ---- fire_alarm ----

#[tokio::test(start_paused = true)]
async fn fire_alarm_runs_an_alarm_before_it_is_due_and_removes_it() {
    let rt = TestRuntime::new();
    Reminder::arm(&rt, "r", 3600, 0).await.unwrap();
    let due = due_at(&rt, "r").await.unwrap();
    assert!(due > rt.now());

    rt.fire_alarm("r", Reminder::RING).await.unwrap();

    assert_eq!(rt.state::<Reminder>("r").await.rung, 1);
    assert_eq!(journal(&rt).await, ["r"]);
    assert!(rt.list_alarms::<Reminder>("r").await.unwrap().is_empty());
    assert!(rt.now() < due, "fire_alarm does not move the clock");
}

#[tokio::test(start_paused = true)]
async fn fire_alarm_keeps_an_alarm_its_handler_rescheduled() {
    let rt = TestRuntime::new();
    Reminder::arm(&rt, "r", 10, 1).await.unwrap();
    let first = due_at(&rt, "r").await.unwrap();

    rt.fire_alarm("r", Reminder::RING).await.unwrap();

    let alarms = rt.list_alarms::<Reminder>("r").await.unwrap();
    assert_eq!(alarms.len(), 1);
    assert_eq!(alarms[0].name, "ring");
    assert!(
        alarms[0].due_at > first,
        "the rescheduled alarm is due later"
    );
    assert_eq!(alarms[0].claimed_at, None);

    // Firing it again runs the last repeat, which does not re-arm: then it is gone.
    rt.fire_alarm("r", Reminder::RING).await.unwrap();
    assert_eq!(rt.state::<Reminder>("r").await.rung, 2);
    assert!(rt.list_alarms::<Reminder>("r").await.unwrap().is_empty());
}

/// `fire_alarm` tells a re-armed alarm from the fired one by its due time. On a paused clock,
/// a handler that re-arms with the same delay as the first scheduling produces the same due
/// time, and the re-armed alarm is removed as if it had not been re-armed.
#[tokio::test(start_paused = true)]

async fn fire_alarm_keeps_a_rearmed_alarm_whose_due_time_did_not_change() {
    let rt = TestRuntime::new();
    Ticker::start(&rt, "t").await.unwrap(); // due in 1 s; `tick` re-arms for 1 s
    rt.fire_alarm("t", Ticker::TICK).await.unwrap();
    assert_eq!(rt.list_alarms::<Ticker>("t").await.unwrap().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn fire_alarm_returns_a_failing_handlers_error_and_keeps_the_alarm() {
    let rt = TestRuntime::new();
    Broken::arm(&rt, "b").await.unwrap();

    match rt.fire_alarm("b", Broken::FAIL).await {
        Err(Error::Handler(error)) => assert_eq!(error.to_string(), "failed attempt 1"),
        other => panic!("expected the handler's error, got {other:?}"),
    }

    // The handler's change was rolled back, and the alarm is still scheduled, untouched.
    assert_eq!(Broken::attempts_seen(&rt, "b").await.unwrap(), 0);
    let alarms = rt.list_alarms::<Broken>("b").await.unwrap();
    assert_eq!(alarms.len(), 1);
    assert_eq!(alarms[0].attempts, 0);
    assert!(!alarms[0].dead);
}

// ---- fire_due_alarms ----

#[tokio::test(start_paused = true)]
async fn fire_due_alarms_fires_only_due_alarms_earliest_first() {
    let rt = TestRuntime::new();
    Reminder::arm(&rt, "c", 30, 0).await.unwrap();
    Reminder::arm(&rt, "a", 10, 0).await.unwrap();
    Reminder::arm(&rt, "b", 20, 0).await.unwrap();

    assert_eq!(
        rt.fire_due_alarms(10).await.unwrap(),
        0,
        "nothing is due yet"
    );

    tokio::time::advance(Duration::from_secs(25)).await;
    assert_eq!(rt.fire_due_alarms(10).await.unwrap(), 2);
    assert_eq!(journal(&rt).await, ["a", "b"]);
    assert!(rt.list_alarms::<Reminder>("a").await.unwrap().is_empty());
    assert!(rt.list_alarms::<Reminder>("b").await.unwrap().is_empty());
    assert_eq!(rt.list_alarms::<Reminder>("c").await.unwrap().len(), 1);

    // It never moves the clock: "c" waits until time passes.
    assert_eq!(rt.fire_due_alarms(10).await.unwrap(), 0);
    tokio::time::advance(Duration::from_secs(5)).await;
    assert_eq!(rt.fire_due_alarms(10).await.unwrap(), 1);
    assert_eq!(journal(&rt).await, ["a", "b", "c"]);
}

#[tokio::test(start_paused = true)]
async fn fire_due_alarms_handles_failures_like_the_scheduler() {
    let rt = TestRuntime::new();
    Broken::arm(&rt, "b").await.unwrap();
    tokio::time::advance(Duration::from_secs(5)).await;

    assert_eq!(rt.fire_due_alarms(10).await.unwrap(), 1);

    // A failed attempt is recorded and retried after the default backoff (1 s).
    let alarm = &rt.list_alarms::<Broken>("b").await.unwrap()[0];
    assert_eq!(alarm.attempts, 1);
    assert_eq!(alarm.last_error.as_deref(), Some("failed attempt 1"));
    assert!(!alarm.dead);
    assert_eq!(alarm.claimed_at, None);
    assert_eq!(
        rt.fire_due_alarms(10).await.unwrap(),
        0,
        "not due again yet"
    );
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(rt.fire_due_alarms(10).await.unwrap(), 1);
    assert_eq!(rt.list_alarms::<Broken>("b").await.unwrap()[0].attempts, 2);
}

#[tokio::test(start_paused = true)]
async fn fire_due_alarms_stops_at_its_cap() {
    let rt = TestRuntime::new();
    for id in ["a", "b", "c"] {
        Reminder::arm(&rt, id, 1, 0).await.unwrap();
    }
    tokio::time::advance(Duration::from_secs(1)).await;

    match rt.fire_due_alarms(2).await {
        Err(DrainError::IterationCap { fired }) => assert_eq!(fired, 2),
        other => panic!("expected the cap, got {other:?}"),
    }
    assert_eq!(journal(&rt).await, ["a", "b"]);
}

/// After `fire_due_alarms` (or `drain_alarms`) stops at its cap, the alarms it did not fire
/// should still be fireable. Today the first of them is left claimed in storage, so neither
/// helper ever fires it again.
#[tokio::test(start_paused = true)]

async fn fire_due_alarms_leaves_the_alarms_beyond_its_cap_fireable() {
    let rt = TestRuntime::new();
    for id in ["a", "b"] {
        Reminder::arm(&rt, id, 1, 0).await.unwrap();
    }
    tokio::time::advance(Duration::from_secs(1)).await;
    assert!(rt.fire_due_alarms(1).await.is_err());

    assert_eq!(
        rt.list_alarms::<Reminder>("b").await.unwrap()[0].claimed_at,
        None
    );
    assert_eq!(rt.fire_due_alarms(10).await.unwrap(), 1);
    assert_eq!(journal(&rt).await, ["a", "b"]);
}

// ---- drain_alarms ----

#[tokio::test(start_paused = true)]
async fn drain_alarms_advances_time_and_fires_in_due_order_across_objects() {
    let rt = TestRuntime::new();
    let start = tokio::time::Instant::now();
    Reminder::arm(&rt, "c", 30, 0).await.unwrap();
    Reminder::arm(&rt, "a", 10, 0).await.unwrap();
    // "b" rings at 20 s, then again at 80 s (it re-arms once, 60 s later).
    Reminder::arm(&rt, "b", 20, 1).await.unwrap();

    assert_eq!(rt.drain_alarms(10).await.unwrap(), 4);

    assert_eq!(journal(&rt).await, ["a", "b", "c", "b"]);
    for id in ["a", "b", "c"] {
        assert!(rt.list_alarms::<Reminder>(id).await.unwrap().is_empty());
    }
    // The clock moved to the last due time, and no further.
    let elapsed = start.elapsed();
    assert!(elapsed >= Duration::from_secs(80), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(81), "{elapsed:?}");
}

#[tokio::test(start_paused = true)]
async fn drain_alarms_with_nothing_scheduled_fires_nothing() {
    let rt = TestRuntime::new();
    let start = tokio::time::Instant::now();
    assert_eq!(rt.drain_alarms(10).await.unwrap(), 0);
    assert_eq!(start.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn drain_alarms_stops_a_self_rearming_alarm_at_its_cap() {
    let rt = TestRuntime::new();
    Ticker::start(&rt, "t").await.unwrap();

    match rt.drain_alarms(5).await {
        Err(DrainError::IterationCap { fired }) => assert_eq!(fired, 5),
        other => panic!("expected the cap, got {other:?}"),
    }
    assert_eq!(rt.state::<Ticker>("t").await.ticks, 5);
    // The alarm is still scheduled: a test can keep going.
    assert_eq!(rt.list_alarms::<Ticker>("t").await.unwrap().len(), 1);
    let error = rt.drain_alarms(3).await.unwrap_err();
    assert_eq!(error.to_string(), "still firing alarms after 3 iterations");
    assert_eq!(rt.state::<Ticker>("t").await.ticks, 8);
}

#[tokio::test(start_paused = true)]
async fn drain_alarms_runs_retries_until_the_alarm_is_dead() {
    let storage = MemoryStorage::new();
    let builder =
        Runtime::builder(storage.clone()).alarm_settings(AlarmSettings::default().with_retry(
            RetryPolicy::new(Duration::from_secs(1), Duration::from_secs(10), 3),
        ));
    let rt = TestRuntime::with_builder(storage, builder);
    Broken::arm(&rt, "b").await.unwrap();

    // Every attempt counts as a firing; the dead alarm is not fired again.
    assert_eq!(rt.drain_alarms(10).await.unwrap(), 3);

    let alarm = &rt.list_alarms::<Broken>("b").await.unwrap()[0];
    assert!(alarm.dead);
    assert_eq!(alarm.attempts, 3);
    assert_eq!(alarm.last_error.as_deref(), Some("failed attempt 3"));
    assert_eq!(rt.drain_alarms(10).await.unwrap(), 0);
}

// ---- state, with_builder, storage ----

#[tokio::test(start_paused = true)]
async fn state_reads_the_committed_state() {
    let rt = TestRuntime::new();
    assert!(Lock::acquire(&rt, "door", "ann".to_owned()).await.unwrap());
    assert_eq!(
        rt.state::<Lock>("door").await.holder.as_deref(),
        Some("ann")
    );
}

#[tokio::test(start_paused = true)]
#[should_panic(expected = "Lock/nobody has no stored state")]
async fn state_panics_for_an_object_never_stored() {
    let rt = TestRuntime::new();
    rt.state::<Lock>("nobody").await;
}

#[tokio::test(start_paused = true)]
async fn with_builder_keeps_registrations_and_options_and_shares_the_storage() {
    let storage = MemoryStorage::new();
    let builder = Runtime::builder(storage.clone())
        .register_with::<Lock>(ObjectOptions::new().with_call_timeout(Duration::from_secs(3)));
    let rt = TestRuntime::with_builder(storage.clone(), builder);
    assert_eq!(
        rt.options_of::<Lock>().call_timeout,
        Some(Duration::from_secs(3))
    );

    Lock::acquire(&rt, "door", "ann".to_owned()).await.unwrap();
    // `storage()` is the store the runtime writes, and clones of it share its data.
    let other = Runtime::builder(storage).manual_alarms().build();
    let read = other.read_state::<Lock>("door").await.unwrap().unwrap();
    assert_eq!(read.holder.as_deref(), Some("ann"));
    assert_eq!(rt.list_alarms::<Lock>("door").await.unwrap().len(), 1);
    let page = durable_runtime::storage::Storage::list_ids(rt.storage(), "Lock", None, 10)
        .await
        .unwrap();
    assert_eq!(page.ids, ["door"]);
}

// ---- context and scheduled_alarms ----

#[test]
fn context_runs_handlers_directly_and_records_their_alarm_changes() {
    let ctx = context::<Lock>("door");
    assert_eq!(ctx.id(), "door");
    assert_eq!(ctx.object_type(), "Lock");

    let mut lock = Lock::default();
    let before = ctx.now();
    assert!(lock.handle_acquire(&ctx, "ann".to_owned()));
    assert_eq!(lock.holder.as_deref(), Some("ann"));
    match &scheduled_alarms(&ctx)[..] {
        [
            AlarmChange::Set {
                name,
                due_at,
                payload: None,
            },
        ] => {
            assert_eq!(name, "release");
            // Thirty seconds after the context's clock (the system clock) read it.
            let delay = due_at.duration_since(before).unwrap();
            assert!(delay > Duration::from_secs(29), "{delay:?}");
            assert!(delay < Duration::from_secs(31), "{delay:?}");
        }
        other => panic!("expected one scheduled alarm, got {other:?}"),
    }
    // Reading them cleared them.
    assert!(scheduled_alarms(&ctx).is_empty());

    // A refused call schedules nothing.
    assert!(!lock.handle_acquire(&ctx, "bob".to_owned()));
    assert!(scheduled_alarms(&ctx).is_empty());

    lock.handle_release_now(&ctx);
    assert!(matches!(
        &scheduled_alarms(&ctx)[..],
        [AlarmChange::Cancel { name }] if name == "release"
    ));

    lock.handle_acquire(&ctx, "cy".to_owned());
    lock.handle_reset(&ctx);
    assert!(matches!(
        &scheduled_alarms(&ctx)[..],
        [AlarmChange::Set { .. }, AlarmChange::CancelAll]
    ));

    // Alarm handlers are methods too.
    lock.handle_acquire(&ctx, "dee".to_owned());
    lock.release();
    assert_eq!(lock.holder, None);
}

#[tokio::test]
async fn context_runs_async_handlers_and_alarms_on_its_own_runtime() {
    let ctx = context::<Reminder>("r");
    let mut reminder = Reminder {
        repeat: 1,
        ..Reminder::default()
    };
    // The alarm calls another object: the context's runtime (in memory, empty) serves it.
    reminder.ring(&ctx).await.unwrap();
    assert_eq!(reminder.rung, 1);
    assert_eq!(reminder.repeat, 0);
    assert!(matches!(
        &scheduled_alarms(&ctx)[..],
        [AlarmChange::Set { name, .. }] if name == "ring"
    ));
    assert_eq!(
        Journal::entries(ctx.runtime(), "journal").await.unwrap(),
        ["r"]
    );
}
