//! Checks on claiming due alarms: the next claimable time, which alarms a claim takes (due
//! time, order, limit), claim leases and their renewal, concurrent claimers, and times at
//! microsecond precision.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::future::join_all;

use super::support::{
    alarm_times, alarms, at, claim, commit_ok, insert, key, names, next_due, set,
};
use crate::storage::{AlarmClaim, ObjectWrite, Storage, truncate_to_micros};

/// The next time an alarm becomes claimable: the due time of an unclaimed alarm, or the later
/// of due time and lease end of a claimed one; dead alarms never.
pub async fn next_alarm_due_waits_for_leases_and_skips_dead<S: Storage + ?Sized>(store: &S) {
    assert_eq!(next_due(store).await, None);
    let k = key("next_alarm_due_waits_for_leases_and_skips_dead", "a");
    let mut write = insert(&k, b"{}");
    write.alarms = vec![set("a", at(1)), set("b", at(2)), set("c", at(3))];
    commit_ok(store, &[write]).await;
    assert_eq!(next_due(store).await, Some(at(1)));

    let claimed = claim(store, at(1), at(60_000), 10).await;
    assert_eq!(names(&claimed), ["a"]);
    assert_eq!(
        next_due(store).await,
        Some(at(2)),
        "a claimed alarm is next only when its lease ends"
    );

    let claimed = claim(store, at(2), at(60_000), 10).await;
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
    let claimed = claim(store, at(3), at(10), 10).await;
    assert_eq!(names(&claimed), ["c"]);
    assert_eq!(
        next_due(store).await,
        Some(at(10)),
        "a claim whose lease ends first is next, at its lease's end"
    );
    assert!(store.finish_alarm(&k, "a", at(1)).await.unwrap());
    assert!(store.finish_alarm(&k, "c", at(3)).await.unwrap());
    assert_eq!(next_due(store).await, None);

    let other = key("next_alarm_due_waits_for_leases_and_skips_dead", "b");
    let mut write = insert(&other, b"{}");
    write.alarms = vec![set("early", at(-5)), set("ahead", at(20))];
    commit_ok(store, &[write]).await;
    assert_eq!(next_due(store).await, Some(at(-5)), "all objects count");
    // Claimed ahead of its due time with a lease that ends before it: due time first.
    assert_eq!(
        store
            .claim_due_alarms(at(15), at(20), at(17), 10)
            .await
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        next_due(store).await,
        Some(at(17)),
        "`early`: its lease's end"
    );
    assert!(store.finish_alarm(&other, "early", at(15)).await.unwrap());
    assert_eq!(next_due(store).await, Some(at(20)), "`ahead`: its due time");
}

/// Claims take only alarms due by `due_by`, earliest first (ties by object, then name), at
/// most `limit`, and mark them claimed at `now` (the time of the claim, which may be before
/// `due_by`); claimed alarms are not claimed again while their lease lasts.
pub async fn claim_respects_due_time_and_limit<S: Storage + ?Sized>(store: &S) {
    let a = key("claim_respects_due_time_and_limit", "a");
    let b = key("claim_respects_due_time_and_limit", "b");
    let mut write_a = insert(&a, b"{}");
    write_a.alarms = vec![set("a1", at(10)), set("a3", at(30))];
    let mut write_b = insert(&b, b"{}");
    write_b.alarms = vec![set("b1", at(10)), set("b2", at(20)), set("b4", at(40))];
    commit_ok(store, &[write_a, write_b]).await;
    let long = at(3_600_000);

    assert!(
        claim(store, at(9), long, 10).await.is_empty(),
        "nothing is due yet"
    );
    assert!(
        claim(store, at(20), long, 0).await.is_empty(),
        "limit 0 claims nothing"
    );

    let claimed = store
        .claim_due_alarms(at(15), at(20), long, 10)
        .await
        .unwrap();
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
            ("a", "a1", at(10), Some(at(15))),
            ("b", "b1", at(10), Some(at(15))),
            ("b", "b2", at(20), Some(at(15))),
        ],
        "alarms due by `due_by`, earliest first, claimed at `now` (a due time equal to \
         `due_by` is due)"
    );

    let claimed = claim(store, at(45), long, 1).await;
    assert_eq!(names(&claimed), ["a3"], "limit 1; leased claims hold");
    let claimed = claim(store, at(45), long, 10).await;
    assert_eq!(names(&claimed), ["b4"]);
    assert!(claim(store, at(46), long, 10).await.is_empty());

    let listed = alarms(store, &b).await;
    assert!(listed.iter().all(|alarm| alarm.claimed_at.is_some()));
    assert_eq!(listed[0].claimed_at, Some(at(15)));
    assert_eq!(listed[2].claimed_at, Some(at(45)));
}

/// A claim whose lease ended by `now` is taken over by a new claim; the old claim can then
/// no longer finish or renew the alarm. A renewal extends only a lease still held under its
/// claim time.
pub async fn claim_expiry<S: Storage + ?Sized>(store: &S) {
    let k = key("claim_expiry", "a");
    let mut write = insert(&k, b"{}");
    write.alarms = vec![set("x", at(1)), set("y", at(1))];
    commit_ok(store, &[write]).await;
    assert_eq!(names(&claim(store, at(1), at(10), 10).await), ["x", "y"]);
    let micro = Duration::from_micros(1);
    assert!(
        claim(store, at(10) - micro, at(100), 10).await.is_empty(),
        "a lease lasts until its end"
    );
    assert!(
        store
            .claim_due_alarms(at(2), at(1_000), at(100), 10)
            .await
            .unwrap()
            .is_empty(),
        "a live lease is not taken, however far ahead the claimer looks"
    );
    let claim_x = AlarmClaim {
        key: k.clone(),
        name: "x".into(),
        claimed_at: at(1),
    };
    let stale = AlarmClaim {
        claimed_at: at(0),
        ..claim_x.clone()
    };
    assert_eq!(
        store
            .renew_alarm_claims(&[claim_x.clone(), stale], at(20))
            .await
            .unwrap(),
        1,
        "only the claim the alarm holds is renewed"
    );
    let reclaimed = claim(store, at(10), at(100), 10).await;
    assert_eq!(
        names(&reclaimed),
        ["y"],
        "a lease that ended is taken over; a renewed one holds"
    );
    assert_eq!(reclaimed[0].claimed_at, Some(at(10)));
    assert!(
        !store.finish_alarm(&k, "y", at(1)).await.unwrap(),
        "the old claim is gone"
    );
    let old_y = AlarmClaim {
        name: "y".into(),
        ..claim_x.clone()
    };
    assert_eq!(
        store.renew_alarm_claims(&[old_y], at(200)).await.unwrap(),
        0,
        "a claim taken over is not renewed"
    );
    assert!(store.finish_alarm(&k, "y", at(10)).await.unwrap());
    assert_eq!(names(&claim(store, at(20), at(100), 10).await), ["x"]);
    assert!(store.finish_alarm(&k, "x", at(20)).await.unwrap());
    assert!(alarms(store, &k).await.is_empty());
    assert_eq!(
        store.renew_alarm_claims(&[], at(300)).await.unwrap(),
        0,
        "nothing to renew"
    );

    // Many claims renewed in one call, of objects whose ids need escaping.
    let ids = ["q\"uote", "back\\slash", "\u{fc}n\u{ef}"];
    let writes: Vec<ObjectWrite> = ids
        .iter()
        .map(|id| {
            let mut write = insert(&key("claim_expiry", id), b"{}");
            write.alarms = (0..100).map(|n| set(&format!("m{n}"), at(300))).collect();
            write
        })
        .collect();
    commit_ok(store, &writes).await;
    let claimed = claim(store, at(300), at(300), 1_000).await;
    assert_eq!(claimed.len(), 300);
    let claims: Vec<AlarmClaim> = claimed
        .iter()
        .map(|alarm| AlarmClaim {
            key: alarm.key.clone(),
            name: alarm.name.clone(),
            claimed_at: at(300),
        })
        .collect();
    assert_eq!(
        store.renew_alarm_claims(&claims, at(400)).await.unwrap(),
        300,
        "every claim renewed at once"
    );
    assert!(
        claim(store, at(350), at(350), 1_000).await.is_empty(),
        "each renewed lease holds past its old end"
    );
    for claim in &claims {
        assert!(
            store
                .finish_alarm(&claim.key, &claim.name, at(300))
                .await
                .unwrap()
        );
    }
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
    let long = at(3_600_000);
    let rounds = join_all(
        (0..8).map(|claimer| async move { claim(store, at(100 + claimer), long, 7).await }),
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
    let rest = claim(store, at(200), long, ALARMS).await;
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
    let claimed = claim(store, now, times[5].1, 10).await;
    assert_eq!(
        names(&claimed),
        ["t0_epoch_plus_1us", "t1_y2000_minus_1us", "t2_odd"]
    );
    assert!(claimed.iter().all(|c| c.claimed_at == Some(now)));
    let later = times[3].1 - Duration::from_micros(1);
    assert!(claim(store, later, times[5].1, 10).await.is_empty());

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
    let claimed = claim(store, times[5].1, times[5].1, 10).await;
    assert_eq!(names(&claimed), ["t3_next", "t4_y2200", "t5_y9999"]);
    assert_eq!(claimed[2].claimed_at, Some(times[5].1));
    assert!(
        store
            .finish_alarm(&k, "t5_y9999", times[5].1)
            .await
            .unwrap()
    );
}
