//! Checks on claiming due alarms: the next due time, which alarms a claim takes (due time,
//! order, limit), claim expiry, concurrent claimers, and times at microsecond precision.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::future::join_all;

use super::support::{
    alarm_times, alarms, at, claim, commit_ok, insert, key, names, next_due, set,
};
use crate::storage::{ObjectWrite, Storage, truncate_to_micros};

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
