//! Checks on the replies stored under idempotency keys: written with the call's commit and
//! only with it, found by object and key (any string), swept once expired, removed with their
//! object.

use super::support::{at, commit_ok, insert, key, update};
use crate::storage::{CommitError, IdempotentReply, ObjectKey, Storage};

/// A reply expiring at `expires_at` (a fixed instant plus milliseconds).
fn reply(idempotency_key: &str, fingerprint: &[u8], expires_ms: i64) -> IdempotentReply {
    IdempotentReply {
        key: idempotency_key.to_owned(),
        fingerprint: fingerprint.to_vec(),
        reply: format!("{{\"Ok\":\"{idempotency_key}\"}}").into_bytes(),
        expires_at: at(expires_ms),
    }
}

async fn stored<S: Storage + ?Sized>(
    store: &S,
    k: &ObjectKey,
    idempotency_key: &str,
) -> Option<IdempotentReply> {
    store
        .load_idempotent_reply(k, idempotency_key)
        .await
        .unwrap_or_else(|err| panic!("load_idempotent_reply failed: {err}"))
}

/// A reply committed with a write is found under its object and key, with every field as
/// written; another key, or the same key on another object, finds nothing. Keys are any
/// string: empty, with NUL, long, non-ASCII.
pub async fn idempotent_reply_stored_with_commit<S: Storage + ?Sized>(store: &S) {
    let k = key("idempotent_reply_stored_with_commit", "a");
    let other = key("idempotent_reply_stored_with_commit", "b");
    let odd_keys = ["k1", "", "nul\0inside", "é✓", &"x".repeat(1024)];
    let mut version = 0;
    for idempotency_key in odd_keys {
        let expected = reply(idempotency_key, b"fp\0\xff", 1000);
        let mut write = if version == 0 {
            insert(&k, b"{}")
        } else {
            update(&k, version, b"{}")
        };
        write.idempotency = Some(expected.clone());
        commit_ok(store, &[write]).await;
        version += 1;
        assert_eq!(stored(store, &k, idempotency_key).await, Some(expected));
        assert_eq!(stored(store, &other, idempotency_key).await, None);
    }
    assert_eq!(stored(store, &k, "k2").await, None);
    // A read-only write (no state) carries a reply too.
    let mut touch = update(&k, version, b"{}");
    touch.state = None;
    touch.idempotency = Some(reply("read", b"r", 1000));
    commit_ok(store, &[touch]).await;
    assert_eq!(
        stored(store, &k, "read").await,
        Some(reply("read", b"r", 1000))
    );
}

/// A write that conflicts stores nothing, and neither does any other write of its batch.
pub async fn idempotent_reply_not_stored_on_conflict<S: Storage + ?Sized>(store: &S) {
    let k = key("idempotent_reply_not_stored_on_conflict", "a");
    let other = key("idempotent_reply_not_stored_on_conflict", "b");
    commit_ok(store, &[insert(&k, b"{}")]).await;
    let mut stale = update(&k, 7, b"{\"n\":1}");
    stale.idempotency = Some(reply("k", b"f", 1000));
    let mut fresh = insert(&other, b"{}");
    fresh.idempotency = Some(reply("k", b"f", 1000));
    let result = store.commit(&[fresh, stale]).await;
    assert!(
        matches!(result, Err(CommitError::Conflict { .. })),
        "a stale write must conflict: {result:?}"
    );
    assert_eq!(stored(store, &k, "k").await, None);
    assert_eq!(stored(store, &other, "k").await, None);
}

/// The sweep removes the replies expired at its time (inclusive) and no other, at most
/// `limit` per sweep.
pub async fn idempotency_sweep_removes_only_expired<S: Storage + ?Sized>(store: &S) {
    let k = key("idempotency_sweep_removes_only_expired", "a");
    let replies = [("old1", 10), ("old2", 20), ("old3", 20), ("new", 30)];
    for (version, (idempotency_key, expires_ms)) in (0u64..).zip(replies) {
        let mut write = if version == 0 {
            insert(&k, b"{}")
        } else {
            update(&k, version, b"{}")
        };
        write.idempotency = Some(reply(idempotency_key, b"f", expires_ms));
        commit_ok(store, &[write]).await;
    }
    let sweep = |now, limit| async move {
        store
            .sweep_idempotency(at(now), limit)
            .await
            .unwrap_or_else(|err| panic!("sweep_idempotency failed: {err}"))
    };
    assert_eq!(sweep(5, 10).await, 0, "nothing has expired yet");
    assert_eq!(sweep(20, 2).await, 2, "the limit holds");
    assert_eq!(sweep(20, 10).await, 1, "the third expired one goes next");
    for gone in ["old1", "old2", "old3"] {
        assert_eq!(stored(store, &k, gone).await, None, "{gone} expired");
    }
    assert!(stored(store, &k, "new").await.is_some(), "not expired yet");
    assert_eq!(sweep(29, 10).await, 0);
    assert_eq!(sweep(30, 10).await, 1);
    assert_eq!(stored(store, &k, "new").await, None);
}

/// Deleting an object removes its stored replies, and only its own.
pub async fn delete_removes_idempotent_replies<S: Storage + ?Sized>(store: &S) {
    let k = key("delete_removes_idempotent_replies", "a");
    let other = key("delete_removes_idempotent_replies", "b");
    for object in [&k, &other] {
        let mut write = insert(object, b"{}");
        write.idempotency = Some(reply("k", b"f", 1000));
        commit_ok(store, &[write]).await;
    }
    assert!(store.delete(&k).await.expect("delete"));
    assert_eq!(stored(store, &k, "k").await, None);
    assert!(stored(store, &other, "k").await.is_some());
}
