//! The storage conformance suite: one set of checks every [`Storage`] backend must pass.
//!
//! Each check is a `pub async fn` taking a store that is fresh and empty (some checks look at
//! every alarm of the store). It panics, with a message saying what went wrong, when the
//! store breaks the contract. Two ways to run them:
//!
//! - [`conformance_tests!`](crate::conformance_tests) declares one `#[tokio::test]` per check
//!   in the calling module, so a failure names its check (the calling crate needs `tokio` with
//!   the `macros` and `rt` features);
//! - [`run_all`] runs every check in turn, on a new store each.
//!
//! The suite is behind the `conformance` feature.
//!
//! # Examples
//!
//! ```
//! use durable_runtime::storage::MemoryStorage;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! durable_runtime::conformance::run_all(|| async { MemoryStorage::new() }).await;
//! # }
//! ```
//!
//! In a test file, one test per check:
//!
//! ```
//! # mod tests {
//! use durable_runtime::storage::MemoryStorage;
//!
//! // The closure gets the check's name (for naming a database or schema) and returns the
//! // fixture, or `None` to skip the test.
//! durable_runtime::conformance_tests!(|_case| async { Some(MemoryStorage::new()) });
//! # }
//! # fn main() {}
//! ```

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::FutureExt;
use futures_util::future::join_all;

use crate::storage::{
    AlarmChange, AlarmRecord, CommitError, ObjectKey, ObjectWrite, Storage, StoredObject,
    truncate_to_micros,
};

/// What a test setup hands to the checks: a store, plus whatever must live as long as the
/// store (a temporary directory, a schema dropped on drop).
///
/// Every [`Storage`] is a fixture of itself.
///
/// # Examples
///
/// ```
/// use durable_runtime::conformance::Fixture;
/// use durable_runtime::storage::MemoryStorage;
///
/// struct WithGuard {
///     store: MemoryStorage,
///     _guard: (), // e.g. a temporary directory
/// }
///
/// impl Fixture for WithGuard {
///     type Store = MemoryStorage;
///     fn store(&self) -> &MemoryStorage {
///         &self.store
///     }
/// }
/// # let f = WithGuard { store: MemoryStorage::new(), _guard: () };
/// # let _ = f.store();
/// ```
pub trait Fixture {
    /// The store under test.
    type Store: Storage + ?Sized;

    /// The store under test.
    fn store(&self) -> &Self::Store;
}

impl<S: Storage> Fixture for S {
    type Store = S;

    fn store(&self) -> &S {
        self
    }
}

/// Declares one `#[tokio::test]` per conformance check, in the calling module.
///
/// The argument is a closure (or function) taking the check's name (`&'static str`) and
/// returning a future of `Option<F>` where `F:` [`Fixture`]: a fresh, empty store (with its
/// guards), or `None` to skip the test (say, when no database is configured).
///
/// # Examples
///
/// ```
/// # mod tests {
/// use durable_runtime::storage::MemoryStorage;
///
/// durable_runtime::conformance_tests!(|_case| async { Some(MemoryStorage::new()) });
/// # }
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! conformance_tests {
    ($setup:expr $(,)?) => {
        $crate::__conformance_cases!(__conformance_test_fns { $setup });
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_test_fns {
    ({ $setup:expr } $($case:ident)*) => {
        $(
            #[tokio::test]
            async fn $case() {
                let Some(fixture) = ($setup)(stringify!($case)).await else {
                    return;
                };
                $crate::conformance::$case($crate::conformance::Fixture::store(&fixture)).await;
            }
        )*
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_run_all {
    ({ $make:ident } $($case:ident)*) => {
        $(
            $crate::conformance::__run_case(stringify!($case), async {
                let store = $make().await;
                $crate::conformance::$case(&store).await;
            })
            .await;
        )*
    };
}

/// The list of checks, in one place: passes them to `$callback`.
#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_cases {
    ($callback:ident { $($args:tt)* }) => {
        $crate::$callback! {
            { $($args)* }
            load_missing
            insert_then_load
            load_many_in_key_order
            update_with_expected_version
            stale_version_conflicts
            insert_over_existing_conflicts
            update_missing_conflicts
            batch_is_atomic
            batch_commits_many_objects
            stateless_write_bumps_version
            delete_removes_state_and_alarms
            list_ids_pages
            list_ids_byte_order
            odd_ids_round_trip
            large_state_round_trips
            nul_escape_round_trips
            concurrent_writers_one_winner
            concurrent_inserts_one_winner
            concurrent_increments_lose_nothing
            alarms_set_and_list
            alarm_set_replaces_and_clears_claim
            alarm_cancel_one
            alarm_cancel_all
            alarm_changes_apply_in_order
            alarm_changes_of_a_batch_apply_per_object
            next_alarm_due_ignores_claimed_and_dead
            claim_respects_due_time_and_limit
            claim_expiry
            concurrent_claimers_disjoint
            finish_alarm_requires_same_claim
            rescheduled_alarm_survives_finish
            finish_in_commit_applies_with_state
            fail_alarm_retry
            fail_alarm_dead
            release_alarm_keeps_it_due
            time_round_trip_micros
        }
    };
}

/// Runs every check, each on a new store from `make`, panicking with the name of the first
/// check that fails.
///
/// # Examples
///
/// ```
/// use durable_runtime::storage::MemoryStorage;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// durable_runtime::conformance::run_all(|| async { MemoryStorage::new() }).await;
/// # }
/// ```
pub async fn run_all<S, F, Fut>(make: F)
where
    S: Storage,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    __conformance_cases!(__conformance_run_all { make });
}

#[doc(hidden)]
pub async fn __run_case(name: &str, case: impl Future<Output = ()>) {
    if let Err(panic) = AssertUnwindSafe(case).catch_unwind().await {
        let message = panic
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| panic.downcast_ref::<&str>().copied())
            .unwrap_or("(no message)");
        panic!("storage conformance check `{name}` failed: {message}");
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers

/// A key of a type private to one check.
fn key(case: &str, id: &str) -> ObjectKey {
    ObjectKey::new(format!("conformance.{case}"), id)
}

/// A fixed instant (2023-11-14T22:13:20.123457Z) plus `offset_ms`, with an odd microsecond
/// part so that truncation errors show.
fn at(offset_ms: i64) -> SystemTime {
    const BASE_MICROS: i64 = 1_700_000_000_123_457;
    let micros = BASE_MICROS + offset_ms * 1000;
    truncate_to_micros(UNIX_EPOCH + Duration::from_micros(micros as u64))
}

fn json(value: serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(&value).expect("JSON")
}

fn insert(key: &ObjectKey, state: &[u8]) -> ObjectWrite {
    ObjectWrite {
        key: key.clone(),
        expected_version: 0,
        state: Some(state.to_vec()),
        alarms: vec![],
    }
}

fn update(key: &ObjectKey, expected_version: u64, state: &[u8]) -> ObjectWrite {
    ObjectWrite {
        key: key.clone(),
        expected_version,
        state: Some(state.to_vec()),
        alarms: vec![],
    }
}

fn alarms_only(key: &ObjectKey, expected_version: u64, alarms: Vec<AlarmChange>) -> ObjectWrite {
    ObjectWrite {
        key: key.clone(),
        expected_version,
        state: None,
        alarms,
    }
}

fn set(name: &str, due_at: SystemTime) -> AlarmChange {
    AlarmChange::Set {
        name: name.to_owned(),
        due_at,
    }
}

fn cancel(name: &str) -> AlarmChange {
    AlarmChange::Cancel {
        name: name.to_owned(),
    }
}

async fn commit_ok<S: Storage + ?Sized>(store: &S, batch: &[ObjectWrite]) {
    if let Err(err) = store.commit(batch).await {
        panic!("commit of {batch:?} failed: {err}");
    }
}

async fn load<S: Storage + ?Sized>(store: &S, key: &ObjectKey) -> Option<StoredObject> {
    store
        .load(key)
        .await
        .unwrap_or_else(|err| panic!("load of {key} failed: {err}"))
}

async fn alarms<S: Storage + ?Sized>(store: &S, key: &ObjectKey) -> Vec<AlarmRecord> {
    store
        .list_alarms(key)
        .await
        .unwrap_or_else(|err| panic!("list_alarms of {key} failed: {err}"))
}

/// `(name, due_at)` of each alarm, in listed order.
async fn alarm_times<S: Storage + ?Sized>(store: &S, key: &ObjectKey) -> Vec<(String, SystemTime)> {
    alarms(store, key)
        .await
        .into_iter()
        .map(|a| (a.name, a.due_at))
        .collect()
}

async fn claim<S: Storage + ?Sized>(
    store: &S,
    now: SystemTime,
    expired_before: SystemTime,
    limit: usize,
) -> Vec<AlarmRecord> {
    store
        .claim_due_alarms(now, expired_before, limit)
        .await
        .unwrap_or_else(|err| panic!("claim_due_alarms failed: {err}"))
}

async fn next_due<S: Storage + ?Sized>(store: &S) -> Option<SystemTime> {
    store
        .next_alarm_due()
        .await
        .unwrap_or_else(|err| panic!("next_alarm_due failed: {err}"))
}

#[track_caller]
fn assert_conflict(
    result: Result<(), CommitError>,
    index: usize,
    key: &ObjectKey,
    expected: u64,
    found: Option<u64>,
) {
    match result {
        Err(CommitError::Conflict {
            index: i,
            key: k,
            expected: e,
            found: f,
        }) => {
            assert_eq!(
                (i, &k, e, f),
                (index, key, expected, found),
                "wrong conflict details (index, key, expected, found)"
            );
        }
        Err(CommitError::Storage(err)) => {
            panic!("expected a version conflict on {key}, got a storage error: {err}")
        }
        Ok(()) => panic!("expected a version conflict on {key}, but the commit succeeded"),
    }
}

fn names(alarms: &[AlarmRecord]) -> Vec<&str> {
    alarms.iter().map(|a| a.name.as_str()).collect()
}

// ---------------------------------------------------------------------------------------------
// Objects

/// A key never written loads as `None`; an empty store lists nothing and deletes nothing.
pub async fn load_missing<S: Storage + ?Sized>(store: &S) {
    let k = key("load_missing", "a");
    assert_eq!(
        load(store, &k).await,
        None,
        "a missing object must load as None"
    );
    let page = store.list_ids(&k.object_type, None, 10).await.unwrap();
    assert!(page.ids.is_empty() && page.next.is_none(), "{page:?}");
    assert!(alarms(store, &k).await.is_empty());
    assert_eq!(next_due(store).await, None);
    assert!(
        !store.delete(&k).await.unwrap(),
        "deleting nothing returns false"
    );
}

/// A first write (expected version 0) stores the state at version 1, exactly.
pub async fn insert_then_load<S: Storage + ?Sized>(store: &S) {
    let k = key("insert_then_load", "a");
    let state = json(serde_json::json!({"count": 1, "name": "a"}));
    commit_ok(store, &[insert(&k, &state)]).await;
    assert_eq!(
        load(store, &k).await,
        Some(StoredObject {
            state: state.clone(),
            version: 1
        })
    );
    // Same id, other type: a different object.
    let other = ObjectKey::new("conformance.insert_then_load.other", "a");
    assert_eq!(load(store, &other).await, None, "types must not share ids");
}

/// A batched load answers every key in the order given: what [`Storage::load`] would return
/// for each, repeats and unknown keys included.
pub async fn load_many_in_key_order<S: Storage + ?Sized>(store: &S) {
    let loaded = store.load_many(&[]).await.expect("an empty batched load");
    assert!(loaded.is_empty(), "no keys, no results: {loaded:?}");
    let a = key("load_many_in_key_order", "a");
    let b = key("load_many_in_key_order", "b/\u{e9} 'quoted'");
    let missing = key("load_many_in_key_order", "missing");
    let other_type = ObjectKey::new("conformance.load_many_in_key_order.other", "a");
    let (state_a, state_b) = (
        json(serde_json::json!({"n": 1})),
        json(serde_json::json!({"n": 2})),
    );
    commit_ok(store, &[insert(&a, &state_a), insert(&b, &state_b)]).await;
    commit_ok(store, &[update(&b, 1, &state_b)]).await;
    let keys = [b.clone(), missing, a.clone(), other_type, b.clone()];
    let loaded = store.load_many(&keys).await.expect("a batched load");
    let stored_a = Some(StoredObject {
        state: state_a,
        version: 1,
    });
    let stored_b = Some(StoredObject {
        state: state_b,
        version: 2,
    });
    assert_eq!(
        loaded,
        vec![stored_b.clone(), None, stored_a, None, stored_b],
        "one result per key, in key order"
    );
    // More keys than any one claim of alarms, every other one stored.
    let many: Vec<ObjectKey> = (0..1200)
        .map(|i| key("load_many_in_key_order", &format!("many-{i}")))
        .collect();
    let writes: Vec<ObjectWrite> = many
        .iter()
        .step_by(2)
        .map(|k| insert(k, &json(serde_json::json!({ "id": k.object_id }))))
        .collect();
    commit_ok(store, &writes).await;
    let loaded = store.load_many(&many).await.expect("a large batched load");
    assert_eq!(loaded.len(), many.len());
    for (i, (k, stored)) in many.iter().zip(&loaded).enumerate() {
        let expected = (i % 2 == 0).then(|| StoredObject {
            state: json(serde_json::json!({ "id": k.object_id })),
            version: 1,
        });
        assert_eq!(stored, &expected, "key {k}");
    }
}

/// Each write naming the current version replaces the state and advances the version by one.
pub async fn update_with_expected_version<S: Storage + ?Sized>(store: &S) {
    let k = key("update_with_expected_version", "a");
    commit_ok(store, &[insert(&k, b"{\"n\":1}")]).await;
    for version in 1..=5u64 {
        let state = format!("{{\"n\":{}}}", version + 1).into_bytes();
        commit_ok(store, &[update(&k, version, &state)]).await;
        assert_eq!(
            load(store, &k).await,
            Some(StoredObject {
                state,
                version: version + 1
            })
        );
    }
}

/// A write naming an older (or newer) version than stored is a conflict and changes nothing.
pub async fn stale_version_conflicts<S: Storage + ?Sized>(store: &S) {
    let k = key("stale_version_conflicts", "a");
    commit_ok(store, &[insert(&k, b"{\"n\":1}")]).await;
    commit_ok(store, &[update(&k, 1, b"{\"n\":2}")]).await;
    assert_conflict(
        store.commit(&[update(&k, 1, b"{\"n\":3}")]).await,
        0,
        &k,
        1,
        Some(2),
    );
    assert_conflict(
        store.commit(&[update(&k, 7, b"{\"n\":3}")]).await,
        0,
        &k,
        7,
        Some(2),
    );
    assert_eq!(
        load(store, &k).await,
        Some(StoredObject {
            state: b"{\"n\":2}".to_vec(),
            version: 2
        }),
        "a rejected write must not change the stored state"
    );
}

/// A first write (expected version 0) of an object that exists is a conflict.
pub async fn insert_over_existing_conflicts<S: Storage + ?Sized>(store: &S) {
    let k = key("insert_over_existing_conflicts", "a");
    commit_ok(store, &[insert(&k, b"{\"n\":1}")]).await;
    assert_conflict(
        store.commit(&[insert(&k, b"{\"n\":9}")]).await,
        0,
        &k,
        0,
        Some(1),
    );
    assert_eq!(
        load(store, &k).await,
        Some(StoredObject {
            state: b"{\"n\":1}".to_vec(),
            version: 1
        })
    );
}

/// A write expecting a version of an object that does not exist is a conflict (found `None`),
/// with or without a state.
pub async fn update_missing_conflicts<S: Storage + ?Sized>(store: &S) {
    let k = key("update_missing_conflicts", "a");
    assert_conflict(store.commit(&[update(&k, 1, b"{}")]).await, 0, &k, 1, None);
    assert_conflict(
        store
            .commit(&[alarms_only(&k, 0, vec![set("x", at(0))])])
            .await,
        0,
        &k,
        0,
        None,
    );
    assert_conflict(
        store.commit(&[alarms_only(&k, 3, vec![])]).await,
        0,
        &k,
        3,
        None,
    );
    assert_eq!(load(store, &k).await, None);
    assert!(
        alarms(store, &k).await.is_empty(),
        "a rejected write sets no alarm"
    );
}

/// One conflicting write rejects its whole batch, wherever it is in the batch, and the error
/// names its index in the batch.
pub async fn batch_is_atomic<S: Storage + ?Sized>(store: &S) {
    let a = key("batch_is_atomic", "a");
    let b = key("batch_is_atomic", "b");
    let z = key("batch_is_atomic", "z");
    commit_ok(store, &[insert(&b, b"{\"b\":1}")]).await;

    // The conflict comes after a good write (and sorts before it by key).
    let mut good = insert(&z, b"{\"z\":1}");
    good.alarms.push(set("ring", at(0)));
    assert_conflict(
        store.commit(&[good.clone(), update(&b, 7, b"{}")]).await,
        1,
        &b,
        7,
        Some(1),
    );
    assert_eq!(
        load(store, &z).await,
        None,
        "the first write of a rejected batch was applied"
    );
    assert!(
        alarms(store, &z).await.is_empty(),
        "alarms of a rejected batch were applied"
    );

    // The conflict comes first.
    assert_conflict(
        store
            .commit(&[update(&b, 0, b"{}"), insert(&a, b"{}")])
            .await,
        0,
        &b,
        0,
        Some(1),
    );
    assert_eq!(load(store, &a).await, None);

    // Without the conflict the same batch goes through.
    commit_ok(store, &[good, update(&b, 1, b"{\"b\":2}")]).await;
    assert_eq!(load(store, &z).await.map(|o| o.version), Some(1));
    assert_eq!(load(store, &b).await.map(|o| o.version), Some(2));
    assert_eq!(alarms(store, &z).await.len(), 1);
}

/// A batch writes many objects at once.
pub async fn batch_commits_many_objects<S: Storage + ?Sized>(store: &S) {
    let keys: Vec<ObjectKey> = (0..50)
        .map(|i| key("batch_commits_many_objects", &format!("obj-{i:02}")))
        .collect();
    let batch: Vec<ObjectWrite> = keys
        .iter()
        .map(|k| insert(k, format!("{{\"id\":\"{}\"}}", k.object_id).as_bytes()))
        .collect();
    commit_ok(store, &batch).await;
    let batch: Vec<ObjectWrite> = keys.iter().map(|k| update(k, 1, b"{\"v\":2}")).collect();
    commit_ok(store, &batch).await;
    for k in &keys {
        assert_eq!(
            load(store, k).await,
            Some(StoredObject {
                state: b"{\"v\":2}".to_vec(),
                version: 2
            })
        );
    }
    let page = store
        .list_ids("conformance.batch_commits_many_objects", None, 100)
        .await
        .unwrap();
    assert_eq!(page.ids.len(), 50);
}

/// A write without a state keeps the state, still checks and advances the version, and applies
/// its alarm changes.
pub async fn stateless_write_bumps_version<S: Storage + ?Sized>(store: &S) {
    let k = key("stateless_write_bumps_version", "a");
    commit_ok(store, &[insert(&k, b"{\"n\":1}")]).await;
    commit_ok(store, &[alarms_only(&k, 1, vec![set("tick", at(10))])]).await;
    assert_eq!(
        load(store, &k).await,
        Some(StoredObject {
            state: b"{\"n\":1}".to_vec(),
            version: 2
        })
    );
    assert_eq!(
        alarm_times(store, &k).await,
        vec![("tick".to_owned(), at(10))]
    );
    commit_ok(store, &[alarms_only(&k, 2, vec![])]).await;
    assert_eq!(load(store, &k).await.map(|o| o.version), Some(3));
    assert_conflict(
        store
            .commit(&[alarms_only(&k, 2, vec![cancel("tick")])])
            .await,
        0,
        &k,
        2,
        Some(3),
    );
    assert_eq!(
        alarms(store, &k).await.len(),
        1,
        "a rejected write cancelled an alarm"
    );
}

/// Delete removes the state and every alarm of one object (and only of that object), and says
/// whether a state existed; the object can then be created again from version 0.
pub async fn delete_removes_state_and_alarms<S: Storage + ?Sized>(store: &S) {
    let a = key("delete_removes_state_and_alarms", "a");
    let b = key("delete_removes_state_and_alarms", "b");
    let mut write_a = insert(&a, b"{\"a\":1}");
    write_a.alarms = vec![set("x", at(1)), set("y", at(2))];
    let mut write_b = insert(&b, b"{\"b\":1}");
    write_b.alarms = vec![set("x", at(1))];
    commit_ok(store, &[write_a, write_b]).await;

    assert!(
        store.delete(&a).await.unwrap(),
        "delete of a stored object returns true"
    );
    assert_eq!(load(store, &a).await, None);
    assert!(
        alarms(store, &a).await.is_empty(),
        "delete must remove the object's alarms"
    );
    assert_eq!(load(store, &b).await.map(|o| o.version), Some(1));
    assert_eq!(
        alarms(store, &b).await.len(),
        1,
        "delete touched another object's alarms"
    );
    assert!(
        !store.delete(&a).await.unwrap(),
        "a second delete returns false"
    );

    commit_ok(store, &[insert(&a, b"{\"a\":2}")]).await;
    assert_eq!(
        load(store, &a).await,
        Some(StoredObject {
            state: b"{\"a\":2}".to_vec(),
            version: 1
        })
    );
}

/// `list_ids` pages through one type's ids in order, with a cursor, and only that type's.
pub async fn list_ids_pages<S: Storage + ?Sized>(store: &S) {
    let ty = "conformance.list_ids_pages";
    let batch: Vec<ObjectWrite> = ["d", "b", "a", "e", "c"]
        .iter()
        .map(|id| insert(&ObjectKey::new(ty, *id), b"{}"))
        .chain(["a0", "zz"].iter().map(|id| {
            insert(
                &ObjectKey::new("conformance.list_ids_pages.other", *id),
                b"{}",
            )
        }))
        .collect();
    commit_ok(store, &batch).await;

    let page = store.list_ids(ty, None, 2).await.unwrap();
    assert_eq!(page.ids, ["a", "b"]);
    assert_eq!(page.next.as_deref(), Some("b"));
    let page = store.list_ids(ty, page.next.as_deref(), 2).await.unwrap();
    assert_eq!(page.ids, ["c", "d"]);
    assert_eq!(page.next.as_deref(), Some("d"));
    let page = store.list_ids(ty, page.next.as_deref(), 2).await.unwrap();
    assert_eq!(page.ids, ["e"]);
    assert_eq!(page.next, None, "the last page has no cursor");

    let page = store.list_ids(ty, None, 5).await.unwrap();
    assert_eq!(page.ids, ["a", "b", "c", "d", "e"]);
    assert_eq!(
        page.next, None,
        "a page holding exactly the rest has no cursor"
    );
    let page = store.list_ids(ty, None, 100).await.unwrap();
    assert_eq!(page.ids.len(), 5);
    assert_eq!(page.next, None);

    // A cursor need not be a stored id.
    let page = store.list_ids(ty, Some("bb"), 10).await.unwrap();
    assert_eq!(page.ids, ["c", "d", "e"]);
    let page = store.list_ids(ty, Some("e"), 10).await.unwrap();
    assert!(page.ids.is_empty() && page.next.is_none(), "{page:?}");
    let page = store
        .list_ids("conformance.nothing", None, 10)
        .await
        .unwrap();
    assert!(page.ids.is_empty() && page.next.is_none(), "{page:?}");
}

/// Ids are listed in ascending byte order (UTF-8), whatever the database's collation.
pub async fn list_ids_byte_order<S: Storage + ?Sized>(store: &S) {
    let ty = "conformance.list_ids_byte_order";
    let ids = [
        "a", "B", "é", "~", "a b", "a/b", "Z", "10", "9", "_", "-", "ab", "aB", "e", "f", "🦀",
        "Ω", "a-b", "a_b",
    ];
    let batch: Vec<ObjectWrite> = ids
        .iter()
        .map(|id| insert(&ObjectKey::new(ty, *id), b"{}"))
        .collect();
    commit_ok(store, &batch).await;
    let mut expected: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
    expected.sort();
    let page = store.list_ids(ty, None, 100).await.unwrap();
    assert_eq!(page.ids, expected, "ids must be listed in byte order");

    let mut paged = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = store.list_ids(ty, after.as_deref(), 3).await.unwrap();
        paged.extend(page.ids);
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!(paged, expected, "paging in byte order");
}

/// Ids and alarm names with SQL and URL metacharacters, quotes, whitespace, non-ASCII text and
/// the maximum length (1024 bytes) round-trip exactly.
pub async fn odd_ids_round_trip<S: Storage + ?Sized>(store: &S) {
    let ty = "conformance.odd_ids_round_trip";
    let long = "x".repeat(crate::MAX_ID_LEN);
    let ids: Vec<&str> = vec![
        "user/42",
        "a'b",
        "a\"b",
        "100%",
        "%",
        "_",
        "a_b%c",
        "🦀",
        "日本語",
        "'; DROP TABLE durable_objects; --",
        "\"; DROP TABLE x; --",
        "tab\there",
        "new\nline",
        "back\\slash",
        " leading and trailing ",
        "?1 $1 :name @p",
        "a*b[c]",
        &long,
    ];
    for id in &ids {
        let k = ObjectKey::new(ty, *id);
        let state = json(serde_json::json!({ "id": id }));
        let mut write = insert(&k, &state);
        write.alarms.push(set(id, at(5)));
        commit_ok(store, &[write]).await;
        assert_eq!(
            load(store, &k).await,
            Some(StoredObject { state, version: 1 }),
            "id {id:?}"
        );
        assert_eq!(
            alarm_times(store, &k).await,
            vec![(id.to_string(), at(5))],
            "alarm name {id:?}"
        );
    }
    let mut expected: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
    expected.sort();
    assert_eq!(store.list_ids(ty, None, 100).await.unwrap().ids, expected);
    let after_percent = store.list_ids(ty, Some("%"), 100).await.unwrap().ids;
    assert_eq!(
        after_percent,
        expected
            .iter()
            .filter(|id| id.as_str() > "%")
            .cloned()
            .collect::<Vec<_>>()
    );
    for id in &ids {
        let k = ObjectKey::new(ty, *id);
        assert!(store.delete(&k).await.unwrap(), "delete {id:?}");
        assert!(alarms(store, &k).await.is_empty(), "alarms of {id:?}");
    }
    assert!(store.list_ids(ty, None, 100).await.unwrap().ids.is_empty());
}

/// A state of more than 1 MiB round-trips, and can be replaced by another.
pub async fn large_state_round_trips<S: Storage + ?Sized>(store: &S) {
    let k = key("large_state_round_trips", "a");
    let big = |fill: char| {
        let blob: String = std::iter::repeat_n(fill, 1 << 20).collect();
        json(serde_json::json!({ "blob": blob }))
    };
    let first = big('a');
    assert!(first.len() > 1 << 20);
    commit_ok(store, &[insert(&k, &first)]).await;
    assert_eq!(
        load(store, &k).await,
        Some(StoredObject {
            state: first,
            version: 1
        })
    );
    let second = big('é');
    commit_ok(store, &[update(&k, 1, &second)]).await;
    assert_eq!(
        load(store, &k).await,
        Some(StoredObject {
            state: second,
            version: 2
        })
    );
}

/// JSON strings holding U+0000 (written as the escape `\u0000`), other escapes and non-ASCII
/// text round-trip byte for byte.
pub async fn nul_escape_round_trips<S: Storage + ?Sized>(store: &S) {
    let k = key("nul_escape_round_trips", "a");
    let value = serde_json::json!({
        "nul": "a\u{0}b",
        "controls": "\u{1}\u{1f}\t\n\r",
        "quotes": "'\"\\",
        "text": "héllo 🦀 日本",
        "nested": { "list": ["\u{0}", 1, null, true] }
    });
    let state = json(value.clone());
    assert!(
        std::str::from_utf8(&state).unwrap().contains("\\u0000"),
        "serde_json escapes U+0000"
    );
    commit_ok(store, &[insert(&k, &state)]).await;
    let stored = load(store, &k).await.expect("stored");
    assert_eq!(
        stored.state, state,
        "the stored bytes must be returned unchanged"
    );
    let decoded: serde_json::Value = serde_json::from_slice(&stored.state).unwrap();
    assert_eq!(decoded, value);

    let raw = br#"{"s":"\u0000\u0000","t":"\ud83e\udd80"}"#.to_vec();
    commit_ok(store, &[update(&k, 1, &raw)]).await;
    assert_eq!(load(store, &k).await.unwrap().state, raw);
}

/// Writers racing on one object with the same expected version: exactly one wins each round;
/// the others get a conflict naming the winner's version.
pub async fn concurrent_writers_one_winner<S: Storage + ?Sized>(store: &S) {
    let k = key("concurrent_writers_one_winner", "a");
    commit_ok(store, &[insert(&k, b"{\"writer\":null}")]).await;
    for version in 1..=5u64 {
        let states: Vec<Vec<u8>> = (0..8)
            .map(|writer| format!("{{\"writer\":{writer},\"round\":{version}}}").into_bytes())
            .collect();
        let results = join_all(states.iter().map(|state| {
            let write = [update(&k, version, state)];
            async move { store.commit(&write).await }
        }))
        .await;
        let mut winners = Vec::new();
        for (writer, result) in results.into_iter().enumerate() {
            match result {
                Ok(()) => winners.push(writer),
                Err(CommitError::Conflict {
                    index,
                    expected,
                    found,
                    ..
                }) => {
                    assert_eq!(
                        (index, expected, found),
                        (0, version, Some(version + 1)),
                        "a loser must see the winner's version"
                    );
                }
                Err(err) => panic!("writer {writer} failed: {err}"),
            }
        }
        assert_eq!(winners.len(), 1, "round {version}: winners {winners:?}");
        assert_eq!(
            load(store, &k).await,
            Some(StoredObject {
                state: states[winners[0]].clone(),
                version: version + 1
            }),
            "the stored state is the winner's"
        );
    }
}

/// Racing first writes of one object: exactly one creates it.
pub async fn concurrent_inserts_one_winner<S: Storage + ?Sized>(store: &S) {
    let k = key("concurrent_inserts_one_winner", "a");
    let results = join_all((0..8).map(|writer| {
        let write = [insert(&k, format!("{{\"writer\":{writer}}}").as_bytes())];
        async move { store.commit(&write).await }
    }))
    .await;
    let mut winners = 0;
    for result in results {
        match result {
            Ok(()) => winners += 1,
            Err(CommitError::Conflict { found, .. }) => assert_eq!(found, Some(1)),
            Err(err) => panic!("insert failed: {err}"),
        }
    }
    assert_eq!(winners, 1);
    assert_eq!(load(store, &k).await.map(|o| o.version), Some(1));
}

/// Concurrent read-modify-write loops that retry on conflict never lose an update.
pub async fn concurrent_increments_lose_nothing<S: Storage + ?Sized>(store: &S) {
    const WORKERS: u64 = 6;
    const INCREMENTS: u64 = 10;
    let k = key("concurrent_increments_lose_nothing", "counter");
    commit_ok(store, &[insert(&k, b"{\"n\":0}")]).await;
    let k = &k;
    let worker = move |_| async move {
        let mut conflicts = 0u32;
        for _ in 0..INCREMENTS {
            loop {
                let stored = load(store, k).await.expect("stored");
                let value: serde_json::Value = serde_json::from_slice(&stored.state).unwrap();
                let n = value["n"].as_u64().unwrap();
                let state = json(serde_json::json!({ "n": n + 1 }));
                match store.commit(&[update(k, stored.version, &state)]).await {
                    Ok(()) => break,
                    Err(CommitError::Conflict { .. }) => {
                        conflicts += 1;
                        assert!(conflicts < 10_000, "no progress");
                    }
                    Err(err) => panic!("increment failed: {err}"),
                }
            }
        }
    };
    join_all((0..WORKERS).map(worker)).await;
    let stored = load(store, k).await.expect("stored");
    assert_eq!(
        stored,
        StoredObject {
            state: json(serde_json::json!({ "n": WORKERS * INCREMENTS })),
            version: WORKERS * INCREMENTS + 1
        },
        "an increment was lost"
    );
}

// ---------------------------------------------------------------------------------------------
// Alarms

/// Alarms set with a write are listed with their exact due time, no claim, no attempts, ordered
/// by due time then name.
pub async fn alarms_set_and_list<S: Storage + ?Sized>(store: &S) {
    let k = key("alarms_set_and_list", "a");
    let mut write = insert(&k, b"{}");
    write.alarms = vec![set("b", at(2)), set("c", at(1)), set("a", at(1))];
    commit_ok(store, &[write]).await;
    let listed = alarms(store, &k).await;
    assert_eq!(
        names(&listed),
        ["a", "c", "b"],
        "ordered by due time, then name"
    );
    assert_eq!(
        listed[0],
        AlarmRecord {
            key: k.clone(),
            name: "a".into(),
            due_at: at(1),
            attempts: 0,
            claimed_at: None,
            last_error: None,
            dead: false,
        }
    );
    assert_eq!(listed[2].due_at, at(2));
    let other = key("alarms_set_and_list", "b");
    assert!(
        alarms(store, &other).await.is_empty(),
        "alarms belong to one object"
    );
}

/// Setting an alarm again replaces it: new due time, claim, attempts and error cleared.
pub async fn alarm_set_replaces_and_clears_claim<S: Storage + ?Sized>(store: &S) {
    let k = key("alarm_set_replaces_and_clears_claim", "a");
    let mut write = insert(&k, b"{}");
    write.alarms = vec![set("x", at(1))];
    commit_ok(store, &[write]).await;

    let claimed = claim(store, at(1), at(-60_000), 10).await;
    assert_eq!(names(&claimed), ["x"]);
    assert!(
        store
            .fail_alarm(&k, "x", at(1), 2, "boom", Some(at(3)))
            .await
            .unwrap()
    );
    let claimed = claim(store, at(3), at(-60_000), 10).await;
    assert_eq!(claimed[0].attempts, 2);

    commit_ok(store, &[alarms_only(&k, 1, vec![set("x", at(50))])]).await;
    assert_eq!(
        alarms(store, &k).await,
        vec![AlarmRecord {
            key: k.clone(),
            name: "x".into(),
            due_at: at(50),
            attempts: 0,
            claimed_at: None,
            last_error: None,
            dead: false,
        }],
        "a set alarm replaces the old one entirely"
    );
    assert_eq!(next_due(store).await, Some(at(50)));
    assert!(
        !store.finish_alarm(&k, "x", at(3)).await.unwrap(),
        "the old claim no longer holds"
    );
}

/// Cancelling one alarm leaves the others; cancelling an unknown name is a no-op.
pub async fn alarm_cancel_one<S: Storage + ?Sized>(store: &S) {
    let k = key("alarm_cancel_one", "a");
    let mut write = insert(&k, b"{}");
    write.alarms = vec![set("a", at(1)), set("b", at(2)), set("c", at(3))];
    commit_ok(store, &[write]).await;
    commit_ok(
        store,
        &[alarms_only(&k, 1, vec![cancel("b"), cancel("nope")])],
    )
    .await;
    assert_eq!(names(&alarms(store, &k).await), ["a", "c"]);
}

/// Cancelling all alarms of one object leaves other objects' alarms.
pub async fn alarm_cancel_all<S: Storage + ?Sized>(store: &S) {
    let a = key("alarm_cancel_all", "a");
    let b = key("alarm_cancel_all", "b");
    let mut write_a = insert(&a, b"{}");
    write_a.alarms = vec![set("x", at(1)), set("y", at(2))];
    let mut write_b = insert(&b, b"{}");
    write_b.alarms = vec![set("x", at(1))];
    commit_ok(store, &[write_a, write_b]).await;
    commit_ok(store, &[alarms_only(&a, 1, vec![AlarmChange::CancelAll])]).await;
    assert!(alarms(store, &a).await.is_empty());
    assert_eq!(names(&alarms(store, &b).await), ["x"]);
}

/// The alarm changes of one write apply in order.
pub async fn alarm_changes_apply_in_order<S: Storage + ?Sized>(store: &S) {
    let k = key("alarm_changes_apply_in_order", "a");
    let mut write = insert(&k, b"{}");
    write.alarms = vec![set("x", at(1)), cancel("x"), set("w", at(4))];
    commit_ok(store, &[write]).await;
    assert_eq!(names(&alarms(store, &k).await), ["w"]);
    commit_ok(
        store,
        &[alarms_only(
            &k,
            1,
            vec![AlarmChange::CancelAll, set("y", at(2))],
        )],
    )
    .await;
    assert_eq!(names(&alarms(store, &k).await), ["y"]);
    commit_ok(
        store,
        &[alarms_only(&k, 2, vec![set("z", at(1)), set("z", at(3))])],
    )
    .await;
    assert_eq!(
        alarm_times(store, &k).await,
        vec![("y".to_owned(), at(2)), ("z".to_owned(), at(3))]
    );
}

/// In a batch of several writes, each write's alarm changes apply to its own object, in its
/// own order, whatever the other writes change.
pub async fn alarm_changes_of_a_batch_apply_per_object<S: Storage + ?Sized>(store: &S) {
    let case = "alarm_changes_of_a_batch_apply_per_object";
    let (a, b, c, d) = (
        key(case, "a"),
        key(case, "b"),
        key(case, "c"),
        key(case, "d"),
    );
    let mut first = vec![insert(&a, b"{}"), insert(&b, b"{}"), insert(&c, b"{}")];
    first[0].alarms = vec![set("old", at(1)), set("x", at(1))];
    first[1].alarms = vec![set("p", at(1)), set("keep", at(5))];
    first[2].alarms = vec![set("r", at(1))];
    commit_ok(store, &first).await;
    let claimed = claim(store, at(1), at(-60_000), 10).await;
    let claimed_at = |k: &ObjectKey, name: &str| {
        claimed
            .iter()
            .find(|alarm| &alarm.key == k && alarm.name == name)
            .and_then(|alarm| alarm.claimed_at)
            .expect("claimed")
    };
    let (r_claim, x_claim) = (claimed_at(&c, "r"), claimed_at(&a, "x"));
    let mut to_a = update(&a, 1, b"{\"n\":1}");
    to_a.alarms = vec![set("x", at(9)), AlarmChange::CancelAll, set("y", at(2))];
    let to_b = alarms_only(&b, 1, vec![set("p", at(7)), cancel("p"), set("q", at(3))]);
    let mut to_c = update(&c, 1, b"{\"n\":1}");
    to_c.alarms = vec![
        AlarmChange::Finish {
            name: "r".into(),
            claimed_at: r_claim,
        },
        set("s", at(4)),
    ];
    let mut to_d = insert(&d, b"{}");
    to_d.alarms = vec![set("n", at(6)), set("n", at(8))];
    commit_ok(store, &[to_c, to_a, to_d, to_b]).await;
    assert_eq!(
        alarm_times(store, &a).await,
        vec![("y".to_owned(), at(2))],
        "a cancel-all voids what came before it, claimed or not"
    );
    assert_eq!(
        alarm_times(store, &b).await,
        vec![("q".to_owned(), at(3)), ("keep".to_owned(), at(5))],
        "the last change of a name decides it"
    );
    assert_eq!(
        alarm_times(store, &c).await,
        vec![("s".to_owned(), at(4))],
        "a finish under its claim removes the fired alarm"
    );
    assert_eq!(alarm_times(store, &d).await, vec![("n".to_owned(), at(8))]);
    assert!(
        alarms(store, &a)
            .await
            .iter()
            .all(|alarm| alarm.claimed_at.is_none()),
        "no claim survives a cancel-all (x was claimed at {x_claim:?})"
    );
    for (k, version) in [(&a, 2), (&b, 2), (&c, 2), (&d, 1)] {
        assert_eq!(
            load(store, k).await.map(|o| o.version),
            Some(version),
            "{k}"
        );
    }
}

/// The next due time is the earliest among alarms neither claimed nor dead.
pub async fn next_alarm_due_ignores_claimed_and_dead<S: Storage + ?Sized>(store: &S) {
    assert_eq!(next_due(store).await, None);
    let k = key("next_alarm_due_ignores_claimed_and_dead", "a");
    let mut write = insert(&k, b"{}");
    write.alarms = vec![set("a", at(1)), set("b", at(2)), set("c", at(3))];
    commit_ok(store, &[write]).await;
    assert_eq!(next_due(store).await, Some(at(1)));

    let claimed = claim(store, at(1), at(-60_000), 10).await;
    assert_eq!(names(&claimed), ["a"]);
    assert_eq!(
        next_due(store).await,
        Some(at(2)),
        "a claimed alarm is not next"
    );

    let claimed = claim(store, at(2), at(-60_000), 10).await;
    assert_eq!(names(&claimed), ["b"]);
    assert!(
        store
            .fail_alarm(&k, "b", at(2), 5, "gave up", None)
            .await
            .unwrap()
    );
    assert_eq!(
        next_due(store).await,
        Some(at(3)),
        "a dead alarm is not next"
    );
    assert!(store.finish_alarm(&k, "a", at(1)).await.unwrap());
    assert_eq!(next_due(store).await, Some(at(3)));

    let other = key("next_alarm_due_ignores_claimed_and_dead", "b");
    let mut write = insert(&other, b"{}");
    write.alarms = vec![set("early", at(-5))];
    commit_ok(store, &[write]).await;
    assert_eq!(next_due(store).await, Some(at(-5)), "all objects count");
}

/// Claims take only due alarms, earliest first (ties by object, then name), at most `limit`,
/// and mark them claimed at `now`; claimed alarms are not claimed again until their claim
/// expires.
pub async fn claim_respects_due_time_and_limit<S: Storage + ?Sized>(store: &S) {
    let a = key("claim_respects_due_time_and_limit", "a");
    let b = key("claim_respects_due_time_and_limit", "b");
    let mut write_a = insert(&a, b"{}");
    write_a.alarms = vec![set("a1", at(10)), set("a3", at(30))];
    let mut write_b = insert(&b, b"{}");
    write_b.alarms = vec![set("b1", at(10)), set("b2", at(20)), set("b4", at(40))];
    commit_ok(store, &[write_a, write_b]).await;
    let never = at(-3_600_000);

    assert!(
        claim(store, at(9), never, 10).await.is_empty(),
        "nothing is due yet"
    );
    assert!(
        claim(store, at(20), never, 0).await.is_empty(),
        "limit 0 claims nothing"
    );

    let claimed = claim(store, at(20), never, 10).await;
    let summary: Vec<(&str, &str, SystemTime, Option<SystemTime>)> = claimed
        .iter()
        .map(|c| {
            (
                c.key.object_id.as_str(),
                c.name.as_str(),
                c.due_at,
                c.claimed_at,
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("a", "a1", at(10), Some(at(20))),
            ("b", "b1", at(10), Some(at(20))),
            ("b", "b2", at(20), Some(at(20))),
        ],
        "due alarms, earliest first, claimed at `now` (a due time equal to `now` is due)"
    );

    let claimed = claim(store, at(45), at(20), 1).await;
    assert_eq!(
        names(&claimed),
        ["a3"],
        "limit 1; claims at `expired_before` hold"
    );
    let claimed = claim(store, at(45), at(20), 10).await;
    assert_eq!(names(&claimed), ["b4"]);
    assert!(claim(store, at(46), at(20), 10).await.is_empty());

    let listed = alarms(store, &b).await;
    assert!(listed.iter().all(|alarm| alarm.claimed_at.is_some()));
    assert_eq!(listed[0].claimed_at, Some(at(20)));
    assert_eq!(listed[2].claimed_at, Some(at(45)));
}

/// A claim older than `claim_expired_before` (strictly) is taken over by a new claim; the old
/// claim can then no longer finish the alarm.
pub async fn claim_expiry<S: Storage + ?Sized>(store: &S) {
    let k = key("claim_expiry", "a");
    let mut write = insert(&k, b"{}");
    write.alarms = vec![set("x", at(1))];
    commit_ok(store, &[write]).await;
    assert_eq!(names(&claim(store, at(1), at(-60_000), 10).await), ["x"]);
    assert!(
        claim(store, at(2), at(1), 10).await.is_empty(),
        "a claim made exactly at `claim_expired_before` has not expired"
    );
    let micro = Duration::from_micros(1);
    let reclaimed = claim(store, at(3), at(1) + micro, 10).await;
    assert_eq!(names(&reclaimed), ["x"], "an expired claim is taken over");
    assert_eq!(reclaimed[0].claimed_at, Some(at(3)));
    assert!(
        !store.finish_alarm(&k, "x", at(1)).await.unwrap(),
        "the old claim is gone"
    );
    assert!(store.finish_alarm(&k, "x", at(3)).await.unwrap());
    assert!(alarms(store, &k).await.is_empty());
}

/// Schedulers claiming concurrently never get the same alarm.
pub async fn concurrent_claimers_disjoint<S: Storage + ?Sized>(store: &S) {
    const ALARMS: usize = 60;
    let batch: Vec<ObjectWrite> = (0..ALARMS / 3)
        .map(|i| {
            let mut write = insert(
                &key("concurrent_claimers_disjoint", &format!("o{i:02}")),
                b"{}",
            );
            write.alarms = (0..3)
                .map(|j| set(&format!("n{j}"), at((i % 7) as i64)))
                .collect();
            write
        })
        .collect();
    commit_ok(store, &batch).await;
    let never = at(-3_600_000);
    let rounds = join_all(
        (0..8).map(|claimer| async move { claim(store, at(100 + claimer), never, 7).await }),
    )
    .await;
    let mut seen = std::collections::BTreeSet::new();
    for claimed in rounds.iter().flatten() {
        assert!(
            seen.insert((claimed.key.clone(), claimed.name.clone())),
            "{}/{} was claimed twice",
            claimed.key,
            claimed.name
        );
    }
    let rest = claim(store, at(200), never, ALARMS).await;
    for claimed in &rest {
        assert!(
            seen.insert((claimed.key.clone(), claimed.name.clone())),
            "{}/{} was claimed twice",
            claimed.key,
            claimed.name
        );
    }
    assert_eq!(seen.len(), ALARMS, "every alarm is claimed exactly once");
}

/// Finishing deletes an alarm only if it is still claimed with the same claim time.
pub async fn finish_alarm_requires_same_claim<S: Storage + ?Sized>(store: &S) {
    let k = key("finish_alarm_requires_same_claim", "a");
    let mut write = insert(&k, b"{}");
    write.alarms = vec![set("x", at(1)), set("y", at(1))];
    commit_ok(store, &[write]).await;
    assert!(
        !store.finish_alarm(&k, "x", at(1)).await.unwrap(),
        "an unclaimed alarm is not finished"
    );
    let claimed = claim(store, at(2), at(-60_000), 10).await;
    assert_eq!(names(&claimed), ["x", "y"]);
    assert!(
        !store.finish_alarm(&k, "x", at(1)).await.unwrap(),
        "wrong claim time"
    );
    assert!(
        !store.finish_alarm(&k, "nope", at(2)).await.unwrap(),
        "unknown alarm"
    );
    let other = key("finish_alarm_requires_same_claim", "b");
    assert!(
        !store.finish_alarm(&other, "x", at(2)).await.unwrap(),
        "other object"
    );
    let claimed_at = claimed[0].claimed_at.expect("claimed");
    assert!(store.finish_alarm(&k, "x", claimed_at).await.unwrap());
    assert_eq!(names(&alarms(store, &k).await), ["y"]);
    assert!(
        !store.finish_alarm(&k, "x", claimed_at).await.unwrap(),
        "already finished"
    );
}

/// An alarm rescheduled while it was running (by its own handler) loses its claim, so
/// finishing the old run leaves the new schedule in place.
pub async fn rescheduled_alarm_survives_finish<S: Storage + ?Sized>(store: &S) {
    let k = key("rescheduled_alarm_survives_finish", "a");
    let mut write = insert(&k, b"{\"runs\":0}");
    write.alarms = vec![set("tick", at(1))];
    commit_ok(store, &[write]).await;
    let claimed = claim(store, at(1), at(-60_000), 10).await;
    assert_eq!(names(&claimed), ["tick"]);
    let mut write = update(&k, 1, b"{\"runs\":1}");
    write.alarms = vec![set("tick", at(61))];
    commit_ok(store, &[write]).await;
    assert!(
        !store.finish_alarm(&k, "tick", at(1)).await.unwrap(),
        "a rescheduled alarm must survive the end of the run that rescheduled it"
    );
    assert_eq!(
        alarms(store, &k).await,
        vec![AlarmRecord {
            key: k.clone(),
            name: "tick".into(),
            due_at: at(61),
            attempts: 0,
            claimed_at: None,
            last_error: None,
            dead: false,
        }]
    );
    assert_eq!(next_due(store).await, Some(at(61)));
}

/// `AlarmChange::Finish` in a commit removes a fired alarm atomically with its handler's
/// state, only under the same claim, and never an alarm the same write scheduled again.
pub async fn finish_in_commit_applies_with_state<S: Storage + ?Sized>(store: &S) {
    let k = key("finish_in_commit_applies_with_state", "a");
    let mut write = insert(&k, b"{\"runs\":0}");
    write.alarms = vec![set("once", at(1)), set("again", at(1)), set("other", at(1))];
    commit_ok(store, &[write]).await;
    let claimed = claim(store, at(1), at(-60_000), 10).await;
    assert_eq!(claimed.len(), 3);
    let claimed_at = claimed[0].claimed_at.expect("claimed");
    let finish = |name: &str, claimed_at| AlarmChange::Finish {
        name: name.into(),
        claimed_at,
    };
    let mut write = update(&k, 1, b"{\"runs\":1}");
    write.alarms = vec![
        finish("once", claimed_at),
        set("again", at(61)),
        finish("again", claimed_at),
        finish("other", at(7)),
    ];
    commit_ok(store, &[write]).await;
    assert_eq!(load(store, &k).await.map(|o| o.version), Some(2));
    let left = alarms(store, &k).await;
    assert_eq!(names(&left), ["other", "again"], "{left:?}");
    assert_eq!(left[1].claimed_at, None, "rescheduled in the same write");
    assert!(
        left[0].claimed_at.is_some(),
        "a finish under another claim changes nothing"
    );
}

/// A failed attempt with a retry time records the attempt and error, releases the claim and
/// moves the alarm; only the current claim can record it.
pub async fn fail_alarm_retry<S: Storage + ?Sized>(store: &S) {
    let k = key("fail_alarm_retry", "a");
    let mut write = insert(&k, b"{}");
    write.alarms = vec![set("x", at(1))];
    commit_ok(store, &[write]).await;
    assert!(
        !store
            .fail_alarm(&k, "x", at(1), 1, "boom", Some(at(3)))
            .await
            .unwrap(),
        "an unclaimed alarm cannot fail"
    );
    claim(store, at(1), at(-60_000), 10).await;
    assert!(
        !store
            .fail_alarm(&k, "x", at(2), 1, "boom", Some(at(3)))
            .await
            .unwrap(),
        "wrong claim time"
    );
    assert!(
        store
            .fail_alarm(
                &k,
                "x",
                at(1),
                1,
                "boom: 'quoted' \"error\" 🦀",
                Some(at(3))
            )
            .await
            .unwrap()
    );
    assert_eq!(
        alarms(store, &k).await,
        vec![AlarmRecord {
            key: k.clone(),
            name: "x".into(),
            due_at: at(3),
            attempts: 1,
            claimed_at: None,
            last_error: Some("boom: 'quoted' \"error\" 🦀".into()),
            dead: false,
        }]
    );
    assert_eq!(next_due(store).await, Some(at(3)));
    assert!(
        claim(store, at(2), at(-60_000), 10).await.is_empty(),
        "moved to its retry time"
    );
    let claimed = claim(store, at(3), at(-60_000), 10).await;
    assert_eq!(
        (claimed[0].attempts, claimed[0].claimed_at),
        (1, Some(at(3)))
    );
    assert!(
        store
            .fail_alarm(&k, "x", at(3), 2, "again", Some(at(7)))
            .await
            .unwrap()
    );
    let listed = alarms(store, &k).await;
    assert_eq!(
        (
            listed[0].attempts,
            listed[0].last_error.as_deref(),
            listed[0].due_at
        ),
        (2, Some("again"), at(7))
    );
}

/// A failed attempt without a retry time marks the alarm dead: still listed (with its error),
/// never claimed, not next; setting it again re-queues it afresh.
pub async fn fail_alarm_dead<S: Storage + ?Sized>(store: &S) {
    let k = key("fail_alarm_dead", "a");
    let mut write = insert(&k, b"{}");
    write.alarms = vec![set("x", at(1))];
    commit_ok(store, &[write]).await;
    claim(store, at(1), at(-60_000), 10).await;
    assert!(
        store
            .fail_alarm(&k, "x", at(1), 3, "gave up", None)
            .await
            .unwrap()
    );
    assert_eq!(
        alarms(store, &k).await,
        vec![AlarmRecord {
            key: k.clone(),
            name: "x".into(),
            due_at: at(1),
            attempts: 3,
            claimed_at: None,
            last_error: Some("gave up".into()),
            dead: true,
        }],
        "a dead alarm is kept and listed"
    );
    assert_eq!(next_due(store).await, None);
    assert!(
        claim(store, at(1_000_000), at(1_000_000), 10)
            .await
            .is_empty(),
        "a dead alarm is never claimed"
    );
    assert!(
        !store
            .fail_alarm(&k, "x", at(1), 4, "again", None)
            .await
            .unwrap()
    );

    commit_ok(store, &[alarms_only(&k, 1, vec![set("x", at(2))])]).await;
    assert_eq!(
        alarms(store, &k).await,
        vec![AlarmRecord {
            key: k.clone(),
            name: "x".into(),
            due_at: at(2),
            attempts: 0,
            claimed_at: None,
            last_error: None,
            dead: false,
        }],
        "setting a dead alarm re-queues it"
    );
    assert_eq!(next_due(store).await, Some(at(2)));
    assert_eq!(names(&claim(store, at(2), at(-60_000), 10).await), ["x"]);
}

/// Releasing a claim leaves the alarm due as before, with its attempts and last error, and
/// claimable again at once; only the holder of the claim can release it.
pub async fn release_alarm_keeps_it_due<S: Storage + ?Sized>(store: &S) {
    let k = key("release_alarm_keeps_it_due", "a");
    let mut write = insert(&k, b"{}");
    write.alarms = vec![set("x", at(5))];
    commit_ok(store, &[write]).await;
    assert!(
        !store.release_alarm(&k, "x", at(5)).await.unwrap(),
        "an unclaimed alarm cannot be released"
    );
    claim(store, at(5), at(-60_000), 10).await;
    assert!(
        store
            .fail_alarm(&k, "x", at(5), 2, "boom", Some(at(8)))
            .await
            .unwrap()
    );
    let claimed = claim(store, at(9), at(-60_000), 10).await;
    assert_eq!(claimed[0].claimed_at, Some(at(9)));
    assert_eq!(next_due(store).await, None, "claimed alarms are not next");
    assert!(
        !store.release_alarm(&k, "x", at(5)).await.unwrap(),
        "wrong claim time"
    );
    assert!(store.release_alarm(&k, "x", at(9)).await.unwrap());
    assert_eq!(
        alarms(store, &k).await,
        vec![AlarmRecord {
            key: k.clone(),
            name: "x".into(),
            due_at: at(8),
            attempts: 2,
            claimed_at: None,
            last_error: Some("boom".into()),
            dead: false,
        }],
        "released, due as before"
    );
    assert_eq!(next_due(store).await, Some(at(8)));
    assert_eq!(
        names(&claim(store, at(10), at(-60_000), 10).await),
        ["x"],
        "claimable again without waiting for the claim to expire"
    );
}

/// Times round-trip exactly at microsecond precision, from 1970 to far in the future, and
/// compare exactly in claims.
pub async fn time_round_trip_micros<S: Storage + ?Sized>(store: &S) {
    let k = key("time_round_trip_micros", "a");
    let micros = |m: u64| truncate_to_micros(UNIX_EPOCH + Duration::from_micros(m));
    let times = [
        ("t0_epoch_plus_1us", micros(1)),
        ("t1_y2000_minus_1us", micros(946_684_800_000_000 - 1)),
        ("t2_odd", micros(1_700_000_000_999_999)),
        ("t3_next", micros(1_700_000_001_000_000)),
        ("t4_y2200", micros(7_258_118_400_123_457)),
        ("t5_y9999", micros(253_402_300_799_999_999)),
    ];
    let mut write = insert(&k, b"{}");
    write.alarms = times.iter().map(|(name, due)| set(name, *due)).collect();
    commit_ok(store, &[write]).await;
    assert_eq!(
        alarm_times(store, &k).await,
        times
            .iter()
            .map(|(name, due)| (name.to_string(), *due))
            .collect::<Vec<_>>(),
        "due times must round-trip to the microsecond"
    );
    assert_eq!(next_due(store).await, Some(times[0].1));

    // Due exactly at `now` is due; one microsecond later is not.
    let now = times[2].1;
    let claimed = claim(store, now, UNIX_EPOCH, 10).await;
    assert_eq!(
        names(&claimed),
        ["t0_epoch_plus_1us", "t1_y2000_minus_1us", "t2_odd"]
    );
    assert!(claimed.iter().all(|c| c.claimed_at == Some(now)));
    let later = times[3].1 - Duration::from_micros(1);
    assert!(claim(store, later, UNIX_EPOCH, 10).await.is_empty());

    // Claim times read back equal the claim time given, so they finish the alarm.
    let listed = alarms(store, &k).await;
    assert_eq!(listed[2].claimed_at, Some(now));
    for alarm in &listed[..3] {
        assert!(
            store
                .finish_alarm(&k, &alarm.name, alarm.claimed_at.unwrap())
                .await
                .unwrap(),
            "finish {} with its listed claim time",
            alarm.name
        );
    }
    let claimed = claim(store, times[5].1, UNIX_EPOCH, 10).await;
    assert_eq!(names(&claimed), ["t3_next", "t4_y2200", "t5_y9999"]);
    assert_eq!(claimed[2].claimed_at, Some(times[5].1));
    assert!(
        store
            .finish_alarm(&k, "t5_y9999", times[5].1)
            .await
            .unwrap()
    );
}
