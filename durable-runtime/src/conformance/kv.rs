//! Checks on key-value storage: atomic with the state, limits from counters, listing order and
//! paging, deletion, and keys and values that must round-trip exactly.

use super::support::{commit_ok, insert, key, update};
use crate::storage::{
    CommitError, KvChange, KvLimitExceeded, KvUsage, ObjectKey, ObjectWrite, Storage,
};

fn put(k: &str, value: &[u8]) -> KvChange {
    KvChange::Put {
        key: k.to_owned(),
        value: value.to_vec(),
    }
}

fn with_kv(mut write: ObjectWrite, kv: Vec<KvChange>) -> ObjectWrite {
    write.kv = kv;
    write
}

async fn entries<S: Storage + ?Sized>(store: &S, key: &ObjectKey) -> Vec<(String, Vec<u8>)> {
    store.kv_list(key, "", None, usize::MAX).await.unwrap()
}

async fn usage<S: Storage + ?Sized>(store: &S, key: &ObjectKey) -> KvUsage {
    store.kv_usage(key).await.unwrap()
}

/// Key-value changes commit with the state, in order, and keep the object's counters; a
/// conflicting write applies neither its state nor its keys, nor anything of its batch.
pub async fn kv_commits_with_state<S: Storage + ?Sized>(store: &S) {
    let a = key("kv_commits_with_state", "a");
    let b = key("kv_commits_with_state", "b");
    commit_ok(
        store,
        &[with_kv(
            insert(&a, b"{\"n\":1}"),
            vec![put("x", b"1"), put("y", b"2"), put("x", b"33")],
        )],
    )
    .await;
    assert_eq!(store.kv_get(&a, "x").await.unwrap(), Some(b"33".to_vec()));
    assert_eq!(usage(store, &a).await, KvUsage { keys: 2, bytes: 5 });

    // A batch whose second write conflicts applies nothing, keys included.
    let first = with_kv(insert(&b, b"{}"), vec![put("k", b"1")]);
    let stale = with_kv(
        update(&a, 7, b"{\"n\":2}"),
        vec![KvChange::Delete { key: "x".into() }, put("z", b"3")],
    );
    let err = store.commit(&[first, stale]).await.unwrap_err();
    assert!(
        matches!(err, CommitError::Conflict { index: 1, .. }),
        "{err}"
    );
    assert_eq!(store.kv_get(&b, "k").await.unwrap(), None);
    assert_eq!(
        entries(store, &a).await,
        [("x".into(), b"33".to_vec()), ("y".into(), b"2".to_vec())]
    );
    assert_eq!(usage(store, &a).await, KvUsage { keys: 2, bytes: 5 });

    // A write without a state changes keys under the version check too.
    let touch = ObjectWrite {
        state: None,
        ..with_kv(
            update(&a, 1, b""),
            vec![KvChange::DeleteAll, put("w", b"\"v\"")],
        )
    };
    commit_ok(store, &[touch]).await;
    assert_eq!(entries(store, &a).await, [("w".into(), b"\"v\"".to_vec())]);
    assert_eq!(usage(store, &a).await, KvUsage { keys: 1, bytes: 4 });
    let stored = store.load(&a).await.unwrap().object().unwrap();
    assert_eq!((stored.version, stored.state), (2, b"{\"n\":1}".to_vec()));
}

/// A write whose changes would exceed its limit fails alone, typed, and writes nothing;
/// exactly at the limit passes.
pub async fn kv_limits_checked_at_commit<S: Storage + ?Sized>(store: &S) {
    let a = key("kv_limits_checked_at_commit", "a");
    let b = key("kv_limits_checked_at_commit", "b");
    let limit = KvChange::Limit {
        max_keys: 3,
        max_bytes: 12,
    };
    // Three keys of 4 bytes each: exactly at both limits.
    commit_ok(
        store,
        &[with_kv(
            insert(&a, b"{}"),
            vec![
                put("k1", b"11"),
                put("k2", b"22"),
                put("k3", b"33"),
                limit.clone(),
            ],
        )],
    )
    .await;
    assert_eq!(usage(store, &a).await, KvUsage { keys: 3, bytes: 12 });

    let one_key_more = with_kv(
        update(&a, 1, b"{\"n\":1}"),
        vec![put("k4", b"4"), limit.clone()],
    );
    let err = store.commit(&[one_key_more]).await.unwrap_err();
    assert!(
        matches!(
            err,
            CommitError::KvLimit {
                index: 0,
                limit: KvLimitExceeded::Keys { max: 3, found: 4 },
                ..
            }
        ),
        "{err}"
    );
    // One byte more, in a batch with another object's write: only that write is at fault.
    let other = with_kv(insert(&b, b"{}"), vec![put("x", b"1")]);
    let one_byte_more = with_kv(
        update(&a, 1, b"{\"n\":1}"),
        vec![put("k3", b"333"), limit.clone()],
    );
    let err = store
        .commit(&[other.clone(), one_byte_more])
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            CommitError::KvLimit {
                index: 1,
                limit: KvLimitExceeded::Bytes { max: 12, found: 13 },
                ..
            }
        ),
        "{err}"
    );
    // Nothing of the batch was written.
    assert_eq!(usage(store, &a).await, KvUsage { keys: 3, bytes: 12 });
    assert_eq!(store.kv_get(&a, "k3").await.unwrap(), Some(b"33".to_vec()));
    assert_eq!(store.load(&a).await.unwrap().version(), 1);
    assert_eq!(store.kv_get(&b, "x").await.unwrap(), None);
    commit_ok(store, &[other]).await;

    // Replacing and deleting count what they replace: still within the limits.
    let swap = with_kv(
        update(&a, 1, b"{\"n\":2}"),
        vec![
            KvChange::Delete { key: "k1".into() },
            put("k3", b"333"),
            put("k4", b"4"),
            limit,
        ],
    );
    commit_ok(store, &[swap]).await;
    assert_eq!(usage(store, &a).await, KvUsage { keys: 3, bytes: 12 });
}

/// Listing is in the order of the keys' bytes, filtered by prefix, paged by the last key.
pub async fn kv_list_order_and_pages<S: Storage + ?Sized>(store: &S) {
    let a = key("kv_list_order_and_pages", "a");
    let keys = [
        "b", "a", "", "ab", "a\u{0}", "é", "aa", "b\u{0}x", "\u{7f}", "a/",
    ];
    let kv = keys.iter().map(|k| put(k, b"0")).collect();
    commit_ok(store, &[with_kv(insert(&a, b"{}"), kv)]).await;
    let mut expected: Vec<&str> = keys.to_vec();
    expected.sort_by(|x, y| x.as_bytes().cmp(y.as_bytes()));
    let listed: Vec<String> = entries(store, &a)
        .await
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(listed, expected);

    // Paging with the last key of each page as the cursor.
    let mut paged = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page = store.kv_list(&a, "", after.as_deref(), 3).await.unwrap();
        if page.is_empty() {
            break;
        }
        after = page.last().map(|(k, _)| k.clone());
        paged.extend(page.into_iter().map(|(k, _)| k));
    }
    assert_eq!(paged, expected);

    let prefixed: Vec<String> = store
        .kv_list(&a, "a", None, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(prefixed, ["a", "a\u{0}", "a/", "aa", "ab"]);
    let page = store.kv_list(&a, "a", Some("a/"), 10).await.unwrap();
    assert_eq!(page.len(), 2);
    assert!(store.kv_list(&a, "c", None, 10).await.unwrap().is_empty());
    assert!(store.kv_list(&a, "", None, 0).await.unwrap().is_empty());
    let other = key("kv_list_order_and_pages", "other");
    assert!(
        store
            .kv_list(&other, "", None, 10)
            .await
            .unwrap()
            .is_empty()
    );
}

/// Deleting an object deletes its keys and counters; the recreated object starts empty.
pub async fn kv_delete_object_deletes_keys<S: Storage + ?Sized>(store: &S) {
    let a = key("kv_delete_object_deletes_keys", "a");
    commit_ok(
        store,
        &[with_kv(
            insert(&a, b"{}"),
            vec![put("x", b"1"), put("y", b"2")],
        )],
    )
    .await;
    assert!(store.delete(&a).await.unwrap());
    assert!(entries(store, &a).await.is_empty());
    assert_eq!(store.kv_get(&a, "x").await.unwrap(), None);
    assert_eq!(usage(store, &a).await, KvUsage::default());
    let recreate = with_kv(
        ObjectWrite {
            expected_version: 2,
            ..insert(&a, b"{}")
        },
        vec![put("z", b"3")],
    );
    commit_ok(store, &[recreate]).await;
    assert_eq!(entries(store, &a).await, [("z".into(), b"3".to_vec())]);
    assert_eq!(usage(store, &a).await, KvUsage { keys: 1, bytes: 2 });
}

/// Odd keys (empty, NUL, 4 KiB, non-ASCII) and values whose JSON holds escapes that are not
/// safe as raw text (`\u0000`, a lone surrogate) round-trip byte for byte.
pub async fn kv_odd_keys_and_values_round_trip<S: Storage + ?Sized>(store: &S) {
    let a = key("kv_odd_keys_and_values_round_trip", "a");
    // 4 KiB of varied bytes: a key that compresses badly.
    let long: String = (0..4096u32)
        .map(|i| char::from(b'!' + ((i * 7919 + i / 13) % 90) as u8))
        .collect();
    let long_too: String = format!("{}~", &long[..4095]);
    let values: Vec<(String, Vec<u8>)> = vec![
        (String::new(), br#""empty key""#.to_vec()),
        ("\u{0}".into(), br#""\u0000""#.to_vec()),
        (
            "a\u{0}b".into(),
            br#"{"lone":"\ud800","nul":"\u0000"}"#.to_vec(),
        ),
        ("ключ ✓".into(), "\"значение\"".as_bytes().to_vec()),
        (long.clone(), b"[1,2,3]".to_vec()),
        (long_too.clone(), b"4".to_vec()),
    ];
    let kv = values.iter().map(|(k, v)| put(k, v)).collect();
    commit_ok(store, &[with_kv(insert(&a, b"{}"), kv)]).await;
    for (k, v) in &values {
        assert_eq!(
            store.kv_get(&a, k).await.unwrap().as_ref(),
            Some(v),
            "key {k:?}"
        );
    }
    let mut expected = values.clone();
    expected.sort_by(|x, y| x.0.as_bytes().cmp(y.0.as_bytes()));
    assert_eq!(entries(store, &a).await, expected);
    // The two long keys share their first 4095 bytes: a page boundary between them holds.
    let page = store
        .kv_list(&a, &long[..100], Some(&long), 10)
        .await
        .unwrap();
    let page_keys: Vec<&str> = page.iter().map(|(k, _)| k.as_str()).collect();
    let mut after_long: Vec<&str> = [long.as_str(), long_too.as_str()]
        .into_iter()
        .filter(|k| k.as_bytes() > long.as_bytes())
        .collect();
    after_long.sort();
    assert_eq!(page_keys, after_long);
    let expected_usage = KvUsage::of(values.iter().map(|(k, v)| (k.as_str(), v.as_slice())));
    assert_eq!(usage(store, &a).await, expected_usage);
}
