//! Operating one object from outside: stopping it, reloading it after a change made behind the
//! runtime's back, and replacing its state. Each scenario runs on memory, SQLite and Postgres
//! (skipped without `DATABASE_URL`), with faults injected into the storage and with a second
//! runtime on the same database.

use std::sync::Arc;
use std::time::Duration;

use durable_runtime::storage::{ObjectKey, ObjectWrite};
use durable_runtime::testing::FaultyStorage;
use durable_runtime::{
    CallByNameError, Context, Error, Event, MemoryStorage, ObjectStatus, Runtime, durable_object,
};
use durable_tests::Backend;

#[durable_object]
pub struct Tally {
    n: u64,
    /// How many times this instance loaded its state: counted in memory only.
    #[serde(skip)]
    loads: u32,
}

#[durable_object(expose)]
impl Tally {
    #[after_load]
    fn loaded(&mut self) {
        self.loads += 1;
    }

    #[handler]
    fn handle_increment(&mut self) -> u64 {
        self.n += 1;
        self.n
    }

    #[handler]
    fn handle_get(&self) -> u64 {
        self.n
    }

    #[handler]
    fn handle_loads(&self) -> u32 {
        self.loads
    }

    #[handler]
    async fn handle_slow_increment(&mut self) -> u64 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        self.n += 1;
        self.n
    }

    #[handler]
    async fn handle_stop_self(&self, ctx: &Context) -> Result<bool, String> {
        ctx.runtime()
            .stop::<Tally>(ctx.id())
            .await
            .map_err(|error| error.to_string())
    }
}

fn runtime(storage: impl durable_runtime::storage::Storage) -> Runtime {
    Runtime::builder(storage).expose::<Tally>().build()
}

/// A stopped object leaves memory after the calls queued before the stop, whose writes are
/// all committed; the next call loads it again.
async fn stop_waits_for_the_queue_and_reloads_next_time(backend: &Backend) {
    let storage = FaultyStorage::new(Arc::clone(&backend.store));
    let rt = runtime(storage.clone());
    assert!(!rt.stop::<Tally>("a").await.unwrap(), "not live yet");
    assert_eq!(rt.live_objects::<Tally>(), 0, "stop started nothing");
    Tally::increment(&rt, "a").await.unwrap();
    // The calls are polled first: each is in the object's queue before the stop is.
    let queued = futures_util::future::join_all((0..5).map(|_| Tally::slow_increment(&rt, "a")));
    let (replies, stopped) = tokio::join!(queued, rt.stop::<Tally>("a"));
    assert!(stopped.unwrap());
    assert_eq!(rt.live_objects::<Tally>(), 0);
    // Every call queued before the stop was answered, each after its commit.
    let replies: Vec<u64> = replies.into_iter().map(Result::unwrap).collect();
    assert_eq!(replies, [2, 3, 4, 5, 6]);
    assert_eq!(rt.read_state::<Tally>("a").await.unwrap().unwrap().n, 6);
    // Loaded again from storage, `after_load` included.
    let loads = storage.loads();
    assert_eq!(Tally::get(&rt, "a").await.unwrap(), 6);
    assert_eq!(storage.loads(), loads + 1);
    assert_eq!(Tally::loads(&rt, "a").await.unwrap(), 1);
    // By name too.
    assert!(rt.stop_by_name("Tally", "a").await.unwrap());
    assert_eq!(rt.live_objects::<Tally>(), 0);
    rt.shutdown().await;
}

/// A change made behind the runtime's back (another runtime, by hand) is seen after a reload.
async fn reload_reads_what_storage_holds(backend: &Backend) {
    let one = runtime(Arc::clone(&backend.store));
    let two = runtime(backend.open_again().await);
    assert_eq!(Tally::increment(&one, "r").await.unwrap(), 1);
    assert_eq!(Tally::increment(&two, "r").await.unwrap(), 2);
    assert_eq!(
        Tally::get(&one, "r").await.unwrap(),
        1,
        "the copy in memory"
    );
    assert!(one.reload::<Tally>("r").await.unwrap());
    assert_eq!(one.live_objects::<Tally>(), 1, "reload keeps the instance");
    assert_eq!(Tally::get(&one, "r").await.unwrap(), 2);
    assert_eq!(Tally::increment(&one, "r").await.unwrap(), 3, "no conflict");
    assert!(one.reload_by_name("Tally", "r").await.unwrap());
    assert!(!one.reload::<Tally>("never").await.unwrap());
    one.shutdown().await;
    two.shutdown().await;
}

/// A replaced state is committed in the object's queue with the version check of any write,
/// and refused on a wrong version; another runtime holding the object conflicts once and
/// reloads.
async fn replace_state_is_versioned(backend: &Backend) {
    let one = runtime(Arc::clone(&backend.store));
    let two = runtime(backend.open_again().await);
    // Never stored: version 0 creates it.
    let created = Tally { n: 10, loads: 0 };
    assert_eq!(one.replace_state("x", created, 0).await.unwrap(), 1);
    assert_eq!(Tally::increment(&one, "x").await.unwrap(), 11);
    // A wrong version changes nothing.
    let refused = one.replace_state("x", Tally { n: 0, loads: 0 }, 1).await;
    assert!(
        matches!(refused, Err(Error::Conflict { found: Some(2), .. })),
        "{refused:?}"
    );
    assert_eq!(Tally::get(&one, "x").await.unwrap(), 11);
    // From the other runtime, by name: `one` still holds version 2 in memory.
    let json = serde_json::json!({"n": 100});
    assert_eq!(
        two.replace_state_by_name("Tally", "x", json, 2)
            .await
            .unwrap(),
        3
    );
    assert_eq!(one.read_state::<Tally>("x").await.unwrap().unwrap().n, 100);
    let stale = Tally::increment(&one, "x").await;
    assert!(matches!(stale, Err(Error::Conflict { .. })), "{stale:?}");
    assert_eq!(Tally::increment(&one, "x").await.unwrap(), 101);
    // The object `two` replaced loads the new state, running `after_load` on it.
    assert_eq!(Tally::get(&two, "x").await.unwrap(), 101);
    one.shutdown().await;
    two.shutdown().await;
}

/// A replacement whose commit fails leaves the old state, in storage and in memory; one whose
/// commit was applied before the failure was reported leaves the new one.
async fn a_failed_replacement_rolls_back(backend: &Backend) {
    let storage = FaultyStorage::new(Arc::clone(&backend.store));
    let rt = runtime(storage.clone());
    Tally::increment(&rt, "f").await.unwrap();
    storage.fail_commits(1);
    let failed = rt.replace_state("f", Tally { n: 50, loads: 0 }, 1).await;
    assert!(matches!(failed, Err(Error::Storage { .. })), "{failed:?}");
    assert_eq!(Tally::get(&rt, "f").await.unwrap(), 1);
    assert_eq!(Tally::increment(&rt, "f").await.unwrap(), 2);

    storage.fail_commits_after_applying(1);
    let unknown = rt.replace_state("f", Tally { n: 50, loads: 0 }, 2).await;
    assert!(unknown.is_err(), "{unknown:?}");
    // Whatever the runtime believed, the next call runs on what storage holds.
    assert_eq!(Tally::get(&rt, "f").await.unwrap(), 50);
    assert_eq!(Tally::increment(&rt, "f").await.unwrap(), 51);
    rt.shutdown().await;
}

macro_rules! on_every_backend {
    ($($case:ident),+ $(,)?) => {
        mod memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(&durable_tests::memory().await).await;
                }
            )+
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(&durable_tests::sqlite().await).await;
                }
            )+
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    if let Some(backend) = durable_tests::postgres().await {
                        super::$case(&backend).await;
                    }
                }
            )+
        }
    };
}

on_every_backend!(
    stop_waits_for_the_queue_and_reloads_next_time,
    reload_reads_what_storage_holds,
    replace_state_is_versioned,
    a_failed_replacement_rolls_back,
);

/// A hibernated object is dropped at once, without starting its task.
#[tokio::test(start_paused = true)]
async fn stopping_a_hibernated_object_drops_it() {
    let options =
        durable_runtime::ObjectOptions::new().with_hibernate_after(Duration::from_secs(1));
    let storage = FaultyStorage::new(MemoryStorage::new());
    let rt = Runtime::builder(storage.clone())
        .register_with::<Tally>(options)
        .build();
    let mut events = rt.subscribe();
    Tally::increment(&rt, "h").await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        rt.status::<Tally>("h").await.unwrap(),
        ObjectStatus::Hibernated
    );
    let loads = storage.loads();
    assert!(rt.stop::<Tally>("h").await.unwrap());
    assert_eq!(rt.live_objects::<Tally>(), 0);
    assert_eq!(rt.status::<Tally>("h").await.unwrap(), ObjectStatus::Stored);
    assert_eq!(storage.loads(), loads + 1, "only the status read storage");
    let key = ObjectKey::new("Tally", "h");
    let mut seen = Vec::new();
    while let Ok(event) = events.try_recv() {
        seen.push(event);
    }
    assert_eq!(seen.last(), Some(&Event::ShutDown { key }));
}

/// Asked from the object's own handler, a stop would wait for that very handler: refused.
#[tokio::test]
async fn an_object_cannot_stop_itself() {
    let rt = runtime(MemoryStorage::new());
    let refused = Tally::stop_self(&rt, "s").await;
    assert!(
        matches!(&refused, Err(Error::Handler(message)) if message.contains("call cycle")),
        "{refused:?}"
    );
}

/// Operations by name refuse unknown types and bad states with typed errors.
#[tokio::test]
async fn by_name_errors_are_typed() {
    let rt = runtime(MemoryStorage::new());
    let unknown = rt.stop_by_name("Nope", "a").await;
    assert!(matches!(unknown, Err(CallByNameError::UnknownType { .. })));
    let bad = rt
        .replace_state_by_name("Tally", "a", serde_json::json!({"n": -1}), 0)
        .await;
    assert!(
        matches!(&bad, Err(CallByNameError::BadArguments { path, .. }) if path == "n"),
        "{bad:?}"
    );
    let invalid = rt.replace_state("", Tally::default(), 0).await;
    assert!(matches!(invalid, Err(Error::InvalidId(_))));
}

/// A write made by hand between a stop and the next call is what that call sees.
#[tokio::test]
async fn a_stopped_object_sees_a_change_made_by_hand() {
    let storage = MemoryStorage::new();
    let rt = runtime(storage.clone());
    Tally::increment(&rt, "m").await.unwrap();
    rt.stop::<Tally>("m").await.unwrap();
    let write = ObjectWrite {
        key: ObjectKey::new("Tally", "m"),
        expected_version: 1,
        state: Some(br#"{"n":7}"#.to_vec()),
        alarms: vec![],
        kv: Vec::new(),
        idempotency: None,
        fsm: Default::default(),
    };
    durable_runtime::storage::Storage::commit(&storage, &[write])
        .await
        .unwrap();
    assert_eq!(Tally::increment(&rt, "m").await.unwrap(), 8);
}
