//! Alarms set or cancelled from outside an object that is not live are written directly to
//! storage, without starting it; one that is live gets them through its calls. Either way the
//! object's own writes and the outside ones never lose each other, and a new alarm beyond the
//! per-object limit is refused with nothing written.

use std::time::Duration;

use durable_runtime::storage::{AlarmChange, ObjectKey, ObjectWrite, Storage};
use durable_runtime::testing::FaultyStorage;
use durable_runtime::{
    AlarmSettings, Context, Error, MemoryStorage, ObjectStatus, Runtime, durable_object,
};
use durable_tests::Backend;

#[durable_object]
pub struct Job {
    runs: u32,
}

#[durable_object]
impl Job {
    #[handler]
    fn handle_bump(&mut self, ctx: &Context) -> u32 {
        self.runs += 1;
        ctx.schedule_alarm_with(Job::REPORT, &None, Duration::from_secs(7200))
            .expect("no note encodes");
        self.runs
    }

    #[alarm]
    fn run(&mut self) {
        self.runs += 1;
    }

    #[alarm]
    fn report(&mut self, note: Option<String>) {
        let _ = note;
    }

    #[alarm]
    fn sweep(&mut self) {}
}

const HOUR: Duration = Duration::from_secs(3600);

async fn names(rt: &Runtime, id: &str) -> Vec<String> {
    let mut names: Vec<String> = rt
        .list_alarms::<Job>(id)
        .await
        .unwrap()
        .into_iter()
        .map(|alarm| alarm.name)
        .collect();
    names.sort();
    names
}

/// A bump that retries the conflict a direct write may cause an instance loaded before it.
async fn bump(rt: &Runtime, id: &str) -> u32 {
    for _ in 0..10 {
        match Job::bump(rt, id).await {
            Err(Error::Conflict { .. }) => continue,
            other => return other.unwrap(),
        }
    }
    panic!("bump kept conflicting");
}

/// Stored by one runtime, scheduled and cancelled through another where it is not live: the
/// alarms are in storage, and the object was never started there.
async fn outside_changes_do_not_start_the_object(backend: &Backend) {
    let owner = Runtime::builder(backend.store.clone())
        .manual_alarms()
        .build();
    assert_eq!(bump(&owner, "j1").await, 1);
    owner.shutdown().await;

    let other = Runtime::builder(backend.open_again().await)
        .manual_alarms()
        .build();
    let mut events = other.subscribe();
    other.schedule_alarm("j1", Job::RUN, HOUR).await.unwrap();
    other
        .schedule_alarm_with("j1", Job::REPORT, &Some("weekly".into()), HOUR)
        .await
        .unwrap();
    other.cancel_alarm("j1", Job::SWEEP).await.unwrap(); // none: nothing written
    assert_eq!(names(&other, "j1").await, ["report", "run"]);
    other.cancel_alarm("j1", Job::RUN).await.unwrap();
    assert_eq!(names(&other, "j1").await, ["report"]);
    assert_eq!(
        other.status::<Job>("j1").await.unwrap(),
        ObjectStatus::Stored
    );
    assert!(
        durable_tests::received(&mut events).is_empty(),
        "never loaded"
    );

    // The object's next call starts from the stored state and keeps the outside alarm.
    assert_eq!(bump(&other, "j1").await, 2);
    other.cancel_all_alarms::<Job>("j1").await.unwrap();
    assert!(names(&other, "j1").await.is_empty());
    other.shutdown().await;
}

#[tokio::test]
async fn outside_changes_do_not_start_the_object_memory() {
    outside_changes_do_not_start_the_object(&durable_tests::memory().await).await;
}

#[tokio::test]
async fn outside_changes_do_not_start_the_object_sqlite() {
    outside_changes_do_not_start_the_object(&durable_tests::sqlite().await).await;
}

#[tokio::test]
async fn outside_changes_do_not_start_the_object_postgres() {
    if let Some(backend) = durable_tests::postgres().await {
        outside_changes_do_not_start_the_object(&backend).await;
    }
}

/// The object is live in one runtime while another writes its alarms directly: the live
/// instance's next write conflicts and reloads, and both sides' changes stay.
async fn a_live_instance_elsewhere_keeps_both_changes(backend: &Backend) {
    let live = Runtime::builder(backend.store.clone())
        .manual_alarms()
        .build();
    let other = Runtime::builder(backend.open_again().await)
        .manual_alarms()
        .build();
    for round in 1..=5u32 {
        assert_eq!(bump(&live, "j1").await, round);
        other.schedule_alarm("j1", Job::RUN, HOUR).await.unwrap();
        assert_eq!(names(&other, "j1").await, ["report", "run"]);
        other.cancel_alarm("j1", Job::RUN).await.unwrap();
        assert_eq!(names(&live, "j1").await, ["report"]);
    }
    assert_eq!(live.read_state::<Job>("j1").await.unwrap().unwrap().runs, 5);
    live.shutdown().await;
    other.shutdown().await;
}

#[tokio::test]
async fn a_live_instance_elsewhere_keeps_both_changes_memory() {
    a_live_instance_elsewhere_keeps_both_changes(&durable_tests::memory().await).await;
}

#[tokio::test]
async fn a_live_instance_elsewhere_keeps_both_changes_sqlite() {
    a_live_instance_elsewhere_keeps_both_changes(&durable_tests::sqlite().await).await;
}

#[tokio::test]
async fn a_live_instance_elsewhere_keeps_both_changes_postgres() {
    if let Some(backend) = durable_tests::postgres().await {
        a_live_instance_elsewhere_keeps_both_changes(&backend).await;
    }
}

/// An outside schedule racing the object's activation in the same runtime, with slow commits
/// to widen the window: every schedule and every bump is kept, whichever way they interleave.
#[tokio::test]
async fn an_outside_schedule_racing_an_activation_loses_nothing() {
    let storage = FaultyStorage::new(MemoryStorage::new());
    let seed = Runtime::builder(storage.clone()).manual_alarms().build();
    for n in 0..20 {
        bump(&seed, &format!("j{n}")).await;
    }
    seed.shutdown().await;
    storage.delay_commits(Duration::from_millis(2));
    let rt = Runtime::builder(storage.clone()).manual_alarms().build();
    for n in 0..20 {
        let id = format!("j{n}");
        let (scheduled, bumped) =
            tokio::join!(rt.schedule_alarm(&id, Job::RUN, HOUR), bump(&rt, &id));
        scheduled.unwrap();
        assert_eq!(bumped, 2);
        assert_eq!(names(&rt, &id).await, ["report", "run"], "{id}");
    }
    rt.shutdown().await;
}

/// A direct write that fails writes nothing and reports the failure; the next one succeeds.
/// One whose outcome is unknown (applied, then reported failed) leaves storage consistent:
/// setting it again replaces it.
#[tokio::test]
async fn a_failed_direct_write_reports_and_writes_nothing() {
    let storage = FaultyStorage::new(MemoryStorage::new());
    let seed = Runtime::builder(storage.clone()).manual_alarms().build();
    bump(&seed, "j1").await;
    seed.shutdown().await;
    let rt = Runtime::builder(storage.clone()).manual_alarms().build();

    storage.fail_commits(1);
    let error = rt.schedule_alarm("j1", Job::RUN, HOUR).await.unwrap_err();
    assert!(matches!(error, Error::Storage { .. }), "{error}");
    assert_eq!(names(&rt, "j1").await, ["report"]);
    assert_eq!(rt.status::<Job>("j1").await.unwrap(), ObjectStatus::Stored);

    storage.fail_commits_after_applying(1);
    assert!(rt.schedule_alarm("j1", Job::RUN, HOUR).await.is_err());
    rt.schedule_alarm("j1", Job::RUN, HOUR).await.unwrap();
    assert_eq!(names(&rt, "j1").await, ["report", "run"]);
    assert_eq!(bump(&rt, "j1").await, 2);
    rt.shutdown().await;
}

/// Plants `count` alarms with other names on the stored object `(Job, id)`.
async fn plant(storage: &MemoryStorage, id: &str, count: usize) {
    let key = ObjectKey::new("Job", id);
    let version = storage.load(&key).await.unwrap().version();
    let alarms = (0..count)
        .map(|n| AlarmChange::Set {
            name: format!("planted-{n:03}"),
            due_at: std::time::SystemTime::now() + HOUR,
            payload: None,
        })
        .collect();
    let write = ObjectWrite {
        key,
        expected_version: version,
        state: None,
        alarms,
        kv: Vec::new(),
        idempotency: None,
        fsm: Default::default(),
    };
    storage.commit(&[write]).await.unwrap();
}

/// The default limit at its boundary, with the object not live (direct write) and live
/// (through the object): the 100th alarm is set, the 101st refused with nothing written, and
/// setting an alarm the object already has again is still allowed.
#[tokio::test]
async fn the_alarm_limit_at_its_boundary() {
    let storage = MemoryStorage::new();
    let seed = Runtime::builder(storage.clone()).manual_alarms().build();
    bump(&seed, "cold").await;
    bump(&seed, "live").await;
    seed.shutdown().await;
    let rt = Runtime::builder(storage.clone()).manual_alarms().build();
    assert_eq!(AlarmSettings::default().max_alarms_per_object, 100);
    bump(&rt, "live").await;

    for id in ["cold", "live"] {
        // "report" is there already: 98 more make 99.
        plant(&storage, id, 98).await;
        if id == "live" {
            // The planted alarms changed the version under the live instance: reload it.
            assert_eq!(bump(&rt, id).await, 3);
        }
        rt.schedule_alarm(id, Job::RUN, HOUR).await.unwrap();
        assert_eq!(rt.list_alarms::<Job>(id).await.unwrap().len(), 100, "{id}");
        let version = storage
            .load(&ObjectKey::new("Job", id))
            .await
            .unwrap()
            .version();
        let error = rt.schedule_alarm(id, Job::SWEEP, HOUR).await.unwrap_err();
        assert!(
            matches!(error, Error::TooManyAlarms { limit: 100, .. }),
            "{id}: {error}"
        );
        assert_eq!(
            error.to_string(),
            format!("Job/{id} already has 100 alarms, the most one object may have")
        );
        assert_eq!(rt.list_alarms::<Job>(id).await.unwrap().len(), 100, "{id}");
        let after = storage
            .load(&ObjectKey::new("Job", id))
            .await
            .unwrap()
            .version();
        assert_eq!(after, version, "{id}: nothing written");
        // Replacing one it has is not a new alarm.
        rt.schedule_alarm(id, Job::RUN, HOUR * 2).await.unwrap();
        // Room again after a cancel.
        rt.cancel_alarm(id, Job::RUN).await.unwrap();
        rt.schedule_alarm(id, Job::SWEEP, HOUR).await.unwrap();
    }
    assert_eq!(
        rt.status::<Job>("cold").await.unwrap(),
        ObjectStatus::Stored
    );
}

/// The limit is configurable.
#[tokio::test]
async fn the_alarm_limit_is_configurable() {
    let settings = AlarmSettings::default().with_max_alarms_per_object(2);
    let rt = Runtime::builder(MemoryStorage::new())
        .manual_alarms()
        .alarm_settings(settings)
        .build();
    bump(&rt, "j1").await; // sets "report"
    rt.schedule_alarm("j1", Job::RUN, HOUR).await.unwrap();
    let error = rt.schedule_alarm("j1", Job::SWEEP, HOUR).await.unwrap_err();
    assert!(matches!(error, Error::TooManyAlarms { limit: 2, .. }));
    assert_eq!(names(&rt, "j1").await, ["report", "run"]);
}
