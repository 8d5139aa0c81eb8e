//! Two runtimes on one database, as two processes would run: writes are fenced by versions in
//! every mode; a read serves the state in memory by default, which may be older than the other
//! runtime's acknowledged writes; with validated reads it sees every write acknowledged before
//! it was sent. A conflict that shows the other writer is logged once.
//!
//! Each scenario runs on memory, SQLite (two stores on one file) and Postgres (two pools on
//! one schema, skipped without `DATABASE_URL`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use durable_runtime::storage::{MemoryStorage, ObjectKey};
use durable_runtime::testing::FaultyStorage;
use durable_runtime::{Error, ObjectOptions, Runtime, durable_object};
use durable_tests::Backend;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};

#[durable_object]
pub struct Tally {
    n: u64,
}

#[durable_object]
impl Tally {
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
    async fn handle_get_later(&self) -> u64 {
        tokio::task::yield_now().await;
        self.n
    }
}

/// What storage holds for `id`.
async fn stored(rt: &Runtime, id: &str) -> u64 {
    rt.read_state::<Tally>(id).await.unwrap().unwrap().n
}

/// `Tally::increment` through `rt`, again if it conflicted once (as a caller retries a
/// conflict): `rt` held an outdated state, and the conflict made it reload.
async fn increment_retrying(rt: &Runtime, id: &str) -> u64 {
    match Tally::increment(rt, id).await {
        Err(Error::Conflict { .. }) => Tally::increment(rt, id).await.unwrap(),
        written => written.unwrap(),
    }
}

/// Default mode: runtime `one` answers a read with the state it holds in memory, older than
/// the write `two` acknowledged; one's next write conflicts and reloads.
async fn default_reads_may_be_stale(backend: &Backend) {
    let one = Runtime::new(Arc::clone(&backend.store));
    let two = Runtime::new(backend.open_again().await);
    assert_eq!(Tally::increment(&one, "t").await.unwrap(), 1);
    assert_eq!(Tally::increment(&two, "t").await.unwrap(), 2);
    // The stale read the book documents: storage holds 2, `one` serves 1, in the caller's
    // task and through the object's task alike.
    assert_eq!(stored(&one, "t").await, 2);
    assert_eq!(Tally::get(&one, "t").await.unwrap(), 1);
    assert_eq!(Tally::get_later(&one, "t").await.unwrap(), 1);
    // Writes are fenced: `one`'s write on its outdated state is refused, and it reloads.
    let refused = Tally::increment(&one, "t").await;
    assert!(
        matches!(refused, Err(Error::Conflict { found: Some(_), .. })),
        "{refused:?}"
    );
    assert_eq!(Tally::get(&one, "t").await.unwrap(), 2);
    assert_eq!(Tally::increment(&one, "t").await.unwrap(), 3);
    one.shutdown().await;
    two.shutdown().await;
}

/// Validated reads: every read of `one` sees the writes `two` acknowledged before it, and
/// `one`'s writes after such a read start from the state it saw.
async fn validated_reads_see_every_acknowledged_write(backend: &Backend) {
    let one = Runtime::builder(Arc::clone(&backend.store))
        .validate_reads()
        .build();
    let two = Runtime::new(backend.open_again().await);
    assert_eq!(Tally::increment(&one, "t").await.unwrap(), 1);
    let mut expected = 1;
    for _ in 0..3 {
        expected += 1;
        assert_eq!(increment_retrying(&two, "t").await, expected);
        assert_eq!(Tally::get(&one, "t").await.unwrap(), expected);
        expected += 1;
        assert_eq!(increment_retrying(&two, "t").await, expected);
        assert_eq!(Tally::get_later(&one, "t").await.unwrap(), expected);
        // The reload made `one` current: its write does not conflict.
        expected += 1;
        assert_eq!(Tally::increment(&one, "t").await.unwrap(), expected);
    }
    assert_eq!(stored(&two, "t").await, expected);
    one.shutdown().await;
    two.shutdown().await;
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
    default_reads_may_be_stale,
    validated_reads_see_every_acknowledged_write
);

/// A hibernated object wakes from the state it kept, without a storage read: in the default
/// mode that state may be stale too; a validated read checks it like an active one.
#[tokio::test(start_paused = true)]
async fn a_woken_object_is_validated_like_an_active_one() {
    let storage = MemoryStorage::new();
    let hibernating = ObjectOptions::new().with_hibernate_after(Duration::from_secs(1));
    let build = |validate: bool| {
        let builder = Runtime::builder(storage.clone()).register_with::<Tally>(hibernating);
        if validate {
            builder.validate_reads().build()
        } else {
            builder.build()
        }
    };
    let (default, validated, other) = (build(false), build(true), Runtime::new(storage.clone()));
    let objects = [(&default, "d"), (&validated, "v")];
    for (rt, id) in objects {
        assert_eq!(Tally::increment(rt, id).await.unwrap(), 1);
    }
    // Both hibernate; then `other` writes.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for (rt, id) in objects {
        let status = rt.status::<Tally>(id).await.unwrap();
        assert_eq!(status, durable_runtime::ObjectStatus::Hibernated);
        assert_eq!(Tally::increment(&other, id).await.unwrap(), 2);
    }
    assert_eq!(Tally::get(&default, "d").await.unwrap(), 1);
    assert_eq!(Tally::get(&validated, "v").await.unwrap(), 2);
}

/// A validated read costs one version check, and nothing else while storage still holds the
/// version in memory; a failed check fails the read, not the object.
#[tokio::test]
async fn a_validated_read_costs_one_version_check() {
    let storage = FaultyStorage::new(MemoryStorage::new());
    let rt = Runtime::builder(storage.clone()).validate_reads().build();
    Tally::increment(&rt, "t").await.unwrap();
    let (loads, batch_loads) = (storage.loads(), storage.batch_loads());
    for _ in 0..5 {
        assert_eq!(Tally::get(&rt, "t").await.unwrap(), 1);
    }
    assert_eq!(storage.version_checks(), 5);
    assert_eq!(
        (storage.loads(), storage.batch_loads()),
        (loads, batch_loads)
    );

    storage.fail_loads(1);
    let failed = Tally::get(&rt, "t").await;
    assert!(matches!(failed, Err(Error::Storage { .. })), "{failed:?}");
    assert_eq!(Tally::get(&rt, "t").await.unwrap(), 1);
    assert_eq!(Tally::increment(&rt, "t").await.unwrap(), 2);
    assert_eq!(storage.loads(), loads, "the object never reloaded");
}

/// A read sent while the object's own write is in flight sees that write, and the version
/// check does not mistake it for another writer's.
#[tokio::test]
async fn a_validated_read_behind_its_own_write_sees_it_without_reloading() {
    let storage = FaultyStorage::new(MemoryStorage::new());
    let rt = Runtime::builder(storage.clone()).validate_reads().build();
    Tally::increment(&rt, "t").await.unwrap();
    let loads = storage.loads();
    storage.delay_commits(Duration::from_millis(20));
    let (written, read) = tokio::join!(Tally::increment(&rt, "t"), Tally::get(&rt, "t"));
    assert_eq!((written.unwrap(), read.unwrap()), (2, 2));
    assert_eq!(storage.loads(), loads);
}

/// The message of each `WARN` event.
#[derive(Clone, Default)]
struct Warnings(Arc<Mutex<Vec<String>>>);

struct Message<'a>(&'a mut String);

impl Visit for Message<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        use std::fmt::Write as _;
        let _ = write!(self.0, "{}={value:?} ", field.name());
    }
}

impl<S: tracing::Subscriber> Layer<S> for Warnings {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        if *event.metadata().level() == tracing::Level::WARN {
            let mut message = String::new();
            event.record(&mut Message(&mut message));
            self.0.lock().unwrap().push(message);
        }
    }
}

/// The first conflict that shows another writer is logged, naming the object, the mode and
/// the book's section; later ones are not.
#[tokio::test(flavor = "current_thread")]
async fn a_conflict_with_another_runtime_warns_once() {
    let warnings = Warnings::default();
    let _default =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(warnings.clone()));
    let storage = MemoryStorage::new();
    let one = Runtime::new(storage.clone());
    let two = Runtime::new(storage.clone());
    for id in ["a", "b"] {
        Tally::increment(&one, id).await.unwrap();
        Tally::increment(&two, id).await.unwrap();
        let refused = Tally::increment(&one, id).await;
        assert!(
            matches!(refused, Err(Error::Conflict { .. })),
            "{refused:?}"
        );
    }
    let warnings = warnings.0.lock().unwrap().clone();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let key = ObjectKey::new("Tally", "a");
    for needed in [
        key.to_string().as_str(),
        "validate_reads",
        "Two runtimes on one database",
    ] {
        assert!(warnings[0].contains(needed), "{needed} in {}", warnings[0]);
    }
    // Nothing in storage was lost to the refused writes.
    assert_eq!(stored(&two, "a").await, 2);
}
