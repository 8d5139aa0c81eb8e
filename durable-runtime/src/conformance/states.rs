//! Checks on the state of objects: loads (one key or many), first writes and updates under
//! an expected version, version conflicts, atomic batches, writes without a state, and delete.

use super::support::{
    alarm_times, alarms, alarms_only, assert_conflict, at, cancel, commit_ok, insert, json, key,
    load, loaded, next_due, set, update,
};
use crate::storage::{Loaded, ObjectKey, ObjectWrite, Storage, StoredObject};

/// A key never written loads as absent; an empty store lists nothing and deletes nothing.
pub async fn load_missing<S: Storage + ?Sized>(store: &S) {
    let k = key("load_missing", "a");
    assert_eq!(
        loaded(store, &k).await,
        Loaded::Absent,
        "a missing object must load as absent"
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
    let stored_a = Loaded::Object(StoredObject {
        state: state_a,
        version: 1,
    });
    let stored_b = Loaded::Object(StoredObject {
        state: state_b,
        version: 2,
    });
    assert_eq!(
        loaded,
        vec![
            stored_b.clone(),
            Loaded::Absent,
            stored_a,
            Loaded::Absent,
            stored_b
        ],
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
        let expected = match i % 2 {
            0 => Loaded::Object(StoredObject {
                state: json(serde_json::json!({ "id": k.object_id })),
                version: 1,
            }),
            _ => Loaded::Absent,
        };
        assert_eq!(stored, &expected, "key {k}");
    }
}

/// Version checks answer what loads would: for one key, for several in the order given, and
/// after updates and a delete.
pub async fn load_versions_match_loads<S: Storage + ?Sized>(store: &S) {
    let versions = store
        .load_versions(&[])
        .await
        .expect("an empty version check");
    assert!(versions.is_empty(), "no keys, no versions: {versions:?}");
    let a = key("load_versions_match_loads", "a");
    let b = key("load_versions_match_loads", "b/\u{e9} 'quoted'");
    let missing = key("load_versions_match_loads", "missing");
    let other_type = ObjectKey::new("conformance.load_versions_match_loads.other", "a");
    commit_ok(store, &[insert(&a, b"{}"), insert(&b, b"{}")]).await;
    commit_ok(store, &[update(&b, 1, b"{\"n\":1}")]).await;
    commit_ok(store, &[update(&b, 2, b"{\"n\":2}")]).await;
    let keys = &[b.clone(), missing, a.clone(), other_type, b];
    let check = |expected: Vec<Option<u64>>| async move {
        let loaded: Vec<Option<u64>> = store
            .load_many(keys)
            .await
            .expect("a batched load")
            .into_iter()
            .map(|loaded| match loaded {
                Loaded::Absent => None,
                stored => Some(stored.version()),
            })
            .collect();
        assert_eq!(loaded, expected, "loads");
        let versions = store.load_versions(keys).await.expect("a version check");
        assert_eq!(versions, expected, "one version per key, in key order");
        for (k, expected) in keys.iter().zip(expected) {
            let one = store.load_versions(std::slice::from_ref(k)).await;
            assert_eq!(one.expect("a version check"), [expected], "key {k}");
        }
    };
    check(vec![Some(3), None, Some(1), None, Some(3)]).await;
    // A deleted object keeps its tombstone's version, one above its last.
    assert!(store.delete(&a).await.unwrap());
    check(vec![Some(3), None, Some(2), None, Some(3)]).await;
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

/// Every state of a batch that mixes new objects and updates comes back byte for byte: states
/// of many sizes, with multi-byte characters, quotes, backslashes and escapes, side by side.
pub async fn batch_keeps_each_state_exact<S: Storage + ?Sized>(store: &S) {
    let states: Vec<Vec<u8>> = vec![
        b"{}".to_vec(),
        "{\"s\":\"\u{e9}\u{1f980}\u{65e5}\"}".as_bytes().to_vec(),
        br#"{"q":"\"\\\u0000\n"}"#.to_vec(),
        format!("{{\"pad\":\"{}\"}}", "\u{e9}x\u{1f980}".repeat(700)).into_bytes(),
        b"[]".to_vec(),
        format!("{{\"big\":\"{}\"}}", "abcdefgh".repeat(8 * 1024)).into_bytes(),
        b"0".to_vec(),
    ];
    let keys: Vec<ObjectKey> = (0..states.len() * 2)
        .map(|i| key("batch_keeps_each_state_exact", &format!("obj-{i:02}")))
        .collect();
    // The even objects exist before the batch, the odd ones are new in it.
    let first: Vec<ObjectWrite> = keys.iter().step_by(2).map(|k| insert(k, b"{}")).collect();
    commit_ok(store, &first).await;
    let batch: Vec<ObjectWrite> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let state = &states[i / 2];
            if i % 2 == 0 {
                update(k, 1, state)
            } else {
                insert(k, state)
            }
        })
        .collect();
    commit_ok(store, &batch).await;
    for (i, k) in keys.iter().enumerate() {
        let stored = load(store, k)
            .await
            .expect("every object of the batch is stored");
        assert_eq!(
            String::from_utf8_lossy(&stored.state),
            String::from_utf8_lossy(&states[i / 2]),
            "state of `{k}`"
        );
        assert_eq!(stored.version, if i % 2 == 0 { 2 } else { 1 });
    }
    // An empty state is a state, not a tombstone, even alone in its batch.
    let empty = key("batch_keeps_each_state_exact", "empty");
    commit_ok(store, &[insert(&empty, b"")]).await;
    assert_eq!(
        load(store, &empty).await,
        Some(StoredObject {
            state: Vec::new(),
            version: 1
        })
    );
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
    assert_eq!(
        loaded(store, &a).await,
        Loaded::Deleted { version: 2 },
        "a deleted object leaves a tombstone one version above its last"
    );
    let page = store.list_ids(&a.object_type, None, 10).await.unwrap();
    assert_eq!(page.ids, ["b"], "a deleted object must not be listed");
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
    assert_eq!(
        loaded(store, &a).await,
        Loaded::Deleted { version: 2 },
        "a second delete changed the tombstone"
    );
    let many = store.load_many(&[a.clone(), b.clone()]).await.unwrap();
    assert_eq!(many[0], Loaded::Deleted { version: 2 }, "batched load");

    // Recreated: from the tombstone's version only, and with a state.
    assert_conflict(
        store.commit(&[insert(&a, b"{\"a\":2}")]).await,
        0,
        &a,
        0,
        Some(2),
    );
    assert_conflict(
        store
            .commit(&[alarms_only(&a, 2, vec![set("x", at(1))])])
            .await,
        0,
        &a,
        2,
        Some(2),
    );
    assert!(
        alarms(store, &a).await.is_empty(),
        "a refused write set an alarm"
    );
    commit_ok(store, &[update(&a, 2, b"{\"a\":2}")]).await;
    assert_eq!(
        load(store, &a).await,
        Some(StoredObject {
            state: b"{\"a\":2}".to_vec(),
            version: 3
        })
    );
    let page = store.list_ids(&a.object_type, None, 10).await.unwrap();
    assert_eq!(page.ids, ["a", "b"], "a recreated object is listed again");
}

/// Versions never repeat for a key: a deleted object recreated continues above every version
/// it had, so a writer still holding a version of the deleted object is refused.
///
/// Writer A writes "old" at version 2 and writer B reads it. A deletes the object, recreates
/// it and writes it again. B's write, expecting version 2, must conflict, and A's state must
/// survive.
pub async fn recreated_object_refuses_stale_writer<S: Storage + ?Sized>(store: &S) {
    let k = key("recreated_object_refuses_stale_writer", "a");
    commit_ok(store, &[insert(&k, b"\"first\"")]).await;
    commit_ok(store, &[update(&k, 1, b"\"old\"")]).await;
    let held_by_b = load(store, &k).await.expect("stored").version;
    assert_eq!(held_by_b, 2);

    assert!(store.delete(&k).await.unwrap(), "the object was stored");
    let base = loaded(store, &k).await.version();
    assert!(
        base > held_by_b,
        "the tombstone's version {base} repeats one stored"
    );
    commit_ok(store, &[update(&k, base, b"\"new\"")]).await;
    commit_ok(store, &[update(&k, base + 1, b"\"newer\"")]).await;

    // Versions never repeat, so B's expectation cannot hold, whatever A wrote since.
    let stale = store.commit(&[update(&k, held_by_b, b"\"stale\"")]).await;
    assert_conflict(stale, 0, &k, held_by_b, Some(base + 2));
    assert_eq!(
        load(store, &k).await.map(|stored| stored.state),
        Some(b"\"newer\"".to_vec()),
        "the recreated object's state was overwritten"
    );
}
