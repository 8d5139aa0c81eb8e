//! Deleting and recreating objects, on every storage backend: versions never repeat for a key,
//! so a runtime still holding a deleted object's version cannot overwrite the object recreated
//! since; and a read of an object that is not stored (never created, or deleted) stores
//! nothing.

use std::sync::Arc;

use durable_runtime::storage::{ObjectKey, Storage, StoredObject};
use durable_runtime::{Error, ObjectStatus, Runtime, durable_object};
use durable_tests::backend_tests;

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

async fn a_stale_runtime_cannot_overwrite_a_recreated_object(store: Arc<dyn Storage>) {
    let a = Runtime::new(store.clone());
    let b = Runtime::new(store.clone());
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

backend_tests!(
    a_stale_runtime_cannot_overwrite_a_recreated_object,
    reads_of_absent_and_deleted_objects_store_nothing,
);
