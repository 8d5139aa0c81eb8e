//! Checks on the argument an alarm carries: stored with the alarm, returned wherever the alarm
//! is (listed, claimed, failed, dead, set again), replaced by a new set and gone with a cancel.

use super::support::{alarms, alarms_only, at, claim, commit_ok, insert, key};
use crate::storage::{AlarmChange, AlarmRecord, Storage};

fn set_with(name: &str, due_ms: i64, payload: Option<&[u8]>) -> AlarmChange {
    AlarmChange::Set {
        name: name.to_owned(),
        due_at: at(due_ms),
        payload: payload.map(<[u8]>::to_vec),
    }
}

/// `(name, payload)` of each alarm, in listed order.
fn payloads(listed: &[AlarmRecord]) -> Vec<(&str, Option<&[u8]>)> {
    listed
        .iter()
        .map(|alarm| (alarm.name.as_str(), alarm.payload.as_deref()))
        .collect()
}

/// Payloads of every shape (none, empty, every byte value, 64 KiB) come back as set: from a
/// single write and from a batch of several objects, in listings and claims, after a failed
/// attempt, as a dead alarm and after a re-queue.
pub async fn alarm_payload_round_trips<S: Storage + ?Sized>(store: &S) {
    let every_byte: Vec<u8> = (0..=255).collect();
    let large = vec![b'x'; 64 * 1024];
    let (a, b) = (
        key("alarm_payload_round_trips", "a"),
        key("alarm_payload_round_trips", "b"),
    );
    let mut one = insert(&a, b"{}");
    one.alarms = vec![
        set_with("none", 1, None),
        set_with("empty", 2, Some(b"")),
        set_with("bytes", 3, Some(&every_byte)),
        set_with("large", 4, Some(&large)),
    ];
    commit_ok(store, &[one]).await;
    let listed = alarms(store, &a).await;
    let expected: Vec<(&str, Option<&[u8]>)> = vec![
        ("none", None),
        ("empty", Some(b"")),
        ("bytes", Some(&every_byte)),
        ("large", Some(&large)),
    ];
    assert_eq!(payloads(&listed), expected, "listed as set");

    // A batch of several objects (the stores' bulk path).
    let mut with_b = insert(&b, b"{}");
    with_b.alarms = vec![set_with("json", 5, Some(br#"{"n":1}"#))];
    let touch_a = alarms_only(&a, 1, vec![set_with("json", 5, Some(br#"{"n":2}"#))]);
    commit_ok(store, &[touch_a, with_b]).await;
    assert_eq!(
        payloads(&alarms(store, &b).await),
        [("json", Some(&br#"{"n":1}"#[..]))]
    );

    let claimed = claim(store, at(5), at(60_000), 10).await;
    let mut seen: Vec<(String, Option<Vec<u8>>)> = claimed
        .iter()
        .filter(|alarm| alarm.key == a || alarm.key == b)
        .map(|alarm| {
            (
                format!("{}/{}", alarm.key.object_id, alarm.name),
                alarm.payload.clone(),
            )
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        vec![
            ("a/bytes".to_owned(), Some(every_byte.clone())),
            ("a/empty".to_owned(), Some(Vec::new())),
            ("a/json".to_owned(), Some(br#"{"n":2}"#.to_vec())),
            ("a/large".to_owned(), Some(large.clone())),
            ("a/none".to_owned(), None),
            ("b/json".to_owned(), Some(br#"{"n":1}"#.to_vec())),
        ],
        "claimed with their payloads"
    );

    // A failed attempt keeps the payload; so does a dead alarm, listed across objects.
    assert!(
        store
            .fail_alarm(&b, "json", at(5), 1, "boom", Some(at(6)))
            .await
            .unwrap()
    );
    let retried = claim(store, at(6), at(60_000), 10).await;
    let retried = retried
        .iter()
        .find(|alarm| alarm.key == b)
        .expect("retried");
    assert_eq!(retried.payload.as_deref(), Some(&br#"{"n":1}"#[..]));
    assert!(
        store
            .fail_alarm(&b, "json", at(6), 2, "boom", None)
            .await
            .unwrap()
    );
    let dead = store
        .list_dead_alarms(Some(&b.object_type), None, 10)
        .await
        .unwrap();
    assert_eq!(payloads(&dead.alarms), [("json", Some(&br#"{"n":1}"#[..]))]);

    // Re-queued as an operator does: set again with the payload it had.
    let requeue = set_with("json", 7, dead.alarms[0].payload.as_deref());
    commit_ok(store, &[alarms_only(&b, 1, vec![requeue])]).await;
    let alive = alarms(store, &b).await;
    assert!(!alive[0].dead);
    assert_eq!(payloads(&alive), [("json", Some(&br#"{"n":1}"#[..]))]);
}

/// Setting an alarm again replaces its payload (with another, or with none); a cancelled
/// alarm set again without one has none; a cancel-all takes payloads with the alarms.
pub async fn alarm_payload_replaced_and_cancelled<S: Storage + ?Sized>(store: &S) {
    let k = key("alarm_payload_replaced_and_cancelled", "a");
    let mut write = insert(&k, b"{}");
    write.alarms = vec![set_with("x", 1, Some(b"1")), set_with("y", 1, None)];
    commit_ok(store, &[write]).await;

    type Expected<'a> = Vec<(&'a str, Option<&'a [u8]>)>;
    let steps: [(Vec<AlarmChange>, Expected); 5] = [
        (
            vec![set_with("x", 2, Some(b"2")), set_with("y", 2, Some(b"y"))],
            vec![("x", Some(b"2")), ("y", Some(b"y"))],
        ),
        (
            vec![set_with("x", 2, None)],
            vec![("x", None), ("y", Some(b"y"))],
        ),
        (
            vec![
                AlarmChange::Cancel { name: "y".into() },
                set_with("y", 3, None),
            ],
            vec![("x", None), ("y", None)],
        ),
        (
            vec![
                set_with("x", 2, Some(b"3")),
                AlarmChange::Cancel { name: "x".into() },
            ],
            vec![("y", None)],
        ),
        (
            vec![
                set_with("y", 3, Some(b"4")),
                AlarmChange::CancelAll,
                set_with("z", 3, None),
            ],
            vec![("z", None)],
        ),
    ];
    for (version, (changes, expected)) in (1..).zip(steps) {
        commit_ok(store, &[alarms_only(&k, version, changes)]).await;
        assert_eq!(
            payloads(&alarms(store, &k).await),
            expected,
            "step {version}"
        );
    }
}
