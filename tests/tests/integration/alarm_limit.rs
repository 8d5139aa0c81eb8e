//! The per-object alarm limit holds on every path that sets an alarm: a handler's
//! `ctx.schedule_alarm*`, the runtime from outside (direct write or through the live object),
//! two runtimes on one database, and batched commits. The store checks it in the commit:
//! exactly at the limit passes, one past fails with `TooManyAlarms` and nothing of the call
//! written (state, keys, alarms), and the object reloads its committed state. Setting a name
//! again replaces it; a cancelled or fired alarm frees its slot.

use std::sync::Arc;
use std::time::Duration;

use durable_runtime::storage::{ObjectKey, Storage};
use durable_runtime::testing::FaultyStorage;
use durable_runtime::{
    Context, Error, MemoryStorage, ObjectOptions, ObjectStatus, Runtime, durable_object,
};
use durable_tests::Backend;

#[durable_object]
pub struct Planner {
    calls: u32,
}

#[durable_object]
impl Planner {
    /// Counts the call in the state and in a key, and schedules the alarms named.
    #[handler]
    fn handle_plan(&mut self, ctx: &Context, names: Vec<String>, delay: Duration) -> u32 {
        self.calls += 1;
        ctx.storage()
            .put("calls", &self.calls)
            .expect("a small value");
        for name in names {
            match name.as_str() {
                "a" => ctx.schedule_alarm(Planner::A, delay),
                "b" => ctx.schedule_alarm(Planner::B, delay),
                _ => ctx
                    .schedule_alarm_with(Planner::C, &name, delay)
                    .expect("a string encodes"),
            }
        }
        self.calls
    }

    #[handler]
    fn handle_drop_a(&mut self, ctx: &Context) {
        ctx.cancel_alarm(Planner::A);
    }

    #[handler]
    fn handle_calls(&self) -> u32 {
        self.calls
    }

    #[alarm]
    fn a(&mut self) {}

    #[alarm]
    fn b(&mut self) {}

    #[alarm]
    fn c(&mut self, note: String) {
        let _ = note;
    }
}

const HOUR: Duration = Duration::from_secs(3600);
const LIMIT: u64 = 2;

fn limited(store: Arc<dyn Storage>) -> Runtime {
    Runtime::builder(store)
        .manual_alarms()
        .register_with::<Planner>(ObjectOptions::new().with_max_alarms(LIMIT))
        .build()
}

async fn alarm_names(rt: &Runtime, id: &str) -> Vec<String> {
    let mut names: Vec<String> = rt
        .list_alarms::<Planner>(id)
        .await
        .unwrap()
        .into_iter()
        .map(|alarm| alarm.name)
        .collect();
    names.sort();
    names
}

fn plan(which: &[&str]) -> Vec<String> {
    which.iter().map(|name| (*name).to_owned()).collect()
}

async fn version(store: &dyn Storage, id: &str) -> u64 {
    store
        .load(&ObjectKey::new("Planner", id))
        .await
        .unwrap()
        .version()
}

async fn stored_calls(store: &dyn Storage, id: &str) -> Option<Vec<u8>> {
    store
        .kv_get(&ObjectKey::new("Planner", id), "calls")
        .await
        .unwrap()
}

fn is_too_many(error: &Error) -> bool {
    matches!(error, Error::TooManyAlarms { limit, .. } if *limit == LIMIT as usize)
}

/// Through a handler: exactly at the limit passes, one past fails with nothing of the call
/// written and the state reloaded; a name set again replaces, a cancel frees a slot.
async fn handler_path_at_its_boundary(backend: &Backend) {
    let store = Arc::clone(&backend.store);
    let rt = limited(Arc::clone(&store));
    assert_eq!(
        Planner::plan(&rt, "p", plan(&["a", "b"]), HOUR)
            .await
            .unwrap(),
        1
    );
    assert_eq!(alarm_names(&rt, "p").await, ["a", "b"]);
    let before = version(&*store, "p").await;

    let error = Planner::plan(&rt, "p", plan(&["c"]), HOUR)
        .await
        .unwrap_err();
    assert!(is_too_many(&error), "{error}");
    assert_eq!(
        error.to_string(),
        "Planner/p already has 2 alarms, the most one object may have"
    );
    assert_eq!(alarm_names(&rt, "p").await, ["a", "b"]);
    assert_eq!(version(&*store, "p").await, before, "nothing written");
    assert_eq!(stored_calls(&*store, "p").await, Some(b"1".to_vec()));
    assert_eq!(Planner::calls(&rt, "p").await.unwrap(), 1, "state reloaded");

    // Setting names it has again replaces them.
    assert_eq!(
        Planner::plan(&rt, "p", plan(&["a", "b"]), HOUR)
            .await
            .unwrap(),
        2
    );
    // A cancel frees a slot.
    Planner::drop_a(&rt, "p").await.unwrap();
    assert_eq!(
        Planner::plan(&rt, "p", plan(&["c"]), HOUR).await.unwrap(),
        3
    );
    assert_eq!(alarm_names(&rt, "p").await, ["b", "c"]);
    assert_eq!(stored_calls(&*store, "p").await, Some(b"3".to_vec()));
}

/// From outside, on an object not live here (a direct write) and on a live one (through the
/// object): the same boundary, nothing written past it.
async fn outside_path_at_its_boundary(backend: &Backend) {
    let store = Arc::clone(&backend.store);
    let seed = limited(Arc::clone(&store));
    Planner::plan(&seed, "cold", plan(&[]), HOUR).await.unwrap();
    seed.shutdown().await;
    let rt = limited(Arc::clone(&store));
    Planner::plan(&rt, "live", plan(&[]), HOUR).await.unwrap();
    for id in ["cold", "live"] {
        rt.schedule_alarm(id, Planner::A, HOUR).await.unwrap();
        rt.schedule_alarm(id, Planner::B, HOUR).await.unwrap();
        let before = version(&*store, id).await;
        let error = rt
            .schedule_alarm_with(id, Planner::C, &"x".to_owned(), HOUR)
            .await
            .unwrap_err();
        assert!(is_too_many(&error), "{id}: {error}");
        assert_eq!(alarm_names(&rt, id).await, ["a", "b"], "{id}");
        assert_eq!(version(&*store, id).await, before, "{id}: nothing written");
        rt.schedule_alarm(id, Planner::A, HOUR * 2).await.unwrap();
        rt.cancel_alarm(id, Planner::B).await.unwrap();
        rt.schedule_alarm_with(id, Planner::C, &"x".to_owned(), HOUR)
            .await
            .unwrap();
        assert_eq!(alarm_names(&rt, id).await, ["a", "c"], "{id}");
    }
    assert_eq!(
        rt.status::<Planner>("cold").await.unwrap(),
        ObjectStatus::Stored,
        "set without starting it"
    );
}

/// Two runtimes on one database, neither of which lists the other's alarms: each adds one,
/// and the third, from the runtime whose view is older, fails once it has reloaded.
async fn two_runtimes_share_the_limit(backend: &Backend) {
    let one = limited(Arc::clone(&backend.store));
    let two = limited(backend.open_again().await);
    Planner::plan(&one, "s", plan(&["a"]), HOUR).await.unwrap();
    Planner::plan(&two, "s", plan(&["b"]), HOUR).await.unwrap();
    // `one` holds an outdated version: its write conflicts first, then the reloaded object
    // counts the other runtime's alarm.
    let mut outcomes = Vec::new();
    for _ in 0..3 {
        match Planner::plan(&one, "s", plan(&["c"]), HOUR).await {
            Err(Error::Conflict { .. }) => outcomes.push("conflict"),
            Err(error) if is_too_many(&error) => {
                outcomes.push("too many");
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(outcomes.last(), Some(&"too many"), "{outcomes:?}");
    assert_eq!(alarm_names(&two, "s").await, ["a", "b"]);
    assert_eq!(Planner::calls(&two, "s").await.unwrap(), 2);
    // And from outside through the other runtime too.
    let error = two
        .schedule_alarm_with("s", Planner::C, &"y".to_owned(), HOUR)
        .await
        .unwrap_err();
    assert!(is_too_many(&error), "{error}");
}

/// A fired alarm frees its slot (its removal commits with its handler's write).
async fn a_fired_alarm_frees_its_slot(backend: &Backend) {
    // The scheduler runs here: the alarms fire as soon as they are due.
    let rt = Runtime::builder(Arc::clone(&backend.store))
        .register_with::<Planner>(ObjectOptions::new().with_max_alarms(LIMIT))
        .build();
    Planner::plan(&rt, "f", plan(&["a"]), HOUR).await.unwrap();
    Planner::plan(&rt, "f", plan(&["b"]), Duration::ZERO)
        .await
        .unwrap();
    durable_tests::eventually(|| async { alarm_names(&rt, "f").await == ["a"] }).await;
    Planner::plan(&rt, "f", plan(&["c"]), HOUR).await.unwrap();
    assert_eq!(alarm_names(&rt, "f").await, ["a", "c"]);
    rt.shutdown().await;
}

durable_tests::backend_cases!(
    handler_path_at_its_boundary,
    outside_path_at_its_boundary,
    two_runtimes_share_the_limit,
    a_fired_alarm_frees_its_slot,
);

/// With commits that fail: a failed commit of a call at the limit writes nothing and the
/// next call finds the committed alarms; a write over the limit batched with other objects'
/// writes fails alone, and theirs commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faulty_storage_and_batched_commits() {
    let storage = FaultyStorage::new(MemoryStorage::new());
    let rt = limited(Arc::new(storage.clone()));
    Planner::plan(&rt, "x", plan(&["a"]), HOUR).await.unwrap();
    storage.fail_commits(1);
    let error = Planner::plan(&rt, "x", plan(&["b"]), HOUR)
        .await
        .unwrap_err();
    // A call cannot tell a failed commit from one whose outcome is unknown.
    assert!(matches!(error, Error::OutcomeUnknown { .. }), "{error}");
    assert_eq!(alarm_names(&rt, "x").await, ["a"]);
    assert_eq!(Planner::calls(&rt, "x").await.unwrap(), 1);
    Planner::plan(&rt, "x", plan(&["b"]), HOUR).await.unwrap();

    // Slow commits gather the next calls into one batch.
    storage.delay_commits(Duration::from_millis(20));
    let ids: Vec<String> = (0..6).map(|n| format!("y{n}")).collect();
    let calls = ids
        .iter()
        .map(|id| Planner::plan(&rt, id, plan(&["a"]), HOUR));
    let over = Planner::plan(&rt, "x", plan(&["c"]), HOUR);
    let (others, over) = tokio::join!(futures_util::future::join_all(calls), over);
    for outcome in others {
        assert_eq!(outcome.unwrap(), 1);
    }
    assert!(is_too_many(&over.unwrap_err()));
    for id in &ids {
        assert_eq!(alarm_names(&rt, id).await, ["a"]);
    }
    assert_eq!(alarm_names(&rt, "x").await, ["a", "b"]);
    assert_eq!(Planner::calls(&rt, "x").await.unwrap(), 2);
}
