//! Checks on listing ids and on what must round-trip exactly: `list_ids` pages and byte order,
//! odd ids and alarm names, large states, and JSON escapes such as `\u0000`.

use super::support::{
    alarm_times, alarms, at, claim, commit_ok, insert, json, key, load, set, update,
};
use crate::storage::{Loaded, ObjectKey, ObjectWrite, Storage, StoredObject};

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

/// Ids and alarm names with SQL and URL metacharacters, quotes, whitespace, control characters,
/// non-ASCII text and the maximum length (1024 bytes) round-trip exactly: loaded, listed and
/// claimed.
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
        "ctl\u{1}\u{1f}\u{7f}",
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
    // A claim returns each key and alarm name exactly as stored.
    let mut claimed: Vec<(String, String)> = claim(store, at(5), at(60_000), 100)
        .await
        .into_iter()
        .filter(|alarm| alarm.key.object_type == ty)
        .map(|alarm| (alarm.key.object_id, alarm.name))
        .collect();
    claimed.sort();
    let mut expected: Vec<String> = ids.iter().map(|s| s.to_string()).collect();
    expected.sort();
    let named: Vec<(String, String)> = expected.iter().map(|id| (id.clone(), id.clone())).collect();
    assert_eq!(claimed, named, "claimed keys and names");
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

/// A state of more than 1 MiB round-trips, can be replaced by another, and comes back whole
/// from a batched read beside a small state and an absent object.
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
            state: second.clone(),
            version: 2
        })
    );
    let small_key = key("large_state_round_trips", "b");
    let small = json(serde_json::json!({ "n": 1 }));
    commit_ok(store, &[insert(&small_key, &small)]).await;
    let missing = key("large_state_round_trips", "missing");
    let loaded = store
        .load_many(&[small_key, k, missing])
        .await
        .expect("a batched load");
    assert_eq!(
        loaded,
        vec![
            Loaded::Object(StoredObject {
                state: small,
                version: 1
            }),
            Loaded::Object(StoredObject {
                state: second,
                version: 2
            }),
            Loaded::Absent,
        ]
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
