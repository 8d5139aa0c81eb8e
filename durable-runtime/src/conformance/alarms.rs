//! Checks on scheduling alarms with writes: setting, listing, replacing and cancelling them,
//! and the order in which the alarm changes of a write and of a batch apply.

use super::support::{
    alarm_times, alarms, alarms_only, at, cancel, claim, commit_ok, insert, key, load, names,
    next_due, set, update,
};
use crate::storage::{AlarmChange, AlarmRecord, ObjectKey, Storage};

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
            payload: None,
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

    let claimed = claim(store, at(1), at(60_000), 10).await;
    assert_eq!(names(&claimed), ["x"]);
    assert!(
        store
            .fail_alarm(&k, "x", at(1), 2, "boom", Some(at(3)))
            .await
            .unwrap()
    );
    let claimed = claim(store, at(3), at(60_000), 10).await;
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
            payload: None,
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
    let claimed = claim(store, at(1), at(60_000), 10).await;
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
