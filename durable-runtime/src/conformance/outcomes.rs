//! Checks on what ends a claimed alarm's run: finishing it (alone or within a commit), failing
//! it (with a retry time, or dead), and releasing its claim.

use super::support::{
    alarms, alarms_only, at, claim, commit_ok, insert, key, load, names, next_due, set, update,
};
use crate::storage::{AlarmChange, AlarmRecord, Storage};

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
    let claimed = claim(store, at(2), at(60_000), 10).await;
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
    let claimed = claim(store, at(1), at(60_000), 10).await;
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
            payload: None,
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
    let claimed = claim(store, at(1), at(60_000), 10).await;
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
    claim(store, at(1), at(60_000), 10).await;
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
            payload: None,
        }]
    );
    assert_eq!(next_due(store).await, Some(at(3)));
    assert!(
        claim(store, at(2), at(60_000), 10).await.is_empty(),
        "moved to its retry time"
    );
    let claimed = claim(store, at(3), at(60_000), 10).await;
    assert_eq!(
        (claimed[0].attempts, claimed[0].claimed_at),
        (1, Some(at(3)))
    );
    // A claim returns the whole record as storage now holds it: its error included.
    assert_eq!(claimed, alarms(store, &k).await);
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
    claim(store, at(1), at(60_000), 10).await;
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
            payload: None,
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
            payload: None,
        }],
        "setting a dead alarm re-queues it"
    );
    assert_eq!(next_due(store).await, Some(at(2)));
    assert_eq!(names(&claim(store, at(2), at(60_000), 10).await), ["x"]);
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
    claim(store, at(5), at(60_000), 10).await;
    assert!(
        store
            .fail_alarm(&k, "x", at(5), 2, "boom", Some(at(8)))
            .await
            .unwrap()
    );
    let claimed = claim(store, at(9), at(60_000), 10).await;
    assert_eq!(claimed[0].claimed_at, Some(at(9)));
    assert_eq!(
        next_due(store).await,
        Some(at(60_000)),
        "a claimed alarm is next when its lease ends"
    );
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
            payload: None,
        }],
        "released, due as before"
    );
    assert_eq!(next_due(store).await, Some(at(8)));
    assert_eq!(
        names(&claim(store, at(10), at(60_000), 10).await),
        ["x"],
        "claimable again without waiting for the claim to expire"
    );
}
