//! Key-value storage per object, through handlers: atomic with the state (a handler error, a
//! panic and a failed commit roll both back), every limit at its boundary, the view of
//! uncommitted changes, two runtimes on one database, and the read cache dropped on
//! hibernation. Backend-sensitive scenarios run on memory, SQLite and Postgres (skipped
//! without `DATABASE_URL`).

use std::sync::Arc;
use std::time::Duration;

use durable_runtime::storage::{KvLimitExceeded, KvUsage, MemoryStorage, ObjectKey, Storage};
use durable_runtime::testing::FaultyStorage;
use durable_runtime::{
    Context, DEFAULT_MAX_BYTES, DEFAULT_MAX_KEYS, DEFAULT_MAX_VALUE_BYTES, Error, KvError,
    ObjectOptions, ObjectStatus, Runtime, durable_object,
};
use durable_tests::{Backend, eventually};
use serde_json::{Value, json};

#[durable_object]
pub struct Doc {
    writes: u64,
}

/// A JSON string whose encoding is exactly `size` bytes (at least 2).
fn string_of(size: usize) -> String {
    "x".repeat(size - 2)
}

#[durable_object]
impl Doc {
    #[handler]
    async fn handle_put(
        &mut self,
        ctx: &Context,
        key: String,
        value: Value,
    ) -> Result<u64, KvError> {
        self.writes += 1;
        ctx.storage().put(&key, &value)?;
        Ok(self.writes)
    }

    /// Puts `count` keys `{prefix}{i}`, each holding a string encoded in `size` bytes.
    #[handler]
    async fn handle_put_many(
        &mut self,
        ctx: &Context,
        prefix: String,
        count: usize,
        size: usize,
    ) -> Result<(), KvError> {
        self.writes += 1;
        let value = string_of(size);
        for i in 0..count {
            ctx.storage().put(&format!("{prefix}{i}"), &value)?;
        }
        Ok(())
    }

    #[handler]
    async fn handle_get(&self, ctx: &Context, key: String) -> Result<Option<Value>, KvError> {
        ctx.storage().get(&key).await
    }

    #[handler]
    async fn handle_delete(&mut self, ctx: &Context, key: String) -> Result<(), KvError> {
        self.writes += 1;
        ctx.storage().delete(&key)
    }

    #[handler]
    async fn handle_delete_all(&mut self, ctx: &Context) -> Result<(), KvError> {
        self.writes += 1;
        ctx.storage().delete_all()
    }

    #[handler]
    async fn handle_keys(
        &self,
        ctx: &Context,
        prefix: String,
        after: Option<String>,
        limit: usize,
    ) -> Result<Vec<String>, KvError> {
        let listed = ctx
            .storage()
            .list::<Value>(&prefix, after.as_deref(), limit)
            .await?;
        Ok(listed.into_iter().map(|(key, _)| key).collect())
    }

    /// Puts, deletes and reads back in one call: the call sees its own changes.
    #[handler]
    async fn handle_put_and_list(
        &mut self,
        ctx: &Context,
        key: String,
    ) -> Result<Vec<String>, KvError> {
        self.writes += 1;
        let storage = ctx.storage();
        storage.put(&key, &self.writes)?;
        assert_eq!(storage.get::<u64>(&key).await?, Some(self.writes));
        let listed = storage.list::<Value>("", None, usize::MAX).await?;
        Ok(listed.into_iter().map(|(key, _)| key).collect())
    }

    #[handler]
    async fn handle_put_then_fail(&mut self, ctx: &Context, key: String) -> Result<(), String> {
        self.writes += 1;
        ctx.storage().put(&key, &1).map_err(|e| e.to_string())?;
        Err("refused".into())
    }

    #[handler]
    async fn handle_put_then_panic(&mut self, ctx: &Context, key: String) {
        self.writes += 1;
        ctx.storage().put(&key, &1).unwrap();
        panic!("boom");
    }

    #[handler]
    async fn handle_put_from_read(&self, ctx: &Context) -> Result<(), KvError> {
        ctx.storage().put("k", &1)
    }

    #[handler]
    fn handle_writes(&self) -> u64 {
        self.writes
    }
}

/// A type with small limits, declared on the struct.
#[durable_object(kv_max_keys = 3, kv_max_value_bytes = 10, kv_max_bytes = 30)]
pub struct Small {
    writes: u64,
}

#[durable_object]
impl Small {
    /// Puts `key` holding a string encoded in `size` bytes.
    #[handler]
    async fn handle_put(
        &mut self,
        ctx: &Context,
        key: String,
        size: usize,
    ) -> Result<u64, KvError> {
        self.writes += 1;
        ctx.storage().put(&key, &string_of(size))?;
        Ok(self.writes)
    }

    #[handler]
    fn handle_writes(&self) -> u64 {
        self.writes
    }
}

fn doc(id: &str) -> ObjectKey {
    ObjectKey::new("Doc", id)
}

async fn usage(store: &dyn Storage, key: &ObjectKey) -> KvUsage {
    store.kv_usage(key).await.unwrap()
}

#[tokio::test]
async fn handlers_read_and_change_their_storage() {
    let rt = Runtime::new(MemoryStorage::new());
    assert_eq!(Doc::get(&rt, "d", "a".into()).await.unwrap(), None);
    Doc::put(&rt, "d", "a".into(), json!({"x": 1}))
        .await
        .unwrap();
    Doc::put(&rt, "d", "b".into(), json!([1, 2])).await.unwrap();
    Doc::put(&rt, "d", "c".into(), json!("three"))
        .await
        .unwrap();
    assert_eq!(
        Doc::get(&rt, "d", "a".into()).await.unwrap(),
        Some(json!({"x": 1}))
    );
    assert_eq!(
        Doc::keys(&rt, "d", String::new(), Some("a".into()), 10)
            .await
            .unwrap(),
        ["b", "c"]
    );
    Doc::delete(&rt, "d", "b".into()).await.unwrap();
    assert_eq!(
        Doc::keys(&rt, "d", String::new(), None, 10).await.unwrap(),
        ["a", "c"]
    );
    assert_eq!(
        Doc::put_and_list(&rt, "d", "b".into()).await.unwrap(),
        ["a", "b", "c"]
    );
    Doc::delete_all(&rt, "d").await.unwrap();
    assert!(
        Doc::keys(&rt, "d", String::new(), None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(Doc::get(&rt, "d", "a".into()).await.unwrap(), None);

    // A `&self` handler cannot change storage.
    let err = Doc::put_from_read(&rt, "d").await.unwrap_err();
    assert!(matches!(err, Error::Handler(KvError::ReadOnly)), "{err}");
}

/// A call that changes nothing but its keys still commits, with a new version.
#[tokio::test]
async fn a_call_changing_only_keys_commits() {
    let store = MemoryStorage::new();
    let rt = Runtime::new(store.clone());
    Doc::put(&rt, "d", "a".into(), json!(1)).await.unwrap();
    let version = store.load(&doc("d")).await.unwrap().version();
    Doc::put_and_list(&rt, "d", "a".into()).await.unwrap();
    assert_eq!(store.load(&doc("d")).await.unwrap().version(), version + 1);
    assert_eq!(
        store.kv_get(&doc("d"), "a").await.unwrap(),
        Some(b"2".to_vec())
    );
}

#[tokio::test]
async fn a_handler_error_or_panic_rolls_back_keys_with_the_state() {
    let store = MemoryStorage::new();
    let rt = Runtime::new(store.clone());
    Doc::put(&rt, "d", "kept".into(), json!(1)).await.unwrap();

    let err = Doc::put_then_fail(&rt, "d", "lost".into())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Handler(_)), "{err}");
    let err = Doc::put_then_panic(&rt, "d", "lost".into())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Panicked { .. }), "{err}");

    assert_eq!(Doc::writes(&rt, "d").await.unwrap(), 1);
    assert_eq!(Doc::get(&rt, "d", "lost".into()).await.unwrap(), None);
    assert_eq!(
        Doc::keys(&rt, "d", String::new(), None, 10).await.unwrap(),
        ["kept"]
    );
    assert_eq!(store.kv_get(&doc("d"), "lost").await.unwrap(), None);
}

#[tokio::test]
async fn a_failed_commit_rolls_back_keys_and_drops_the_cache() {
    let store = FaultyStorage::new(MemoryStorage::new());
    let rt = Runtime::new(store.clone());
    Doc::put(&rt, "d", "k".into(), json!("old")).await.unwrap();
    // Read once: cached now.
    assert_eq!(
        Doc::get(&rt, "d", "k".into()).await.unwrap(),
        Some(json!("old"))
    );

    store.fail_commits(1);
    let err = Doc::put(&rt, "d", "k".into(), json!("new"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::OutcomeUnknown { .. }), "{err}");
    // Neither the state nor the key changed, in storage or in what the object reads.
    assert_eq!(Doc::writes(&rt, "d").await.unwrap(), 1);
    assert_eq!(
        Doc::get(&rt, "d", "k".into()).await.unwrap(),
        Some(json!("old"))
    );
    assert_eq!(
        store.kv_get(&doc("d"), "k").await.unwrap(),
        Some(b"\"old\"".to_vec())
    );

    // A commit that failed after it was applied: the object reloads, and reads what storage
    // holds, not what it staged.
    store.fail_commits_after_applying(1);
    let err = Doc::put(&rt, "d", "k".into(), json!("maybe"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::OutcomeUnknown { .. }), "{err}");
    assert_eq!(Doc::writes(&rt, "d").await.unwrap(), 2);
    assert_eq!(
        Doc::get(&rt, "d", "k".into()).await.unwrap(),
        Some(json!("maybe"))
    );
}

/// Calls queued behind a write in flight see its changes, committed or not, and a listing
/// merges them with storage; the replies wait for the commits.
#[tokio::test]
async fn calls_see_the_uncommitted_changes_of_earlier_calls() {
    let store = FaultyStorage::new(MemoryStorage::new());
    let rt = Runtime::new(store.clone());
    Doc::put_many(&rt, "d", "s".into(), 3, 3).await.unwrap();
    store.delay_commits(Duration::from_millis(30));
    let calls = (0..6).map(|i| Doc::put_and_list(&rt, "d", format!("p{i}")));
    let listed = futures_util::future::join_all(calls).await;
    let mut lengths: Vec<usize> = listed.into_iter().map(|l| l.unwrap().len()).collect();
    lengths.sort_unstable();
    assert_eq!(lengths, [4, 5, 6, 7, 8, 9]);
    let all = store.kv_list(&doc("d"), "", None, 100).await.unwrap();
    assert_eq!(all.len(), 9);
}

/// Default limits: a value of exactly 1 MiB passes and one byte more fails at `put`; the
/// 10,000th key passes and the 10,001st fails at commit; 50 MiB exactly passes and one byte
/// more fails at commit. A failure writes nothing, state included.
#[tokio::test]
async fn default_limits_hold_at_their_boundaries() {
    let store = MemoryStorage::new();
    let rt = Runtime::new(store.clone());
    let max_value = DEFAULT_MAX_VALUE_BYTES as usize;

    Doc::put_many(&rt, "v", "big".into(), 1, max_value)
        .await
        .unwrap();
    let err = Doc::put_many(&rt, "v", "bigger".into(), 1, max_value + 1)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Handler(KvError::ValueTooLarge { size, max, .. }) if size == max + 1 && max == DEFAULT_MAX_VALUE_BYTES),
        "{err}"
    );
    assert_eq!(store.kv_get(&doc("v"), "bigger0").await.unwrap(), None);

    // Keys: 10,000 in one call, then one more.
    let keys = DEFAULT_MAX_KEYS as usize;
    Doc::put_many(&rt, "k", "key".into(), keys, 2)
        .await
        .unwrap();
    assert_eq!(usage(&store, &doc("k")).await.keys, DEFAULT_MAX_KEYS);
    let writes = Doc::writes(&rt, "k").await.unwrap();
    let err = Doc::put(&rt, "k", "one more".into(), json!(1))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::KvLimit { limit: KvLimitExceeded::Keys { max, found }, .. } if max == DEFAULT_MAX_KEYS && found == max + 1),
        "{err}"
    );
    assert_eq!(usage(&store, &doc("k")).await.keys, DEFAULT_MAX_KEYS);
    assert_eq!(
        Doc::writes(&rt, "k").await.unwrap(),
        writes,
        "the state was rolled back"
    );
    // Replacing a key stays within the count.
    Doc::put(&rt, "k", "key0".into(), json!(0)).await.unwrap();

    // Bytes: 49 values of 1 MiB under 3-byte keys, then one that fills the rest exactly.
    let entry = (max_value + 3) as u64;
    for i in 0..49 {
        Doc::put_many(&rt, "b", format!("b{i:02}"), 1, max_value)
            .await
            .unwrap();
    }
    // `put_many` names its key `{prefix}0`: 4-byte keys.
    let held = usage(&store, &doc("b")).await.bytes;
    assert_eq!(held, 49 * (entry + 1));
    let rest = DEFAULT_MAX_BYTES - held;
    Doc::put_many(&rt, "b", "zzz".into(), 1, (rest - 4) as usize)
        .await
        .unwrap();
    assert_eq!(usage(&store, &doc("b")).await.bytes, DEFAULT_MAX_BYTES);
    let err = Doc::put(&rt, "b", "x".into(), json!(1)).await.unwrap_err();
    assert!(
        matches!(err, Error::KvLimit { limit: KvLimitExceeded::Bytes { max, found }, .. } if max == DEFAULT_MAX_BYTES && found == max + 2),
        "{err}"
    );
    assert_eq!(usage(&store, &doc("b")).await.bytes, DEFAULT_MAX_BYTES);
    assert_eq!(store.kv_get(&doc("b"), "x").await.unwrap(), None);
}

/// Limits declared on the type, at their boundaries, on every backend.
async fn declared_limits_hold_at_their_boundaries(backend: &Backend) {
    let rt = Runtime::new(Arc::clone(&backend.store));
    let store = backend.store.as_ref();
    let small = ObjectKey::new("Small", "s");
    // Value: 10 bytes pass, 11 fail at `put`.
    Small::put(&rt, "s", "a".into(), 10).await.unwrap();
    let err = Small::put(&rt, "s", "b".into(), 11).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Handler(KvError::ValueTooLarge {
                size: 11,
                max: 10,
                ..
            })
        ),
        "{err}"
    );
    // Bytes: 11 + 11 + 8 = 30 exactly; one more byte fails at commit.
    Small::put(&rt, "s", "b".into(), 10).await.unwrap();
    Small::put(&rt, "s", "c".into(), 7).await.unwrap();
    assert_eq!(usage(store, &small).await, KvUsage { keys: 3, bytes: 30 });
    let err = Small::put(&rt, "s", "c".into(), 8).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::KvLimit {
                limit: KvLimitExceeded::Bytes { max: 30, found: 31 },
                ..
            }
        ),
        "{err}"
    );
    // Keys: the fourth fails at commit.
    let err = Small::put(&rt, "s", "d".into(), 2).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::KvLimit {
                limit: KvLimitExceeded::Keys { max: 3, found: 4 },
                ..
            }
        ),
        "{err}"
    );
    // Nothing of the failed calls was written, state included.
    assert_eq!(usage(store, &small).await, KvUsage { keys: 3, bytes: 30 });
    assert_eq!(store.kv_get(&small, "d").await.unwrap(), None);
    assert_eq!(
        store.kv_get(&small, "c").await.unwrap().map(|v| v.len()),
        Some(7)
    );
    assert_eq!(Small::writes(&rt, "s").await.unwrap(), 3);
}

/// Two runtimes on one database: a write from the one holding an outdated version conflicts,
/// writes neither state nor keys, and the object reloads and reads the other's keys.
async fn two_runtimes_conflict_and_reload(backend: &Backend) {
    let one = Runtime::new(Arc::clone(&backend.store));
    let two = Runtime::new(backend.open_again().await);
    Doc::put(&one, "d", "k".into(), json!(1)).await.unwrap();
    assert_eq!(
        Doc::get(&one, "d", "k".into()).await.unwrap(),
        Some(json!(1))
    );
    Doc::put(&two, "d", "k".into(), json!(2)).await.unwrap();

    let err = Doc::put(&one, "d", "j".into(), json!(3)).await.unwrap_err();
    assert!(matches!(err, Error::Conflict { .. }), "{err}");
    assert_eq!(backend.store.kv_get(&doc("d"), "j").await.unwrap(), None);
    assert_eq!(
        Doc::get(&one, "d", "k".into()).await.unwrap(),
        Some(json!(2))
    );
    assert_eq!(Doc::get(&one, "d", "j".into()).await.unwrap(), None);
    Doc::put(&one, "d", "j".into(), json!(3)).await.unwrap();
    assert_eq!(
        Doc::keys(&two, "d", String::new(), None, 10).await.unwrap(),
        ["j", "k"]
    );
}

/// Hibernation drops the read cache: a value another runtime changed meanwhile is read fresh.
async fn hibernation_drops_the_cache(backend: &Backend) {
    let options = ObjectOptions::new().with_hibernate_after(Duration::from_millis(50));
    let one = Runtime::builder(Arc::clone(&backend.store))
        .register_with::<Doc>(options)
        .build();
    let two = Runtime::new(backend.open_again().await);
    Doc::put(&one, "d", "k".into(), json!("first"))
        .await
        .unwrap();
    assert_eq!(
        Doc::get(&one, "d", "k".into()).await.unwrap(),
        Some(json!("first"))
    );
    Doc::put(&two, "d", "k".into(), json!("second"))
        .await
        .unwrap();
    eventually(|| async { one.status::<Doc>("d").await.unwrap() == ObjectStatus::Hibernated })
        .await;
    assert_eq!(
        Doc::get(&one, "d", "k".into()).await.unwrap(),
        Some(json!("second"))
    );
}

durable_tests::backend_cases!(
    declared_limits_hold_at_their_boundaries,
    two_runtimes_conflict_and_reload,
    hibernation_drops_the_cache,
);
