//! The checks of concurrency keys: at most `concurrency_limit` executing instances per key,
//! slots freed by every way out of `executing`, rows of a saturated key passed over, and the
//! pick's order kept within a key.

use super::{
    Claimed, FsmStore, InstanceId, NewInstance, Status, Transition, at, commit_one, done, get,
    insert, next, outcome, pick, row,
};

/// A row with the concurrency key `key` of limit `limit`, due at `eligible_ms`, with a state
/// naming it `n`.
fn keyed(key: &str, limit: u16, eligible_ms: i64, n: u32) -> NewInstance {
    let mut new = row(None);
    new.concurrency_key = Some(key.to_owned());
    new.concurrency_limit = limit;
    new.eligible_at = at(eligible_ms);
    new.state = format!(r#"{{"n":{n}}}"#);
    new
}

/// The `n` of a claimed row's state.
fn n(claimed: &Claimed) -> u64 {
    super::json(&claimed.state)["n"]
        .as_u64()
        .unwrap_or_else(|| panic!("state {} has no n", claimed.state))
}

fn ns(claimed: &[Claimed]) -> Vec<u64> {
    let mut ns: Vec<u64> = claimed.iter().map(n).collect();
    ns.sort_unstable();
    ns
}

/// How many rows are executing with the key `key`, and their slots.
async fn executing<S: FsmStore + ?Sized>(
    store: &S,
    ids: &[InstanceId],
    key: &str,
) -> Vec<Option<u16>> {
    let mut slots = Vec::new();
    for id in ids {
        let record = get(store, *id).await;
        if record.status == Status::Executing && record.concurrency_key.as_deref() == Some(key) {
            slots.push(record.concurrency_slot);
        }
    }
    slots
}

/// With a limit of 1, one instance of a key executes at a time; other keys and keyless rows
/// run alongside; the key and limit read back as inserted.
pub async fn concurrency_key_one_at_a_time<S: FsmStore + ?Sized>(store: &S) {
    let ids = insert(
        store,
        &[
            keyed("a", 1, 0, 1),
            keyed("a", 1, 10, 2),
            keyed("a", 1, 20, 3),
            keyed("b", 1, 30, 4),
            row(None),
        ],
    )
    .await;
    assert_eq!(ids.len(), 5);
    let record = get(store, ids[0]).await;
    assert_eq!(
        (
            record.concurrency_key.as_deref(),
            record.concurrency_limit,
            record.concurrency_slot
        ),
        (Some("a"), 1, None)
    );
    let first = pick(store, 10, at(1_000)).await;
    assert_eq!(
        ns(&first),
        vec![1, 1, 4],
        "the first of key a, the one of key b and the keyless row"
    );
    assert_eq!(executing(store, &ids, "a").await, vec![Some(0)]);
    assert!(
        pick(store, 10, at(1_000)).await.is_empty(),
        "key a is saturated: its other rows wait"
    );
}

/// With a limit of 2, at most two instances of a key execute at once, in distinct slots.
pub async fn concurrency_limit_two<S: FsmStore + ?Sized>(store: &S) {
    let rows: Vec<NewInstance> = (0..5).map(|i| keyed("k", 2, i * 10, 1)).collect();
    let ids = insert(store, &rows).await;
    let first = pick(store, 10, at(1_000)).await;
    assert_eq!(first.len(), 2, "two of five run");
    let mut slots = executing(store, &ids, "k").await;
    slots.sort_unstable();
    assert_eq!(slots, vec![Some(0), Some(1)]);
    assert!(pick(store, 10, at(1_000)).await.is_empty());

    commit_one(store, outcome(&first[0], done()), at(1_100)).await;
    let again = pick(store, 10, at(1_200)).await;
    assert_eq!(again.len(), 1, "the freed slot takes one more");
    let mut slots = executing(store, &ids, "k").await;
    slots.sort_unstable();
    assert_eq!(slots, vec![Some(0), Some(1)]);
    assert!(pick(store, 10, at(1_200)).await.is_empty());
}

/// Rows without a key are not limited, and rows of a saturated key do not take the pick's
/// places: a later row of a free key is claimed within a small limit.
pub async fn saturated_keys_are_passed_over<S: FsmStore + ?Sized>(store: &S) {
    let mut rows: Vec<NewInstance> = (0..10).map(|i| keyed("hot", 1, i, 1)).collect();
    rows.push(keyed("cold", 1, 100, 2));
    rows.extend((0..3).map(|_| {
        let mut new = row(None);
        new.eligible_at = at(200);
        new.state = r#"{"n":3}"#.to_owned();
        new
    }));
    insert(store, &rows).await;
    let first = pick(store, 1, at(1_000)).await;
    assert_eq!(ns(&first), vec![1], "the head of key hot");
    let second = pick(store, 1, at(1_000)).await;
    assert_eq!(
        ns(&second),
        vec![2],
        "key hot is saturated: its nine waiting rows are passed over for key cold"
    );
    let rest = pick(store, 10, at(1_000)).await;
    assert_eq!(ns(&rest), vec![3, 3, 3], "keyless rows are not limited");
}

/// A slot is freed by every way out of `executing`: done, stop, retry, await and the reaper;
/// each time the next row of the key in line runs.
pub async fn released_slot_runs_the_next_in_line<S: FsmStore + ?Sized>(store: &S) {
    let rows: Vec<NewInstance> = (0..6)
        .map(|i| keyed("line", 1, i64::from(i) * 10, i))
        .collect();
    insert(store, &rows).await;
    let mut now = 1_000;
    let mut current = pick(store, 10, at(now)).await;
    assert_eq!(ns(&current), vec![0]);
    let releases: [(&str, Option<Transition>); 5] = [
        ("done", Some(done())),
        (
            "stop",
            Some(Transition::Stop {
                reason: "no".to_owned(),
            }),
        ),
        (
            "retry",
            Some(Transition::Retry {
                state: r#"{"n":99}"#.to_owned(),
                eligible_at: at(1_000_000),
            }),
        ),
        (
            "await",
            Some(Transition::Await {
                step: "woken".to_owned(),
                state: r#"{"n":98}"#.to_owned(),
                names: vec!["never".to_owned()],
                deadline: None,
            }),
        ),
        ("reaped", None),
    ];
    for (expected, (how, release)) in (1..).zip(releases) {
        now += 100;
        match release {
            Some(transition) => commit_one(store, outcome(&current[0], transition), at(now)).await,
            None => {
                now += 120_000;
                let swept = store.reap(at(now)).await.expect("reap");
                assert_eq!(swept.expired_leases, 1);
            }
        }
        let picked = pick(store, 10, at(now)).await;
        let picked_ns = ns(&picked);
        // The reaped row is runnable again and first in line: it runs again.
        let want = if how == "reaped" { 4 } else { expected };
        assert_eq!(
            picked_ns,
            vec![want],
            "after {how}, the next row of the key in line runs, alone"
        );
        current = picked;
    }
}

/// Within a key of limit 1, rows run by priority then eligibility, whatever the order of
/// their insert.
pub async fn key_order_follows_priority_then_eligibility<S: FsmStore + ?Sized>(store: &S) {
    let mut rows = Vec::new();
    for (n, priority, eligible_ms) in [(1, 5, 0), (2, 0, 30), (3, 0, 10), (4, -1, 50)] {
        let mut new = keyed("order", 1, eligible_ms, n);
        new.priority = priority;
        rows.push(new);
    }
    insert(store, &rows).await;
    let mut order = Vec::new();
    let mut now = 1_000;
    loop {
        let picked = pick(store, 10, at(now)).await;
        assert!(picked.len() <= 1, "one at a time: {:?}", ns(&picked));
        let Some(claimed) = picked.first() else {
            break;
        };
        order.push(n(claimed));
        now += 10;
        commit_one(store, outcome(claimed, done()), at(now)).await;
    }
    assert_eq!(order, vec![4, 3, 2, 1]);
}

/// Pickers racing on one key never exceed its limit, and a row moved on by `next` frees its
/// slot and queues again behind the others.
pub async fn concurrent_pickers_respect_limits<S: FsmStore + ?Sized>(store: &S) {
    for (key, limit) in [("solo", 1_u16), ("pair", 2)] {
        let rows: Vec<NewInstance> = (0..20)
            .map(|i| {
                let mut new = keyed(key, limit, i, 1);
                new.queue = key.to_owned();
                new
            })
            .collect();
        let ids = insert(store, &rows).await;
        let mut claims: Vec<Claimed> = Vec::new();
        for round in 0..4 {
            let now = at(1_000 + round);
            let (a, b) = tokio::join!(
                store.pick(key, "a", now, at(61_000), 5, now),
                store.pick(key, "b", now, at(61_000), 5, now),
            );
            claims.extend(a.expect("pick"));
            claims.extend(b.expect("pick"));
            let running = executing(store, &ids, key).await;
            assert!(
                running.len() <= usize::from(limit),
                "{key}: {} executing over a limit of {limit}",
                running.len()
            );
            assert_eq!(running.len(), claims.len(), "{key}: every claim executes");
        }
        assert!(!claims.is_empty(), "{key}: the key is claimed");

        for claimed in &claims {
            commit_one(store, outcome(claimed, next("again", "{}")), at(2_000)).await;
        }
        assert!(executing(store, &ids, key).await.is_empty());
        let picked = store
            .pick(key, "c", at(2_000), at(61_000), 20, at(2_000))
            .await
            .expect("pick");
        assert_eq!(
            picked.len(),
            usize::from(limit),
            "{key}: freed slots are taken"
        );
        assert!(
            picked.iter().all(|claimed| claimed.step == "start"),
            "{key}: the rows waiting longest run before the rows moved on"
        );
    }
}
