//! Deleting and recreating objects, on every storage backend: versions never repeat for a key,
//! so a runtime still holding a deleted object's version cannot overwrite the object recreated
//! since; and a read of an object that is not stored (never created, or deleted) stores
//! nothing.

use std::sync::Arc;
use std::time::Duration;

use durable_runtime::storage::{Loaded, MemoryStorage, ObjectKey, Storage, StoredObject};
use durable_runtime::testing::FaultyStorage;
use durable_runtime::{AlarmSettings, Error, ObjectStatus, Runtime, durable_object};
use durable_tests::{Backend, backend_tests};

#[durable_object]
pub struct Note {
    text: String,
}

#[durable_object]
impl Note {
    #[handler]
    fn handle_write(&mut self, text: String) {
        self.text = text;
    }

    /// A `&mut self` handler that changes nothing.
    #[handler]
    fn handle_touch(&mut self) {}

    #[handler]
    fn handle_read(&self) -> String {
        self.text.clone()
    }

    #[alarm]
    fn remind(&mut self) {
        self.text = "reminded".into();
    }
}

/// What storage holds as an object under `Note/id`, if anything.
async fn stored(store: &dyn Storage, id: &str) -> Option<StoredObject> {
    store
        .load(&ObjectKey::new("Note", id))
        .await
        .expect("load")
        .object()
}

async fn stored_ids(store: &dyn Storage) -> Vec<String> {
    store.list_ids("Note", None, 100).await.expect("list").ids
}

/// Runtime `b` runs on a second handle on the database (its own connections to the same
/// SQLite file or Postgres schema), as another process would.
async fn a_stale_runtime_cannot_overwrite_a_recreated_object(backend: &Backend) {
    let store = backend.store.clone();
    let a = Runtime::new(store.clone());
    let b = Runtime::new(backend.open_again().await);
    Note::write(&a, "n", "first".into()).await.unwrap();
    Note::write(&a, "n", "old".into()).await.unwrap();
    // `b` activates the object: it holds the version of "old".
    assert_eq!(Note::read(&b, "n").await.unwrap(), "old");

    assert!(a.delete::<Note>("n").await.unwrap());
    Note::write(&a, "n", "new".into()).await.unwrap();
    Note::write(&a, "n", "newer".into()).await.unwrap();

    // `b`'s write expects the version "old" had: the object it read is gone.
    let err = Note::write(&b, "n", "stale".into()).await.unwrap_err();
    assert!(matches!(err, Error::Conflict { .. }), "{err:?}");
    let kept = stored(store.as_ref(), "n").await.expect("stored");
    assert_eq!(
        kept.state, br#"{"text":"newer"}"#,
        "an acknowledged write was lost"
    );
    // `b` reloaded: it now serves, and writes on top of, what `a` wrote.
    assert_eq!(Note::read(&b, "n").await.unwrap(), "newer");
    Note::write(&b, "n", "last".into()).await.unwrap();
    let fresh = Runtime::new(store);
    assert_eq!(Note::read(&fresh, "n").await.unwrap(), "last");
}

async fn reads_of_absent_and_deleted_objects_store_nothing(store: Arc<dyn Storage>) {
    let rt = Runtime::new(store.clone());
    // Never stored: reads, and a `&mut self` call that changes nothing, store no row.
    assert_eq!(Note::read(&rt, "never").await.unwrap(), "");
    Note::touch(&rt, "never").await.unwrap();
    assert_eq!(stored(store.as_ref(), "never").await, None);

    // Deleted: the same.
    Note::write(&rt, "gone", "x".into()).await.unwrap();
    let before = stored(store.as_ref(), "gone")
        .await
        .expect("stored")
        .version;
    assert!(rt.delete::<Note>("gone").await.unwrap());
    assert_eq!(Note::read(&rt, "gone").await.unwrap(), "");
    Note::touch(&rt, "gone").await.unwrap();
    assert_eq!(stored(store.as_ref(), "gone").await, None);
    assert!(stored_ids(store.as_ref()).await.is_empty());

    // Live in this runtime but not stored: another runtime sees it absent.
    assert_eq!(
        rt.status::<Note>("never").await.unwrap(),
        ObjectStatus::Active
    );
    let other = Runtime::new(store.clone());
    assert_eq!(
        other.status::<Note>("never").await.unwrap(),
        ObjectStatus::Absent
    );
    assert_eq!(
        other.status::<Note>("gone").await.unwrap(),
        ObjectStatus::Absent
    );

    // The first change stores the object, above every version it had before the delete.
    Note::write(&rt, "gone", "back".into()).await.unwrap();
    let recreated = stored(store.as_ref(), "gone").await.expect("stored");
    assert_eq!(recreated.state, br#"{"text":"back"}"#);
    assert!(
        recreated.version > before + 1,
        "{} after {before}",
        recreated.version
    );
    assert_eq!(stored_ids(store.as_ref()).await, ["gone"]);
}

async fn scheduling_an_alarm_stores_an_object_not_stored(store: Arc<dyn Storage>) {
    let rt = Runtime::new(store.clone());
    let in_an_hour = Duration::from_secs(3600);
    // The alarm needs its object stored: the object is created with its default state.
    rt.schedule_alarm("a", Note::REMIND, in_an_hour)
        .await
        .unwrap();
    let created = stored(store.as_ref(), "a").await.expect("stored");
    assert_eq!(
        (created.state.as_slice(), created.version),
        (&br#"{"text":""}"#[..], 1)
    );
    assert_eq!(rt.list_alarms::<Note>("a").await.unwrap().len(), 1);

    // Deleted (its alarm with it), then scheduled again: above the tombstone's version.
    assert!(rt.delete::<Note>("a").await.unwrap());
    assert!(rt.list_alarms::<Note>("a").await.unwrap().is_empty());
    rt.schedule_alarm("a", Note::REMIND, in_an_hour)
        .await
        .unwrap();
    assert_eq!(
        stored(store.as_ref(), "a").await.expect("stored").version,
        3
    );
    assert_eq!(rt.list_alarms::<Note>("a").await.unwrap().len(), 1);
}

/// The scheduler starts an alarm's object ahead of its firing. If the object was deleted
/// meanwhile (by another runtime, after the alarm was claimed), that activation stores
/// nothing.
#[tokio::test(start_paused = true)]
async fn starting_a_deleted_object_ahead_of_its_alarm_stores_nothing() {
    let store = MemoryStorage::new();
    let faulty = FaultyStorage::new(store.clone());
    // Claimed well ahead of its due time, so that the object starts long before it fires.
    let firing = Runtime::builder(faulty.clone())
        .register::<Note>()
        .alarm_settings(AlarmSettings::default().with_claim_ahead(Duration::from_secs(20)))
        .clock_follows_tokio()
        .build();
    let deleting = Runtime::builder(store.clone())
        .manual_alarms()
        .clock_follows_tokio()
        .build();
    deleting
        .schedule_alarm("x", Note::REMIND, Duration::from_secs(60))
        .await
        .unwrap();
    let key = ObjectKey::new("Note", "x");
    let scheduled = store.load(&key).await.unwrap().version();
    // The firing runtime claims the alarm and reads its object slowly: the other runtime
    // deletes the object in between.
    faulty.delay_loads(Duration::from_secs(5));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(50);
    while faulty.claims() == 0 || faulty.batch_loads() + faulty.loads() == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the alarm was not claimed"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(deleting.delete::<Note>("x").await.unwrap());
    // The read finishes and the object starts; the alarm is not due yet.
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(
        firing.live_objects::<Note>(),
        1,
        "the object was started ahead"
    );
    assert_eq!(
        store.load(&key).await.unwrap(),
        Loaded::Deleted {
            version: scheduled + 1
        },
        "starting the deleted object stored a row"
    );
}

mod second_handle {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn memory() {
        super::a_stale_runtime_cannot_overwrite_a_recreated_object(&durable_tests::memory().await)
            .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sqlite() {
        super::a_stale_runtime_cannot_overwrite_a_recreated_object(&durable_tests::sqlite().await)
            .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn postgres() {
        if let Some(backend) = durable_tests::postgres().await {
            super::a_stale_runtime_cannot_overwrite_a_recreated_object(&backend).await;
        }
    }
}

backend_tests!(
    reads_of_absent_and_deleted_objects_store_nothing,
    scheduling_an_alarm_stores_an_object_not_stored,
);
