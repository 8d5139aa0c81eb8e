//! Checks on the per-object alarm limit ([`AlarmChange::Limit`]): counted on what a write
//! leaves, checked in its commit, nothing of a batch written when one write goes over.

use super::support::{alarms, at, cancel, claim, commit_ok, insert, key, load, names, set, update};
use crate::storage::{AlarmChange, CommitError, KvChange, Storage};

fn limit(max: u64) -> AlarmChange {
    AlarmChange::Limit { max }
}

/// Exactly at the limit passes; one past fails alone, typed, and writes nothing of its batch
/// (state, keys, alarms); setting a name again replaces it and does not count twice; a cancel
/// or a fired alarm frees a slot.
pub async fn alarm_limit_checked_at_commit<S: Storage + ?Sized>(store: &S) {
    let a = key("alarm_limit_checked_at_commit", "a");
    let b = key("alarm_limit_checked_at_commit", "b");
    let mut at_limit = insert(&a, b"{}");
    at_limit.alarms = vec![set("x", at(1)), set("y", at(1)), set("z", at(1)), limit(3)];
    commit_ok(store, &[at_limit]).await;
    assert_eq!(names(&alarms(store, &a).await), ["x", "y", "z"]);

    // One past, with a state and a key in the same write, batched after another object's
    // write: only that write is at fault, and nothing of the batch is applied.
    let mut other = insert(&b, b"{}");
    other.alarms = vec![set("o", at(1)), limit(3)];
    let mut one_more = update(&a, 1, b"{\"n\":1}");
    one_more.alarms = vec![set("w", at(1)), limit(3)];
    one_more.kv = vec![KvChange::Put {
        key: "k".into(),
        value: b"1".to_vec(),
    }];
    let err = store.commit(&[other.clone(), one_more]).await.unwrap_err();
    assert!(
        matches!(
            &err,
            CommitError::AlarmLimit { index: 1, key, max: 3, found: 4 } if *key == a
        ),
        "{err}"
    );
    let stored = load(store, &a).await.expect("stored");
    assert_eq!((stored.version, stored.state), (1, b"{}".to_vec()));
    assert_eq!(names(&alarms(store, &a).await), ["x", "y", "z"]);
    assert_eq!(store.kv_get(&a, "k").await.unwrap(), None);
    assert!(load(store, &b).await.is_none());
    commit_ok(store, &[other]).await;

    // Setting a name it has again replaces that alarm: still three.
    let mut again = update(&a, 1, b"{}");
    again.alarms = vec![set("x", at(9)), limit(3)];
    commit_ok(store, &[again]).await;
    let listed = alarms(store, &a).await;
    assert_eq!(names(&listed), ["y", "z", "x"]);

    // A cancel in the same write frees a slot.
    let mut swap = update(&a, 2, b"{}");
    swap.alarms = vec![cancel("y"), set("w", at(1)), limit(3)];
    commit_ok(store, &[swap]).await;
    assert_eq!(names(&alarms(store, &a).await), ["w", "z", "x"]);

    // So does the removal of a fired alarm, committed with its handler's write.
    let claimed = claim(store, at(1), at(60_000), 10).await;
    let fired = claimed
        .iter()
        .find(|alarm| alarm.key == a && alarm.name == "z")
        .expect("z claimed");
    let mut handled = update(&a, 3, b"{}");
    handled.alarms = vec![
        AlarmChange::Finish {
            name: "z".into(),
            claimed_at: fired.claimed_at.expect("claimed"),
        },
        set("v", at(50)),
        limit(3),
    ];
    commit_ok(store, &[handled]).await;
    let mut left = names(&alarms(store, &a).await)
        .into_iter()
        .map(str::to_owned)
        .collect::<Vec<_>>();
    left.sort();
    assert_eq!(left, ["v", "w", "x"]);

    // Still at the limit: one more fails, without a state too.
    let mut alarms_only = update(&a, 4, b"{}");
    alarms_only.state = None;
    alarms_only.alarms = vec![set("u", at(1)), limit(3)];
    assert!(matches!(
        store.commit(&[alarms_only]).await,
        Err(CommitError::AlarmLimit {
            index: 0,
            max: 3,
            found: 4,
            ..
        })
    ));
    assert_eq!(load(store, &a).await.map(|o| o.version), Some(4));
}

/// A limit below what the object already has fails a write that sets an alarm, even one it
/// has; a write that cancels enough passes.
pub async fn alarm_limit_lowered<S: Storage + ?Sized>(store: &S) {
    let a = key("alarm_limit_lowered", "a");
    let mut write = insert(&a, b"{}");
    write.alarms = vec![set("x", at(1)), set("y", at(1)), set("z", at(1))];
    commit_ok(store, &[write]).await;
    let mut replace = update(&a, 1, b"{}");
    replace.alarms = vec![set("x", at(2)), limit(2)];
    assert!(matches!(
        store.commit(&[replace]).await,
        Err(CommitError::AlarmLimit {
            max: 2,
            found: 3,
            ..
        })
    ));
    let mut fewer = update(&a, 1, b"{}");
    fewer.alarms = vec![cancel("y"), set("x", at(2)), limit(2)];
    commit_ok(store, &[fewer]).await;
    assert_eq!(names(&alarms(store, &a).await), ["z", "x"]);
}
