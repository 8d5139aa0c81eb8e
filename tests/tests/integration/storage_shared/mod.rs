//! Checks shared by the SQLite and Postgres storage tests that need more than one store over
//! one database (as several processes would have).

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use durable_runtime::storage::{
    AlarmChange, CommitError, ObjectKey, ObjectWrite, Storage, truncate_to_micros,
};
use futures_util::future::join_all;

/// A fixed instant plus `offset_ms`.
pub fn at(offset_ms: u64) -> SystemTime {
    truncate_to_micros(UNIX_EPOCH + Duration::from_micros(1_700_000_000_123_457 + offset_ms * 1000))
}

/// Read-modify-write increments through several stores at once never lose an update.
pub async fn increments_across_stores<S: Storage>(stores: &[S]) {
    const PER_WORKER: u64 = 10;
    let key = ObjectKey::new("shared.increments", "counter");
    stores[0]
        .commit(&[ObjectWrite {
            key: key.clone(),
            expected_version: 0,
            state: Some(b"0".to_vec()),
            alarms: vec![],
            kv: Vec::new(),
            idempotency: None,
            fsm: Default::default(),
        }])
        .await
        .unwrap();
    let key = &key;
    let workers = (0..stores.len() * 2).map(|worker| async move {
        let store = &stores[worker % stores.len()];
        let mut conflicts = 0u32;
        for _ in 0..PER_WORKER {
            loop {
                let stored = store.load(key).await.unwrap().object().unwrap();
                let n: u64 = std::str::from_utf8(&stored.state).unwrap().parse().unwrap();
                let write = ObjectWrite {
                    key: key.clone(),
                    expected_version: stored.version,
                    state: Some((n + 1).to_string().into_bytes()),
                    alarms: vec![],
                    kv: Vec::new(),
                    idempotency: None,
                    fsm: Default::default(),
                };
                match store.commit(&[write]).await {
                    Ok(()) => break,
                    Err(CommitError::Conflict { .. }) => {
                        conflicts += 1;
                        assert!(conflicts < 10_000, "no progress");
                    }
                    Err(err) => panic!("increment failed: {err}"),
                }
            }
        }
    });
    join_all(workers).await;
    let stored = stores[1].load(key).await.unwrap().object().unwrap();
    let total = stores.len() as u64 * 2 * PER_WORKER;
    assert_eq!(
        stored.state,
        total.to_string().into_bytes(),
        "an update was lost"
    );
    assert_eq!(stored.version, total + 1);
}

/// Schedulers of several stores claiming at once never get the same alarm.
pub async fn claims_across_stores<S: Storage>(stores: &[S]) {
    const OBJECTS: usize = 30;
    const NAMES: usize = 4;
    let batch: Vec<ObjectWrite> = (0..OBJECTS)
        .map(|i| ObjectWrite {
            key: ObjectKey::new("shared.claims", format!("o{i:02}")),
            expected_version: 0,
            state: Some(b"{}".to_vec()),
            alarms: (0..NAMES)
                .map(|n| AlarmChange::Set {
                    name: format!("n{n}"),
                    due_at: at((i % 5) as u64),
                    payload: None,
                })
                .collect(),
            kv: Vec::new(),
            idempotency: None,
            fsm: Default::default(),
        })
        .collect();
    stores[0].commit(&batch).await.unwrap();
    let claimers = (0..stores.len() * 3).map(|claimer| async move {
        let store = &stores[claimer % stores.len()];
        let mut claimed = Vec::new();
        for round in 0.. {
            // Each round claims at least one alarm, or ends the loop.
            assert!(round <= OBJECTS * NAMES, "claims never run out");
            let now = at(1_000 + claimer as u64);
            let round = store
                .claim_due_alarms(now, now, at(1_000_000), 5)
                .await
                .unwrap();
            if round.is_empty() {
                break;
            }
            claimed.extend(round);
        }
        claimed
    });
    let mut seen = BTreeSet::new();
    for alarm in join_all(claimers).await.into_iter().flatten() {
        assert!(
            seen.insert((alarm.key.clone(), alarm.name.clone())),
            "{}/{} was claimed twice",
            alarm.key,
            alarm.name
        );
    }
    assert_eq!(seen.len(), OBJECTS * NAMES, "every alarm is claimed once");
}

/// A claimed alarm whose row cannot be read (`corrupt` makes the alarm of `Reminder/bad`
/// unreadable) is left out of the claim: the alarms claimed with it still come back.
// Only the SQL backends store rows that can be edited behind the store's back.
#[allow(dead_code)]
pub async fn unreadable_claimed_rows_are_skipped<S: Storage, F: Future<Output = ()>>(
    store: &S,
    corrupt: impl FnOnce() -> F,
) {
    for id in ["bad", "good"] {
        store
            .commit(&[ObjectWrite {
                key: ObjectKey::new("Reminder", id),
                expected_version: 0,
                state: Some(b"{}".to_vec()),
                alarms: vec![AlarmChange::Set {
                    name: "tick".into(),
                    due_at: at(0),
                    payload: None,
                }],
                kv: Vec::new(),
                idempotency: None,
                fsm: Default::default(),
            }])
            .await
            .unwrap();
    }
    corrupt().await;
    let claimed = store
        .claim_due_alarms(at(1), at(1), at(60_000), 10)
        .await
        .unwrap();
    let claimed: Vec<&str> = claimed.iter().map(|a| a.key.object_id.as_str()).collect();
    assert_eq!(claimed, ["good"]);
}
