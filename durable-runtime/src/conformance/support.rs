//! Helpers shared by the checks: keys, fixed instants, writes and alarm changes to commit,
//! and calls to the store that panic with a message when the store fails.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::storage::{
    AlarmChange, AlarmRecord, CommitError, Loaded, ObjectKey, ObjectWrite, Storage, StoredObject,
    truncate_to_micros,
};

/// A key of a type private to one check.
pub(super) fn key(case: &str, id: &str) -> ObjectKey {
    ObjectKey::new(format!("conformance.{case}"), id)
}

/// A fixed instant (2023-11-14T22:13:20.123457Z) plus `offset_ms`, with an odd microsecond
/// part so that truncation errors show.
pub(super) fn at(offset_ms: i64) -> SystemTime {
    const BASE_MICROS: i64 = 1_700_000_000_123_457;
    let micros = BASE_MICROS + offset_ms * 1000;
    truncate_to_micros(UNIX_EPOCH + Duration::from_micros(micros as u64))
}

pub(super) fn json(value: serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(&value).expect("JSON")
}

pub(super) fn insert(key: &ObjectKey, state: &[u8]) -> ObjectWrite {
    ObjectWrite {
        key: key.clone(),
        expected_version: 0,
        state: Some(state.to_vec()),
        alarms: vec![],
        kv: Vec::new(),
        idempotency: None,
        fsm: Default::default(),
    }
}

pub(super) fn update(key: &ObjectKey, expected_version: u64, state: &[u8]) -> ObjectWrite {
    ObjectWrite {
        key: key.clone(),
        expected_version,
        state: Some(state.to_vec()),
        alarms: vec![],
        kv: Vec::new(),
        idempotency: None,
        fsm: Default::default(),
    }
}

pub(super) fn alarms_only(
    key: &ObjectKey,
    expected_version: u64,
    alarms: Vec<AlarmChange>,
) -> ObjectWrite {
    ObjectWrite {
        key: key.clone(),
        expected_version,
        state: None,
        alarms,
        kv: Vec::new(),
        idempotency: None,
        fsm: Default::default(),
    }
}

pub(super) fn set(name: &str, due_at: SystemTime) -> AlarmChange {
    AlarmChange::Set {
        name: name.to_owned(),
        due_at,
        payload: None,
    }
}

pub(super) fn cancel(name: &str) -> AlarmChange {
    AlarmChange::Cancel {
        name: name.to_owned(),
    }
}

pub(super) async fn commit_ok<S: Storage + ?Sized>(store: &S, batch: &[ObjectWrite]) {
    if let Err(err) = store.commit(batch).await {
        panic!("commit of {batch:?} failed: {err}");
    }
}

/// What the store loads under `key`.
pub(super) async fn loaded<S: Storage + ?Sized>(store: &S, key: &ObjectKey) -> Loaded {
    store
        .load(key)
        .await
        .unwrap_or_else(|err| panic!("load of {key} failed: {err}"))
}

/// The object the store holds under `key`, if any.
pub(super) async fn load<S: Storage + ?Sized>(store: &S, key: &ObjectKey) -> Option<StoredObject> {
    loaded(store, key).await.object()
}

pub(super) async fn alarms<S: Storage + ?Sized>(store: &S, key: &ObjectKey) -> Vec<AlarmRecord> {
    store
        .list_alarms(key)
        .await
        .unwrap_or_else(|err| panic!("list_alarms of {key} failed: {err}"))
}

/// `(name, due_at)` of each alarm, in listed order.
pub(super) async fn alarm_times<S: Storage + ?Sized>(
    store: &S,
    key: &ObjectKey,
) -> Vec<(String, SystemTime)> {
    alarms(store, key)
        .await
        .into_iter()
        .map(|a| (a.name, a.due_at))
        .collect()
}

/// Claims the alarms claimable at `now`, claimed at `now` with a lease until `lease_until`.
pub(super) async fn claim<S: Storage + ?Sized>(
    store: &S,
    now: SystemTime,
    lease_until: SystemTime,
    limit: usize,
) -> Vec<AlarmRecord> {
    store
        .claim_due_alarms(now, now, lease_until, limit)
        .await
        .unwrap_or_else(|err| panic!("claim_due_alarms failed: {err}"))
}

pub(super) async fn next_due<S: Storage + ?Sized>(store: &S) -> Option<SystemTime> {
    store
        .next_alarm_due()
        .await
        .unwrap_or_else(|err| panic!("next_alarm_due failed: {err}"))
}

#[track_caller]
pub(super) fn assert_conflict(
    result: Result<(), CommitError>,
    index: usize,
    key: &ObjectKey,
    expected: u64,
    found: Option<u64>,
) {
    match result {
        Err(CommitError::Conflict {
            index: i,
            key: k,
            expected: e,
            found: f,
        }) => {
            assert_eq!(
                (i, &k, e, f),
                (index, key, expected, found),
                "wrong conflict details (index, key, expected, found)"
            );
        }
        Err(CommitError::Storage(err)) => {
            panic!("expected a version conflict on {key}, got a storage error: {err}")
        }
        Err(
            err @ (CommitError::KvLimit { .. }
            | CommitError::AlarmLimit { .. }
            | CommitError::Fsm { .. }),
        ) => {
            panic!("expected a version conflict on {key}, got {err}")
        }
        Ok(()) => panic!("expected a version conflict on {key}, but the commit succeeded"),
    }
}

pub(super) fn names(alarms: &[AlarmRecord]) -> Vec<&str> {
    alarms.iter().map(|a| a.name.as_str()).collect()
}
