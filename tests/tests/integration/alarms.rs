//! Alarms, end to end on every storage backend: scheduling, replacement, cancellation,
//! chains, rescheduling, claims across runtimes, crash recovery, retries and dead alarms,
//! restarts, atomicity with state.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use durable_runtime::storage::{AlarmChange, ObjectKey, ObjectWrite, Storage, truncate_to_micros};
use durable_runtime::testing::FaultyStorage;
use durable_runtime::{
    AlarmSettings, Context, Error, Event, ObjectOptions, RetryPolicy, Runtime, durable_object,
};
use durable_tests::{backend_tests, eventually};

#[durable_object]
pub struct Reminder {
    fired: Vec<String>,
    rearm: u32,
}

#[durable_object]
impl Reminder {
    #[handler]
    fn handle_schedule(&mut self, ctx: &Context, name: String, after_ms: u64) {
        let after = Duration::from_millis(after_ms);
        match name.as_str() {
            "first" => ctx.schedule_alarm(Reminder::FIRST, after),
            "second" => ctx.schedule_alarm(Reminder::SECOND, after),
            "chain_a" => ctx.schedule_alarm(Reminder::CHAIN_A, after),
            "again" => ctx.schedule_alarm(Reminder::AGAIN, after),
            other => panic!("no alarm {other}"),
        }
    }

    #[handler]
    fn handle_cancel_first(&mut self, ctx: &Context) {
        ctx.cancel_alarm(Reminder::FIRST);
    }

    #[handler]
    fn handle_schedule_then_fail(&mut self, ctx: &Context) -> Result<(), String> {
        ctx.schedule_alarm(Reminder::FIRST, Duration::from_millis(1));
        Err("changed my mind".to_owned())
    }

    #[handler]
    fn handle_fired(&self) -> Vec<String> {
        self.fired.clone()
    }

    #[alarm]
    fn first(&mut self) {
        self.fired.push("first".to_owned());
    }

    #[alarm]
    fn second(&mut self) {
        self.fired.push("second".to_owned());
    }

    #[alarm]
    fn chain_a(&mut self, ctx: &Context) {
        self.fired.push("chain_a".to_owned());
        ctx.schedule_alarm(Reminder::CHAIN_B, Duration::from_millis(20));
    }

    #[alarm]
    fn chain_b(&mut self) {
        self.fired.push("chain_b".to_owned());
    }

    /// Re-arms itself twice: a recurring alarm.
    #[alarm]
    fn again(&mut self, ctx: &Context) {
        self.fired.push("again".to_owned());
        if self.rearm < 2 {
            self.rearm += 1;
            ctx.schedule_alarm(Reminder::AGAIN, Duration::from_millis(20));
        }
    }
}

#[durable_object]
pub struct Flaky {
    attempts_seen: Vec<u32>,
    succeed_on: u32,
}

#[durable_object]
impl Flaky {
    #[handler]
    fn handle_arm(&mut self, ctx: &Context, succeed_on: u32) {
        self.succeed_on = succeed_on;
        ctx.schedule_alarm(Flaky::TRY_IT, Duration::from_millis(1));
    }

    #[handler]
    fn handle_seen(&self) -> Vec<u32> {
        self.attempts_seen.clone()
    }

    #[alarm]
    fn try_it(&mut self, attempt: u32) -> Result<(), String> {
        if attempt < self.succeed_on {
            return Err(format!("attempt {attempt} failed"));
        }
        self.attempts_seen.push(attempt);
        Ok(())
    }
}

/// Records how late its alarm fires.
#[durable_object]
pub struct Punctual {
    due_micros: u64,
    late_micros: Vec<u64>,
}

#[durable_object]
impl Punctual {
    #[handler]
    fn handle_arm(&mut self, ctx: &Context, after_ms: u64) {
        let after = Duration::from_millis(after_ms);
        self.due_micros = micros(ctx.now() + after);
        ctx.schedule_alarm(Punctual::RING, after);
    }

    #[alarm]
    fn ring(&mut self, ctx: &Context) {
        self.late_micros
            .push(micros(ctx.now()).saturating_sub(self.due_micros));
    }
}

/// An object two runtimes write at once, with one alarm.
#[durable_object]
pub struct Contended {
    touched: u32,
    rung: u32,
}

#[durable_object]
impl Contended {
    #[handler]
    fn handle_arm(&mut self, ctx: &Context, after_ms: u64) {
        ctx.schedule_alarm(Contended::RING, Duration::from_millis(after_ms));
    }

    #[handler]
    fn handle_touch(&mut self) {
        self.touched += 1;
    }

    #[alarm]
    fn ring(&mut self) {
        self.rung += 1;
    }
}

/// An alarm whose handler runs for ten seconds.
#[durable_object]
pub struct Slow {
    started: u32,
}

#[durable_object]
impl Slow {
    #[handler]
    fn handle_arm(&mut self, ctx: &Context) {
        ctx.schedule_alarm(Slow::WORK, Duration::from_secs(1));
    }

    #[alarm]
    async fn work(&mut self) {
        STARTED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(10)).await;
        self.started += 1;
    }
}

/// An alarm handler that runs for several claim leases (of the short `claim_ttl` its test sets).
#[durable_object]
pub struct Lingering {
    done: u32,
}

#[durable_object]
impl Lingering {
    #[handler]
    fn handle_arm(&mut self, ctx: &Context) {
        ctx.schedule_alarm(Lingering::LINGER, Duration::from_millis(100));
    }

    #[alarm]
    async fn linger(&mut self, ctx: &Context) {
        *LINGER_STARTS
            .lock()
            .unwrap()
            .entry(ctx.id().to_owned())
            .or_default() += 1;
        tokio::time::sleep(Duration::from_secs(3)).await;
        self.done += 1;
    }
}

/// How many times `Lingering::linger` started, by object id, in any runtime.
static LINGER_STARTS: std::sync::Mutex<std::collections::BTreeMap<String, u32>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

/// How many times `Slow::work` started, in any runtime.
static STARTED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

fn micros(time: SystemTime) -> u64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

fn settings() -> AlarmSettings {
    AlarmSettings::default()
        .with_poll_interval(Duration::from_millis(200))
        .with_claim_ttl(Duration::from_millis(600))
        .with_retry(RetryPolicy::new(
            Duration::from_millis(10),
            Duration::from_millis(40),
            4,
        ))
}

fn runtime(store: Arc<dyn Storage>) -> Runtime {
    Runtime::builder(store)
        .alarm_settings(settings())
        .register::<Reminder>()
        .register::<Flaky>()
        .build()
}

/// A runtime that claims alarms `ahead` of their due time, so tests can act on held claims.
fn claiming_early(store: Arc<dyn Storage>, ahead: Duration) -> Runtime {
    Runtime::builder(store)
        .alarm_settings(
            settings()
                .with_claim_ahead(ahead)
                .with_claim_ttl(Duration::from_secs(60)),
        )
        .register::<Reminder>()
        .build()
}

/// Waits until the alarm `name` of Reminder `id` is claimed in storage.
async fn until_claimed(rt: &Runtime, id: &str, name: &str) {
    eventually(|| async {
        rt.list_alarms::<Reminder>(id)
            .await
            .unwrap()
            .iter()
            .any(|a| a.name == name && a.claimed_at.is_some())
    })
    .await;
}

async fn fired(rt: &Runtime, id: &str) -> Vec<String> {
    Reminder::fired(rt, id).await.unwrap()
}

/// Another runtime wrote the object between the alarm's claim and its firing: the firing's
/// commit conflicts. That is contention, not a failure of the alarm: it is not counted as an
/// attempt (here the only one), and the alarm fires once the object has reloaded.
async fn an_alarm_whose_firing_conflicts_is_not_a_failed_attempt(store: Arc<dyn Storage>) {
    let rt1 = Runtime::builder(Arc::clone(&store))
        .alarm_settings(settings().with_retry(RetryPolicy::new(
            Duration::from_millis(10),
            Duration::from_millis(10),
            1,
        )))
        .register::<Contended>()
        .build();
    // The second runtime only writes: its scheduler would take the alarm.
    let rt2 = Runtime::builder(store).manual_alarms().build();
    Contended::arm(&rt1, "c", 300).await.unwrap();
    Contended::touch(&rt2, "c").await.unwrap();
    eventually(|| async {
        let alarms = rt1.list_alarms::<Contended>("c").await.unwrap();
        alarms.is_empty() || alarms[0].dead
    })
    .await;
    let alarms = rt1.list_alarms::<Contended>("c").await.unwrap();
    assert!(alarms.is_empty(), "{alarms:?}");
    let state = rt2.read_state::<Contended>("c").await.unwrap().unwrap();
    assert_eq!((state.touched, state.rung), (1, 1));
}

async fn several_names_coexist_and_fire(store: Arc<dyn Storage>) {
    let rt = runtime(store);
    // Listed while both are an hour away, so that neither fires before the listing however
    // slow the machine; scheduled in the other order, so that the listing's order is the due
    // times'. A minute apart: each delay counts from its own call, and a loaded machine may
    // take a while between the two.
    Reminder::schedule(&rt, "r", "second".into(), 3_660_000)
        .await
        .unwrap();
    Reminder::schedule(&rt, "r", "first".into(), 3_600_000)
        .await
        .unwrap();
    let alarms = rt.list_alarms::<Reminder>("r").await.unwrap();
    let names: Vec<&str> = alarms.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["first", "second"], "listed in due order");
    // Moved to fire soon, in that order.
    Reminder::schedule(&rt, "r", "first".into(), 30)
        .await
        .unwrap();
    Reminder::schedule(&rt, "r", "second".into(), 60)
        .await
        .unwrap();
    eventually(|| async { fired(&rt, "r").await.len() == 2 }).await;
    assert_eq!(fired(&rt, "r").await, ["first", "second"]);
    eventually(|| async { rt.list_alarms::<Reminder>("r").await.unwrap().is_empty() }).await;
}

async fn the_same_name_twice_keeps_one_alarm_with_the_new_time(store: Arc<dyn Storage>) {
    let rt = runtime(store);
    Reminder::schedule(&rt, "r", "first".into(), 60_000)
        .await
        .unwrap();
    let later = SystemTime::now() + Duration::from_secs(3600);
    rt.schedule_alarm("r", Reminder::FIRST, later)
        .await
        .unwrap();
    let alarms = rt.list_alarms::<Reminder>("r").await.unwrap();
    assert_eq!(alarms.len(), 1);
    let drift = alarms[0]
        .due_at
        .duration_since(later)
        .unwrap_or_else(|e| e.duration());
    assert!(drift < Duration::from_millis(1), "{drift:?}");
}

async fn cancelling_one_leaves_the_others_and_it_never_fires(store: Arc<dyn Storage>) {
    let rt = runtime(store);
    // Both an hour away while one is cancelled and the other listed, so that neither can fire
    // first however slow the machine; then the one left is moved to fire soon.
    Reminder::schedule(&rt, "r", "first".into(), 3_600_000)
        .await
        .unwrap();
    Reminder::schedule(&rt, "r", "second".into(), 3_600_000)
        .await
        .unwrap();
    Reminder::cancel_first(&rt, "r").await.unwrap();
    let alarms = rt.list_alarms::<Reminder>("r").await.unwrap();
    assert_eq!(alarms.len(), 1);
    assert_eq!(alarms[0].name, "second");
    Reminder::schedule(&rt, "r", "second".into(), 50)
        .await
        .unwrap();
    eventually(|| async { !fired(&rt, "r").await.is_empty() }).await;
    eventually(|| async { rt.list_alarms::<Reminder>("r").await.unwrap().is_empty() }).await;
    assert_eq!(fired(&rt, "r").await, ["second"]);
}

async fn a_chain_fires_both_and_a_rescheduled_alarm_fires_again(store: Arc<dyn Storage>) {
    let rt = runtime(store);
    Reminder::schedule(&rt, "chain", "chain_a".into(), 10)
        .await
        .unwrap();
    Reminder::schedule(&rt, "again", "again".into(), 10)
        .await
        .unwrap();
    eventually(|| async { fired(&rt, "chain").await.len() == 2 }).await;
    assert_eq!(fired(&rt, "chain").await, ["chain_a", "chain_b"]);
    eventually(|| async { fired(&rt, "again").await.len() == 3 }).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(fired(&rt, "again").await, ["again", "again", "again"]);
    eventually(|| async {
        rt.list_alarms::<Reminder>("again")
            .await
            .unwrap()
            .is_empty()
    })
    .await;
}

async fn alarms_commit_atomically_with_their_call(store: Arc<dyn Storage>) {
    let faulty = FaultyStorage::new(store);
    let rt = runtime(Arc::new(faulty.clone()));
    // The handler fails: its alarm never exists.
    assert!(matches!(
        Reminder::schedule_then_fail(&rt, "atomic").await,
        Err(Error::Handler(_))
    ));
    // The commit fails: the alarm never exists either.
    Reminder::fired(&rt, "atomic").await.unwrap();
    faulty.fail_commits(1);
    assert!(
        Reminder::schedule(&rt, "atomic", "first".into(), 1)
            .await
            .is_err()
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        rt.list_alarms::<Reminder>("atomic")
            .await
            .unwrap()
            .is_empty()
    );
    assert!(fired(&rt, "atomic").await.is_empty());
}

async fn two_runtimes_on_one_database_fire_an_alarm_once(store: Arc<dyn Storage>) {
    let rt1 = runtime(Arc::clone(&store));
    let rt2 = runtime(store);
    for i in 0..20 {
        Reminder::schedule(&rt1, &format!("shared-{i}"), "first".into(), 50)
            .await
            .unwrap();
    }
    // Both schedulers poll; each alarm is claimed by exactly one of them. The object may then
    // be activated in either runtime: read the committed state to count firings.
    tokio::time::sleep(Duration::from_millis(50)).await;
    for i in 0..20 {
        let id = format!("shared-{i}");
        eventually(|| async { rt2.list_alarms::<Reminder>(&id).await.unwrap().is_empty() }).await;
    }
    rt1.shutdown().await;
    rt2.shutdown().await;
    let rt3 = runtime(rt1.storage().clone());
    for i in 0..20 {
        let state = rt3
            .read_state::<Reminder>(&format!("shared-{i}"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(state.fired, ["first"], "object {i}");
    }
}

async fn a_claim_left_by_a_crashed_process_refires_when_its_lease_ends(store: Arc<dyn Storage>) {
    // A process scheduled an alarm, claimed it when due and died mid-handler: the alarm is
    // left claimed in storage.
    let now = truncate_to_micros(SystemTime::now());
    let key = ObjectKey::new("Reminder", "crash");
    store
        .commit(&[ObjectWrite {
            key: key.clone(),
            expected_version: 0,
            state: Some(br#"{"fired":[],"rearm":0}"#.to_vec()),
            alarms: vec![AlarmChange::Set {
                name: "first".to_owned(),
                due_at: now,
                payload: None,
            }],
            kv: Vec::new(),
            idempotency: None,
            fsm: Default::default(),
        }])
        .await
        .unwrap();
    let lease_until = now + Duration::from_millis(600);
    let claimed = store
        .claim_due_alarms(now, now, lease_until, 100)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);

    // A new runtime does not fire it while the lease lasts...
    let rt = runtime(store);
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert!(fired(&rt, "crash").await.is_empty());
    // ...and fires it once the lease, which nobody renews, has ended.
    eventually(|| async { fired(&rt, "crash").await == ["first"] }).await;
    eventually(|| async {
        rt.list_alarms::<Reminder>("crash")
            .await
            .unwrap()
            .is_empty()
    })
    .await;
}

async fn a_failing_alarm_backs_off_then_is_kept_dead_and_can_be_requeued(store: Arc<dyn Storage>) {
    let rt = runtime(store);
    let mut events = rt.subscribe();
    Flaky::arm(&rt, "retry", 3).await.unwrap();
    eventually(|| async { Flaky::seen(&rt, "retry").await.unwrap() == [3] }).await;

    Flaky::arm(&rt, "dead", 100).await.unwrap();
    eventually(|| async {
        let alarms = rt.list_alarms::<Flaky>("dead").await.unwrap();
        alarms.first().is_some_and(|a| a.dead)
    })
    .await;
    let alarm = &rt.list_alarms::<Flaky>("dead").await.unwrap()[0];
    assert_eq!(alarm.attempts, 4);
    assert_eq!(alarm.last_error.as_deref(), Some("attempt 4 failed"));
    let mut failures = 0;
    let mut dead = false;
    for event in durable_tests::received(&mut events) {
        if let Event::AlarmFailed {
            key, dead: last, ..
        } = event
            && key.object_id == "dead"
        {
            failures += 1;
            dead |= last;
        }
    }
    assert_eq!(failures, 4);
    assert!(dead);
    // A dead alarm stays dead...
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(rt.list_alarms::<Flaky>("dead").await.unwrap()[0].dead);
    assert!(Flaky::seen(&rt, "dead").await.unwrap().is_empty());
    // ...until it is re-queued.
    rt.schedule_alarm("dead", Flaky::TRY_IT, Duration::ZERO)
        .await
        .unwrap();
    eventually(|| async {
        rt.list_alarms::<Flaky>("dead")
            .await
            .unwrap()
            .first()
            .is_some_and(|a| a.dead && a.attempts == 4)
    })
    .await;
}

async fn a_restarted_runtime_fires_pending_alarms_without_any_call(store: Arc<dyn Storage>) {
    let rt1 = runtime(Arc::clone(&store));
    Reminder::schedule(&rt1, "restart", "first".into(), 300)
        .await
        .unwrap();
    rt1.shutdown().await;
    drop(rt1);
    let rt2 = runtime(store);
    eventually(|| async {
        rt2.read_state::<Reminder>("restart")
            .await
            .unwrap()
            .is_some_and(|s| s.fired == ["first"])
    })
    .await;
}

async fn the_objects_of_claimed_alarms_start_from_one_batched_read(store: Arc<dyn Storage>) {
    const OBJECTS: usize = 20;
    // Only writes: its scheduler would fire the first alarms if writing them all took longer
    // than their delay, and their objects would never load in the second runtime.
    let rt1 = Runtime::builder(Arc::clone(&store)).manual_alarms().build();
    for i in 0..OBJECTS {
        Reminder::schedule(&rt1, &format!("batch-{i}"), "first".into(), 400)
            .await
            .unwrap();
    }
    rt1.shutdown().await;
    // A fresh runtime, none of the objects live: the claim of their alarms reads their states
    // in one go, and each object loads from what was read (its after-load path included).
    let counted = FaultyStorage::new(store);
    let rt2 = claiming_early(Arc::new(counted.clone()), Duration::from_millis(300));
    let mut events = rt2.subscribe();
    let mut loaded = 0;
    while loaded < OBJECTS {
        let event = tokio::time::timeout(Duration::from_secs(10), events.recv())
            .await
            .expect("every object loads")
            .unwrap();
        if matches!(event, Event::Loaded { ref key } if key.object_id.starts_with("batch-")) {
            loaded += 1;
        }
    }
    let (loads, batch_loads) = (counted.loads(), counted.batch_loads());
    assert_eq!(loads, 0, "no object read its state on its own");
    assert!(batch_loads >= 1, "the states were read in a batch");
    for i in 0..OBJECTS {
        let id = format!("batch-{i}");
        eventually(|| async {
            rt2.read_state::<Reminder>(&id)
                .await
                .unwrap()
                .is_some_and(|s| s.fired == ["first"])
        })
        .await;
    }
    rt2.shutdown().await;
}

async fn only_alarms_due_before_the_next_look_wake_the_scheduler(store: Arc<dyn Storage>) {
    let counted = FaultyStorage::new(store);
    let rt = Runtime::builder(counted.clone())
        .alarm_settings(settings().with_poll_interval(Duration::from_secs(30)))
        .register::<Reminder>()
        .build();
    let hour = 3_600_000;
    Reminder::schedule(&rt, "far-0", "first".into(), hour)
        .await
        .unwrap();
    // The scheduler looked, and sleeps until its poll: its count of looks settles.
    let mut looks = counted.claims();
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = counted.claims();
        if now == looks {
            break;
        }
        looks = now;
    }
    for i in 1..20 {
        Reminder::schedule(&rt, &format!("far-{i}"), "first".into(), hour)
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        counted.claims(),
        looks,
        "alarms due after the scheduler's next look did not wake it"
    );
    // One due before it does, and fires on time.
    Reminder::schedule(&rt, "soon", "first".into(), 200)
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), async {
        while fired(&rt, "soon").await != ["first"] {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the earlier alarm woke the scheduler");
    assert!(counted.claims() > looks);
    rt.shutdown().await;
}

async fn an_alarm_for_an_unknown_type_is_reported_and_kept(store: Arc<dyn Storage>) {
    // The scheduling runtime fires no alarms: on a loaded machine it could otherwise fire the
    // alarm (due in 1 ms) before it shuts down, leaving nothing for the next runtime to report.
    let rt1 = Runtime::builder(Arc::clone(&store))
        .alarm_settings(settings())
        .register::<Reminder>()
        .manual_alarms()
        .build();
    Reminder::schedule(&rt1, "orphan", "first".into(), 1)
        .await
        .unwrap();
    rt1.shutdown().await;
    // A runtime that does not know `Reminder`.
    let rt2 = Runtime::builder(Arc::clone(&store))
        .alarm_settings(settings())
        .register::<Flaky>()
        .build();
    let mut events = rt2.subscribe();
    let event = tokio::time::timeout(Duration::from_secs(5), events.recv())
        .await
        .expect("reported")
        .unwrap();
    assert!(
        matches!(event, Event::UnknownAlarmType { ref key, .. } if key.object_id == "orphan"),
        "{event:?}"
    );
    rt2.shutdown().await;
    let rt3 = runtime(store);
    assert_eq!(
        rt3.list_alarms::<Reminder>("orphan").await.unwrap().len(),
        1
    );
    eventually(|| async { fired(&rt3, "orphan").await == ["first"] }).await;
}

async fn alarms_wake_hibernated_and_shut_down_objects(store: Arc<dyn Storage>) {
    let idle = |options: ObjectOptions| {
        Runtime::builder(Arc::clone(&store))
            .alarm_settings(settings())
            .register_with::<Reminder>(options)
            .build()
    };
    // Hibernated: the alarm wakes it. Due far enough ahead that the object hibernates first
    // on a loaded machine; the status is awaited, not slept for.
    let rt = idle(ObjectOptions::new().with_hibernate_after(Duration::from_millis(20)));
    Reminder::schedule(&rt, "sleepy", "first".into(), 1_500)
        .await
        .unwrap();
    eventually(|| async {
        rt.status::<Reminder>("sleepy").await.unwrap() == durable_runtime::ObjectStatus::Hibernated
    })
    .await;
    eventually(|| async { fired(&rt, "sleepy").await == ["first"] }).await;
    rt.shutdown().await;

    // Shut down: the alarm starts it again.
    let rt = idle(ObjectOptions::new().with_shutdown_after(Duration::from_millis(20)));
    Reminder::schedule(&rt, "gone", "second".into(), 1_500)
        .await
        .unwrap();
    eventually(|| async { rt.live_objects::<Reminder>() == 0 }).await;
    eventually(|| async {
        rt.read_state::<Reminder>("gone")
            .await
            .unwrap()
            .is_some_and(|s| s.fired == ["second"])
    })
    .await;
}

async fn deleting_an_object_removes_its_alarms(store: Arc<dyn Storage>) {
    let rt = runtime(store);
    Reminder::schedule(&rt, "doomed", "first".into(), 60_000)
        .await
        .unwrap();
    Reminder::schedule(&rt, "doomed", "second".into(), 60_000)
        .await
        .unwrap();
    assert_eq!(rt.list_alarms::<Reminder>("doomed").await.unwrap().len(), 2);
    assert!(rt.delete::<Reminder>("doomed").await.unwrap());
    assert!(
        rt.list_alarms::<Reminder>("doomed")
            .await
            .unwrap()
            .is_empty()
    );
    assert!(rt.read_state::<Reminder>("doomed").await.unwrap().is_none());
}

async fn an_alarm_cancelled_while_claimed_ahead_never_fires(store: Arc<dyn Storage>) {
    let rt = claiming_early(store, Duration::from_secs(5));
    Reminder::schedule(&rt, "held", "first".into(), 400)
        .await
        .unwrap();
    Reminder::schedule(&rt, "held", "second".into(), 400)
        .await
        .unwrap();
    until_claimed(&rt, "held", "first").await;
    until_claimed(&rt, "held", "second").await;
    Reminder::cancel_first(&rt, "held").await.unwrap();
    eventually(|| async { !fired(&rt, "held").await.is_empty() }).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(fired(&rt, "held").await, ["second"]);
    assert!(rt.list_alarms::<Reminder>("held").await.unwrap().is_empty());
}

async fn an_alarm_moved_while_claimed_ahead_fires_once_at_its_new_time(store: Arc<dyn Storage>) {
    // The new time is beyond the claim horizon, so the scheduler does not claim it again
    // before the old time.
    let rt = claiming_early(store, Duration::from_millis(700));
    Reminder::schedule(&rt, "moved", "first".into(), 200)
        .await
        .unwrap();
    until_claimed(&rt, "moved", "first").await;
    let new_due = SystemTime::now() + Duration::from_millis(1_500);
    rt.schedule_alarm("moved", Reminder::FIRST, new_due)
        .await
        .unwrap();
    // Past the old due time: the old claim was revoked, so nothing fired.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(fired(&rt, "moved").await.is_empty());
    eventually(|| async { !fired(&rt, "moved").await.is_empty() }).await;
    assert!(SystemTime::now() >= new_due);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(fired(&rt, "moved").await, ["first"]);
    assert!(
        rt.list_alarms::<Reminder>("moved")
            .await
            .unwrap()
            .is_empty()
    );
}

async fn shutdown_releases_claims_taken_ahead(store: Arc<dyn Storage>) {
    let rt1 = claiming_early(Arc::clone(&store), Duration::from_secs(5));
    Reminder::schedule(&rt1, "released", "first".into(), 1_000)
        .await
        .unwrap();
    until_claimed(&rt1, "released", "first").await;
    rt1.shutdown().await;
    let alarms = rt1.list_alarms::<Reminder>("released").await.unwrap();
    assert_eq!(alarms.len(), 1);
    assert_eq!(alarms[0].claimed_at, None, "released at shutdown");
    // A restart fires it when due, without waiting for a 60 s claim to expire.
    let rt2 = claiming_early(store, Duration::from_secs(5));
    eventually(|| async { fired(&rt2, "released").await == ["first"] }).await;
}

/// Reading the objects of claimed alarms takes longer than `claim_ahead`: the first alarm
/// fires late, and the scheduler then claims earlier, by twice what a look took, so that
/// later ones fire on time.
async fn alarms_are_claimed_earlier_when_storage_is_slow(store: Arc<dyn Storage>) {
    let ids = ["slow-a", "slow-b", "slow-c"];
    let rt1 = Runtime::builder(Arc::clone(&store))
        .alarm_settings(settings())
        .register::<Punctual>()
        .build();
    for (i, id) in ids.iter().enumerate() {
        Punctual::arm(&rt1, id, 800 + 900 * i as u64).await.unwrap();
    }
    rt1.shutdown().await;
    drop(rt1);
    // None of the objects is live in the new runtime: each look reads their states.
    let slow = FaultyStorage::new(store);
    slow.delay_loads(Duration::from_millis(250));
    let rt2 = Runtime::builder(slow.clone())
        .alarm_settings(
            settings()
                .with_claim_ahead(Duration::from_millis(50))
                .with_claim_ttl(Duration::from_secs(60)),
        )
        .register::<Punctual>()
        .build();
    let mut late = Vec::new();
    for id in ids {
        let state = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                if let Some(state) = rt2.read_state::<Punctual>(id).await.unwrap()
                    && let [late] = state.late_micros[..]
                {
                    return late;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .expect("the alarm fires");
        late.push(Duration::from_micros(state));
    }
    rt2.shutdown().await;
    // The first look read with the 50 ms lead; by the last alarm the scheduler claims twice
    // the 250 ms a look takes ahead. (Without the longer lead every alarm is about 200 ms late.)
    assert!(late[0] >= Duration::from_millis(150), "{late:?}");
    assert!(late[2] < Duration::from_millis(150), "{late:?}");
}

/// Two runtimes on one database for [`Lingering`] objects, with leases of `claim_ttl`: the
/// first on `first` (a fault-injecting wrapper of `store`), the second on `store` itself.
fn lingering_pair(
    first: FaultyStorage<Arc<dyn Storage>>,
    store: Arc<dyn Storage>,
    claim_ttl: Duration,
) -> (Runtime, Runtime) {
    let settings = settings().with_claim_ttl(claim_ttl);
    let runtime = |store: Arc<dyn Storage>| {
        Runtime::builder(store)
            .alarm_settings(settings)
            .register::<Lingering>()
            .build()
    };
    (runtime(Arc::new(first)), runtime(store))
}

/// Waits until the `count` [`Lingering`] objects `{prefix}0`.. have run their alarm to its end,
/// then checks that each alarm started once and is gone.
async fn each_lingered_once(rt1: &Runtime, rt2: &Runtime, prefix: &str, count: usize) {
    eventually(|| async {
        let mut done = 0;
        for i in 0..count {
            let state = rt2.read_state::<Lingering>(&format!("{prefix}{i}")).await;
            done += usize::from(state.unwrap().is_some_and(|s| s.done >= 1));
        }
        done == count
    })
    .await;
    let starts = LINGER_STARTS.lock().unwrap().clone();
    for i in 0..count {
        let id = format!("{prefix}{i}");
        assert_eq!(starts.get(&id), Some(&1), "{id} fired once: {starts:?}");
        assert!(rt1.list_alarms::<Lingering>(&id).await.unwrap().is_empty());
        let state = rt1.read_state::<Lingering>(&id).await.unwrap().unwrap();
        assert_eq!(state.done, 1, "{id}");
    }
}

/// Many alarms of two runtimes on one database fire for longer than several leases: each
/// runtime renews all the claims it holds together (one storage call, one statement on SQLite),
/// so neither takes over an alarm the other is firing, and each fires once. The first runtime's
/// storage delays its commits, so that its claims are held longer still.
async fn many_claims_renewed_together_hold_across_two_runtimes(store: Arc<dyn Storage>) {
    const ALARMS: usize = 40;
    // Ids of this backend's run only: the three backends' tests share the counter.
    let prefix = format!("linger-{}-", rand_suffix());
    let faulty = FaultyStorage::new(Arc::clone(&store));
    faulty.delay_commits(Duration::from_millis(20));
    let (rt1, rt2) = lingering_pair(faulty, store, Duration::from_secs(1));
    for i in 0..ALARMS {
        let rt = if i % 2 == 0 { &rt1 } else { &rt2 };
        Lingering::arm(rt, &format!("{prefix}{i}")).await.unwrap();
    }
    each_lingered_once(&rt1, &rt2, &prefix, ALARMS).await;
}

/// The first runtime's storage takes 600 ms to renew claims, with leases of two seconds: the
/// next renewal follows a slow one at once, and later ones are sent that much earlier, so that
/// a claim taken at any moment between two renewals is renewed before its lease ends and no
/// alarm is taken over by the second runtime while it fires. (Sent a quarter of the lease
/// after a slow renewal returned, a renewal came 100 ms late for the claims taken in the last
/// 200 ms before the one in flight was sent.)
async fn claims_are_renewed_in_time_when_renewals_are_slow(store: Arc<dyn Storage>) {
    const ALARMS: usize = 24;
    let prefix = format!("slow-renew-{}-", rand_suffix());
    let faulty = FaultyStorage::new(Arc::clone(&store));
    faulty.delay_renewals(Duration::from_millis(600));
    let (rt1, rt2) = lingering_pair(faulty, store, Duration::from_secs(2));
    // Armed on the first runtime (which claims first, woken by its own write), 35 ms apart: its
    // claims are taken at every phase of its renewals.
    for i in 0..ALARMS {
        Lingering::arm(&rt1, &format!("{prefix}{i}")).await.unwrap();
        tokio::time::sleep(Duration::from_millis(35)).await;
    }
    each_lingered_once(&rt1, &rt2, &prefix, ALARMS).await;
}

/// The gates of the alarms of [`Gated`] objects, by test run: an alarm's handler waits at its
/// run's gate until the test opens it.
static GATES: std::sync::LazyLock<std::sync::Mutex<HashMap<String, Arc<Gate>>>> =
    std::sync::LazyLock::new(Default::default);

struct Gate {
    open: tokio::sync::Semaphore,
    entered: std::sync::atomic::AtomicUsize,
}

impl Default for Gate {
    fn default() -> Self {
        Self {
            open: tokio::sync::Semaphore::new(0),
            entered: Default::default(),
        }
    }
}

/// The gate of the run whose ids start with `run`.
fn gate(run: &str) -> Arc<Gate> {
    let mut gates = GATES.lock().unwrap();
    Arc::clone(gates.entry(run.to_owned()).or_default())
}

/// An object whose alarm handler waits at its test run's gate: alarms that cannot finish
/// firing until the test lets them.
#[durable_object]
pub struct Gated {
    rung: u32,
}

#[durable_object]
impl Gated {
    #[handler]
    fn handle_arm(&mut self, ctx: &Context, after_ms: u64) {
        ctx.schedule_alarm(Gated::RING, Duration::from_millis(after_ms));
    }

    #[alarm]
    async fn ring(&mut self, ctx: &Context) {
        let run = ctx.key().object_id.rsplit_once('-').unwrap().0.to_owned();
        let gate = gate(&run);
        gate.entered
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        gate.open.acquire().await.unwrap().forget();
        self.rung += 1;
    }
}

/// A burst of due alarms larger than `max_claimed` is claimed as firings make room, and two
/// runtimes on one database share it: while no firing can finish, each holds exactly
/// `max_claimed` claims in storage and fires no more; once they finish, every alarm fires
/// once.
async fn a_burst_of_due_alarms_is_claimed_as_firings_make_room(store: Arc<dyn Storage>) {
    const OBJECTS: usize = 40;
    const MAX_CLAIMED: usize = 8;
    let run = format!("burst{}", rand_suffix());
    let gate = gate(&run);
    let ids: Vec<String> = (0..OBJECTS).map(|i| format!("{run}-{i}")).collect();
    // Written in one group commit by a runtime that fires nothing: all due at about one time.
    let writer = Runtime::builder(Arc::clone(&store))
        .manual_alarms()
        .register::<Gated>()
        .build();
    futures_util::future::try_join_all(ids.iter().map(|id| Gated::arm(&writer, id, 100)))
        .await
        .unwrap();
    writer.shutdown().await;
    let capped = || {
        Runtime::builder(Arc::clone(&store))
            .alarm_settings(settings().with_max_claimed(MAX_CLAIMED))
            .register::<Gated>()
            .build()
    };
    let (rt, other) = (capped(), capped());
    let entered = || gate.entered.load(std::sync::atomic::Ordering::SeqCst);
    eventually(|| async { entered() == 2 * MAX_CLAIMED }).await;
    // Time for the scheduler to claim more, were it not capped (leases are renewed meanwhile).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut claimed = 0;
    for id in &ids {
        let alarms = store
            .list_alarms(&ObjectKey::new("Gated", id.clone()))
            .await
            .unwrap();
        assert_eq!(alarms.len(), 1, "{id}");
        claimed += usize::from(alarms[0].claimed_at.is_some());
    }
    assert_eq!(
        claimed,
        2 * MAX_CLAIMED,
        "alarms claimed while none could finish"
    );
    assert_eq!(
        entered(),
        2 * MAX_CLAIMED,
        "alarms fired while none could finish"
    );
    gate.open.add_permits(OBJECTS);
    // Each object's stored state, read from storage: either runtime may have fired it.
    for id in &ids {
        let key = ObjectKey::new("Gated", id.clone());
        eventually(|| async { store.list_alarms(&key).await.unwrap().is_empty() }).await;
        let stored = match store.load(&key).await.unwrap() {
            durable_runtime::storage::Loaded::Object(stored) => stored,
            other => panic!("{id} is not stored: {other:?}"),
        };
        let state: serde_json::Value = serde_json::from_slice(&stored.state).unwrap();
        assert_eq!(state["rung"], 1, "{id}");
    }
    assert_eq!(entered(), OBJECTS);
    rt.shutdown().await;
    other.shutdown().await;
}

/// A suffix that tells this test run's ids from another's.
fn rand_suffix() -> u128 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

backend_tests!(
    many_claims_renewed_together_hold_across_two_runtimes,
    claims_are_renewed_in_time_when_renewals_are_slow,
    an_alarm_whose_firing_conflicts_is_not_a_failed_attempt,
    alarms_are_claimed_earlier_when_storage_is_slow,
    an_alarm_cancelled_while_claimed_ahead_never_fires,
    an_alarm_moved_while_claimed_ahead_fires_once_at_its_new_time,
    shutdown_releases_claims_taken_ahead,
    a_burst_of_due_alarms_is_claimed_as_firings_make_room,
    alarms_wake_hibernated_and_shut_down_objects,
    deleting_an_object_removes_its_alarms,
    several_names_coexist_and_fire,
    the_same_name_twice_keeps_one_alarm_with_the_new_time,
    cancelling_one_leaves_the_others_and_it_never_fires,
    a_chain_fires_both_and_a_rescheduled_alarm_fires_again,
    alarms_commit_atomically_with_their_call,
    two_runtimes_on_one_database_fire_an_alarm_once,
    a_claim_left_by_a_crashed_process_refires_when_its_lease_ends,
    a_failing_alarm_backs_off_then_is_kept_dead_and_can_be_requeued,
    a_restarted_runtime_fires_pending_alarms_without_any_call,
    the_objects_of_claimed_alarms_start_from_one_batched_read,
    only_alarms_due_before_the_next_look_wake_the_scheduler,
    an_alarm_for_an_unknown_type_is_reported_and_kept,
);

#[tokio::test]
async fn extreme_scheduler_settings_neither_stop_nor_spin_the_scheduler() {
    // A poll interval too long to add to a time, and a claim batch of none.
    let store = FaultyStorage::new(durable_runtime::storage::MemoryStorage::new());
    let mut alarm_settings = settings().with_poll_interval(Duration::MAX);
    alarm_settings.claim_batch = 0;
    let rt = Runtime::builder(store.clone())
        .alarm_settings(alarm_settings)
        .register::<Reminder>()
        .build();
    Reminder::schedule(&rt, "r", "first".into(), 30)
        .await
        .unwrap();
    Reminder::schedule(&rt, "r", "second".into(), 60)
        .await
        .unwrap();
    eventually(|| async { fired(&rt, "r").await.len() == 2 }).await;
    let looks = store.claims();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let more = store.claims() - looks;
    assert!(more <= 2, "{more} looks at storage while no alarm was due");
}

/// A runtime on tokio's paused clock, claiming alarms `ahead` of their due time.
fn paused_runtime(store: impl Storage, ahead: Duration) -> Runtime {
    Runtime::builder(store)
        .alarm_settings(AlarmSettings::default().with_claim_ahead(ahead))
        .clock_follows_tokio()
        .register::<Reminder>()
        .build()
}

/// Sleeps (paused clock) until `at` after `start` on the runtime's clock.
async fn until(rt: &Runtime, start: SystemTime, at: Duration) {
    let now = rt.now().duration_since(start).unwrap();
    tokio::time::sleep(at.saturating_sub(now)).await;
}

/// Whether an event loading the object `id` was published since the last look.
fn drained_a_load(events: &mut tokio::sync::broadcast::Receiver<Event>, id: &str) -> bool {
    let mut loaded = false;
    while let Ok(event) = events.try_recv() {
        loaded |= matches!(event, Event::Loaded { ref key } if key.object_id == id);
    }
    loaded
}

/// Writes, through a runtime that fires nothing, the alarm `first` of `id` due `after_ms` on.
async fn write_alarm(
    store: &FaultyStorage<durable_runtime::storage::MemoryStorage>,
    id: &str,
    after_ms: u64,
) {
    let writer = Runtime::builder(store.clone())
        .clock_follows_tokio()
        .manual_alarms()
        .build();
    Reminder::schedule(&writer, id, "first".into(), after_ms)
        .await
        .unwrap();
    writer.shutdown().await;
}

/// A snapshot of a local metrics recorder.
type Snapshot = Vec<(
    metrics_util::CompositeKey,
    Option<metrics::Unit>,
    Option<metrics::SharedString>,
    metrics_util::debugging::DebugValue,
)>;

/// How many calls of `handler` went out, in `snapshot`.
fn calls_of(snapshot: &Snapshot, handler: &str) -> u64 {
    snapshot
        .iter()
        .filter(|(key, ..)| {
            key.key().name() == durable_runtime::metrics::CALLS
                && key
                    .key()
                    .labels()
                    .any(|label| label.key() == "handler" && label.value() == handler)
        })
        .map(|(.., value)| match value {
            metrics_util::debugging::DebugValue::Counter(n) => *n,
            _ => 0,
        })
        .sum()
}

/// How many alarms of `Reminder` were counted as fired with `outcome`, in `snapshot`: the
/// counter's labels are the type and the outcome, exactly.
fn alarms_fired(snapshot: &Snapshot, outcome: &str) -> u64 {
    snapshot
        .iter()
        .filter(|(key, ..)| {
            let labels: Vec<(&str, &str)> = key
                .key()
                .labels()
                .map(|label| (label.key(), label.value()))
                .collect();
            key.key().name() == durable_runtime::metrics::ALARMS_FIRED
                && labels == [("type", "Reminder"), ("outcome", outcome)]
        })
        .map(|(.., value)| match value {
            metrics_util::debugging::DebugValue::Counter(n) => *n,
            _ => 0,
        })
        .sum()
}

/// An alarm claimed ahead fires as one call of its object: the object the claim's batched read
/// started decodes its state as it starts, ahead of the due time, with no call of its own. One
/// that read missed (it failed) is activated by a call ahead of the due time, loading its state
/// on its own, so that its load is not paid late either. A firing is counted by type and outcome.
#[tokio::test(start_paused = true)]
async fn an_alarm_claimed_ahead_fires_as_one_call_and_a_missed_object_loads_ahead() {
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    // This test's tasks all run on this thread (a current-thread runtime).
    let _local = metrics::set_default_local_recorder(&recorder);
    let store = FaultyStorage::new(durable_runtime::storage::MemoryStorage::new());
    write_alarm(&store, "batched", 3_000).await;
    let loads = store.loads();
    let rt = paused_runtime(store.clone(), Duration::from_secs(5));
    let mut events = rt.subscribe();
    let start = rt.now();
    until(&rt, start, Duration::from_secs(1)).await;
    assert!(
        rt.list_alarms::<Reminder>("batched").await.unwrap()[0]
            .claimed_at
            .is_some()
    );
    assert!(drained_a_load(&mut events, "batched"), "not loaded ahead");
    assert_eq!(store.loads(), loads, "no object read its state on its own");
    until(&rt, start, Duration::from_millis(3_100)).await;
    let snapshot = snapshotter.snapshot().into_vec();
    assert_eq!(calls_of(&snapshot, "activate"), 0, "activated by a call");
    assert_eq!(calls_of(&snapshot, "alarm"), 1);
    assert_eq!(
        alarms_fired(&snapshot, "ok"),
        1,
        "counted by type and outcome"
    );
    assert_eq!(fired(&rt, "batched").await, ["first"]);
    rt.shutdown().await;

    write_alarm(&store, "missed", 3_000).await;
    let loads = store.loads();
    // The claim's batched read fails: the object loads on its own, ahead of its due time.
    store.fail_loads(1);
    let rt = paused_runtime(store.clone(), Duration::from_secs(5));
    let mut events = rt.subscribe();
    let start = rt.now();
    until(&rt, start, Duration::from_secs(1)).await;
    assert!(drained_a_load(&mut events, "missed"), "not loaded ahead");
    assert_eq!(store.loads(), loads + 1);
    let snapshot = snapshotter.snapshot().into_vec();
    assert_eq!(calls_of(&snapshot, "activate"), 1);
    until(&rt, start, Duration::from_millis(3_100)).await;
    assert_eq!(fired(&rt, "missed").await, ["first"]);
    rt.shutdown().await;
}

/// The next batch of due alarms is claimed while the objects of the batch before are read:
/// a burst is claimed at the pace of the store's claims, not of a claim and a read in turn.
/// Each alarm still fires once, after its object's state was read.
#[tokio::test(start_paused = true)]
async fn the_next_batch_is_claimed_while_the_objects_of_the_last_are_read() {
    const READ: Duration = Duration::from_secs(2);
    let store = FaultyStorage::new(durable_runtime::storage::MemoryStorage::new());
    let ids = ["piped-a", "piped-b", "piped-c"];
    for id in ids {
        write_alarm(&store, id, 3_000).await;
    }
    let (claims, reads) = (store.claims(), store.batch_loads());
    store.delay_loads(READ);
    let mut settings = AlarmSettings::default().with_claim_ahead(Duration::from_secs(5));
    settings.claim_batch = 1;
    let rt = Runtime::builder(store.clone())
        .alarm_settings(settings)
        .clock_follows_tokio()
        .register::<Reminder>()
        .build();
    let started = tokio::time::Instant::now();
    while store.claims() < claims + 2 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(
        started.elapsed() < READ,
        "the second claim waited {:?} for the first batch's read",
        started.elapsed()
    );
    assert_eq!(store.batch_loads(), reads + 1, "one read in flight");
    tokio::time::sleep(Duration::from_secs(10)).await;
    for id in ids {
        assert_eq!(fired(&rt, id).await, ["first"], "{id}");
    }
    assert_eq!(
        store.batch_loads(),
        reads + ids.len(),
        "each batch read once"
    );
    rt.shutdown().await;
}

/// A runtime shut down while the objects of its last claimed batch are read releases that
/// batch's claims too: a restart fires the alarm at once, without waiting for the lease.
#[tokio::test(start_paused = true)]
async fn a_shutdown_during_a_batch_read_releases_its_claims() {
    let store = FaultyStorage::new(durable_runtime::storage::MemoryStorage::new());
    write_alarm(&store, "read-at-shutdown", 3_000).await;
    let reads = store.batch_loads();
    store.delay_loads(Duration::from_secs(2));
    let rt = paused_runtime(store.clone(), Duration::from_secs(5));
    while store.batch_loads() == reads {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let key = ObjectKey::new("Reminder", "read-at-shutdown");
    assert!(
        store.list_alarms(&key).await.unwrap()[0]
            .claimed_at
            .is_some()
    );
    rt.shutdown().await;
    let alarms = store.list_alarms(&key).await.unwrap();
    assert_eq!(alarms.len(), 1);
    assert_eq!(alarms[0].claimed_at, None, "released at shutdown");
}

#[tokio::test(start_paused = true)]
async fn a_failed_write_that_moves_a_claimed_alarm_leaves_it_firing_at_its_time() {
    let store = FaultyStorage::new(durable_runtime::storage::MemoryStorage::new());
    let rt = paused_runtime(store.clone(), Duration::from_millis(500));
    let start = rt.now();
    Reminder::schedule(&rt, "moved", "first".into(), 1_000)
        .await
        .unwrap();
    until(&rt, start, Duration::from_millis(700)).await;
    assert!(
        rt.list_alarms::<Reminder>("moved").await.unwrap()[0]
            .claimed_at
            .is_some()
    );
    // Moving it an hour ahead revokes the claim held in memory; the write fails.
    store.fail_commits(1);
    let moved = Reminder::schedule(&rt, "moved", "first".into(), 3_600_000).await;
    assert!(moved.is_err());
    // The alarm is as it was: due at 1 s, and it fires then.
    until(&rt, start, Duration::from_millis(1_100)).await;
    assert_eq!(fired(&rt, "moved").await, ["first"]);
    assert!(
        rt.list_alarms::<Reminder>("moved")
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_delete_leaves_the_claimed_alarms_firing_at_their_time() {
    let store = FaultyStorage::new(durable_runtime::storage::MemoryStorage::new());
    let rt = paused_runtime(store.clone(), Duration::from_millis(500));
    let start = rt.now();
    Reminder::schedule(&rt, "kept", "first".into(), 1_000)
        .await
        .unwrap();
    until(&rt, start, Duration::from_millis(700)).await;
    assert!(
        rt.list_alarms::<Reminder>("kept").await.unwrap()[0]
            .claimed_at
            .is_some()
    );
    store.fail_deletes(1);
    assert!(rt.delete::<Reminder>("kept").await.is_err());
    until(&rt, start, Duration::from_millis(1_100)).await;
    assert_eq!(fired(&rt, "kept").await, ["first"]);
}

/// Runtime A deletes an object while runtime B holds a claim on its alarm (taken ahead): B's
/// firing finds no alarm under its claim and does not run the handler, which would store the
/// deleted object again.
#[tokio::test(start_paused = true)]
async fn an_alarm_claimed_before_its_object_was_deleted_elsewhere_does_not_recreate_it() {
    let store = durable_runtime::storage::MemoryStorage::new();
    let rt_a = Runtime::builder(store.clone())
        .clock_follows_tokio()
        .manual_alarms()
        .build();
    let start = rt_a.now();
    Contended::arm(&rt_a, "d", 3_000).await.unwrap();
    // B claims it at once (5 s ahead), starts the object, which then shuts down when idle.
    let rt_b = Runtime::builder(store)
        .alarm_settings(AlarmSettings::default().with_claim_ahead(Duration::from_secs(5)))
        .clock_follows_tokio()
        .register_with::<Contended>(
            ObjectOptions::new().with_shutdown_after(Duration::from_millis(100)),
        )
        .build();
    until(&rt_a, start, Duration::from_millis(500)).await;
    let alarms = rt_a.list_alarms::<Contended>("d").await.unwrap();
    assert!(alarms[0].claimed_at.is_some(), "claimed by B");
    assert!(rt_a.delete::<Contended>("d").await.unwrap());
    // Past the due time.
    until(&rt_a, start, Duration::from_secs(4)).await;
    assert!(rt_a.list_alarms::<Contended>("d").await.unwrap().is_empty());
    assert!(
        rt_a.read_state::<Contended>("d").await.unwrap().is_none(),
        "the deleted object came back"
    );
    drop(rt_b);
}

/// A handler that runs far longer than a claim's lease: its runtime renews the lease, so a
/// second runtime on the same database never takes the alarm over and fires it again.
#[tokio::test(start_paused = true)]
async fn a_claim_is_renewed_while_its_alarm_fires() {
    let store = durable_runtime::storage::MemoryStorage::new();
    let runtime = || {
        Runtime::builder(store.clone())
            .alarm_settings(AlarmSettings::default().with_poll_interval(Duration::from_millis(300)))
            .clock_follows_tokio()
            .register_with::<Slow>(ObjectOptions::new().with_call_timeout(Duration::from_secs(60)))
            .build()
    };
    let (rt1, rt2) = (runtime(), runtime());
    let start = rt1.now();
    Slow::arm(&rt1, "slow").await.unwrap();
    // Ten seconds of handler: more than six leases of 1.5 s.
    until(&rt1, start, Duration::from_secs(15)).await;
    assert_eq!(STARTED.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert!(rt1.list_alarms::<Slow>("slow").await.unwrap().is_empty());
    let state = rt2.read_state::<Slow>("slow").await.unwrap().unwrap();
    assert_eq!(state.started, 1);
}
