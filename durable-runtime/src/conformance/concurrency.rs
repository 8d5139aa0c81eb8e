//! Checks on concurrent writes to one object: racing writers and first writes (one winner each
//! round), and read-modify-write loops that lose no update.

use futures_util::future::join_all;

use super::support::{commit_ok, insert, json, key, load, update};
use crate::storage::{CommitError, Storage, StoredObject};

/// Writers racing on one object with the same expected version: exactly one wins each round;
/// the others get a conflict naming the winner's version.
pub async fn concurrent_writers_one_winner<S: Storage + ?Sized>(store: &S) {
    let k = key("concurrent_writers_one_winner", "a");
    commit_ok(store, &[insert(&k, b"{\"writer\":null}")]).await;
    for version in 1..=5u64 {
        let states: Vec<Vec<u8>> = (0..8)
            .map(|writer| format!("{{\"writer\":{writer},\"round\":{version}}}").into_bytes())
            .collect();
        let results = join_all(states.iter().map(|state| {
            let write = [update(&k, version, state)];
            async move { store.commit(&write).await }
        }))
        .await;
        let mut winners = Vec::new();
        for (writer, result) in results.into_iter().enumerate() {
            match result {
                Ok(()) => winners.push(writer),
                Err(CommitError::Conflict {
                    index,
                    expected,
                    found,
                    ..
                }) => {
                    assert_eq!(
                        (index, expected, found),
                        (0, version, Some(version + 1)),
                        "a loser must see the winner's version"
                    );
                }
                Err(err) => panic!("writer {writer} failed: {err}"),
            }
        }
        assert_eq!(winners.len(), 1, "round {version}: winners {winners:?}");
        assert_eq!(
            load(store, &k).await,
            Some(StoredObject {
                state: states[winners[0]].clone(),
                version: version + 1
            }),
            "the stored state is the winner's"
        );
    }
}

/// Racing first writes of one object: exactly one creates it.
pub async fn concurrent_inserts_one_winner<S: Storage + ?Sized>(store: &S) {
    let k = key("concurrent_inserts_one_winner", "a");
    let results = join_all((0..8).map(|writer| {
        let write = [insert(&k, format!("{{\"writer\":{writer}}}").as_bytes())];
        async move { store.commit(&write).await }
    }))
    .await;
    let mut winners = 0;
    for result in results {
        match result {
            Ok(()) => winners += 1,
            Err(CommitError::Conflict { found, .. }) => assert_eq!(found, Some(1)),
            Err(err) => panic!("insert failed: {err}"),
        }
    }
    assert_eq!(winners, 1);
    assert_eq!(load(store, &k).await.map(|o| o.version), Some(1));
}

/// Concurrent read-modify-write loops that retry on conflict never lose an update.
pub async fn concurrent_increments_lose_nothing<S: Storage + ?Sized>(store: &S) {
    const WORKERS: u64 = 6;
    const INCREMENTS: u64 = 10;
    let k = key("concurrent_increments_lose_nothing", "counter");
    commit_ok(store, &[insert(&k, b"{\"n\":0}")]).await;
    let k = &k;
    let worker = move |_| async move {
        let mut conflicts = 0u32;
        for _ in 0..INCREMENTS {
            loop {
                let stored = load(store, k).await.expect("stored");
                let value: serde_json::Value = serde_json::from_slice(&stored.state).unwrap();
                let n = value["n"].as_u64().unwrap();
                let state = json(serde_json::json!({ "n": n + 1 }));
                match store.commit(&[update(k, stored.version, &state)]).await {
                    Ok(()) => break,
                    Err(CommitError::Conflict { .. }) => {
                        conflicts += 1;
                        assert!(conflicts < 10_000, "no progress");
                    }
                    Err(err) => panic!("increment failed: {err}"),
                }
            }
        }
    };
    join_all((0..WORKERS).map(worker)).await;
    let stored = load(store, k).await.expect("stored");
    assert_eq!(
        stored,
        StoredObject {
            state: json(serde_json::json!({ "n": WORKERS * INCREMENTS })),
            version: WORKERS * INCREMENTS + 1
        },
        "an increment was lost"
    );
}
