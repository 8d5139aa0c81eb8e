//! The checks of the scheduling controls: rate limits (claims never exceed what the bucket
//! holds and earns, rows it cannot serve wait runnable, two pickers share one bucket), paused
//! queues, and cancel (its tree, its parent, and its race with an executing outcome).

use std::time::{Duration, Instant};

use super::{
    Claimed, Committed, FsmStore, InstanceId, NewInstance, Status, Target, Transition, at, claim,
    commit_one, complete, done, get, insert, insert_one, outcome, pick, row,
};
use crate::fsm::store::{CancelOutcome, RateLimit};

/// A row with the rate-limit key `key`, due at `eligible_ms`.
fn limited(key: &str, eligible_ms: i64) -> NewInstance {
    let mut new = row(None);
    new.rate_limit_key = Some(key.to_owned());
    new.eligible_at = at(eligible_ms);
    new
}

/// The most claims a bucket of `limit`, created `since` ago, may have allowed: its capacity
/// plus what the time since earned (and a hair for the clocks' rounding).
fn allowance(limit: RateLimit, since: Instant) -> f64 {
    let capacity = f64::from(limit.capacity);
    capacity + capacity * since.elapsed().as_secs_f64() / limit.per.as_secs_f64() + 0.01
}

/// A bucket of 2 serves two claims of its key; the third row stays runnable, moved to when
/// the bucket will have earned a token, and is not picked before; rows without a key and
/// keys without a stored limit are not limited; the key and units read back as inserted.
pub async fn rate_limit_caps_claims<S: FsmStore + ?Sized>(store: &S) {
    store
        .set_rate_limit("api", RateLimit::new(2, Duration::from_secs(3600)))
        .await
        .expect("set rate limit");
    let mut heavy = limited("api", 0);
    heavy.rate_limit_units = 3;
    let ids = insert(
        store,
        &[
            limited("api", 0),
            limited("api", 10),
            limited("api", 20),
            limited("unlimited", 30),
            row(None),
        ],
    )
    .await;
    let heavy = insert_one(store, {
        heavy.eligible_at = at(40);
        heavy
    })
    .await;
    let record = get(store, ids[0]).await;
    assert_eq!(
        (record.rate_limit_key.as_deref(), record.rate_limit_units),
        (Some("api"), 1)
    );
    assert_eq!(get(store, heavy).await.rate_limit_units, 3);

    let now = at(1_000);
    let claimed = pick(store, 10, now).await;
    let mut picked: Vec<InstanceId> = claimed.iter().map(|c| c.id).collect();
    picked.sort_unstable();
    assert_eq!(
        picked,
        vec![ids[0], ids[1], ids[3], ids[4]],
        "two claims of the bucket of 2, in order, and every unlimited row"
    );
    for waiting in [ids[2], heavy] {
        let record = get(store, waiting).await;
        assert_eq!(
            record.status,
            Status::Runnable,
            "a rate-limited row waits runnable"
        );
        assert!(
            record.eligible_at > now,
            "a rate-limited row is moved to when its bucket refills"
        );
    }
    assert!(
        pick(store, 10, now).await.is_empty(),
        "the rows the bucket could not serve are not picked again at once"
    );
    let limits = store.rate_limits().await.expect("rate limits");
    assert_eq!(limits.len(), 1);
    assert_eq!(limits[0].key, "api");
    assert_eq!(
        limits[0].limit,
        RateLimit::new(2, Duration::from_secs(3600))
    );
    assert!(
        limits[0].tokens < 1.0,
        "two tokens taken: {}",
        limits[0].tokens
    );

    // Later than the rows' new eligibility, by the engine's clock: the bucket (on the
    // database's clock) has still not earned a token, and the rows are moved again.
    let later = at(100_000_000);
    assert!(pick(store, 10, later).await.is_empty());
    assert_eq!(get(store, ids[2]).await.status, Status::Runnable);

    assert!(store.remove_rate_limit("api").await.expect("remove"));
    assert!(!store.remove_rate_limit("api").await.expect("remove"));
    let far = at(1_000_000_000);
    let mut freed: Vec<InstanceId> = pick(store, 10, far).await.iter().map(|c| c.id).collect();
    freed.sort_unstable();
    assert_eq!(
        freed,
        vec![ids[2], heavy],
        "without a limit the key's rows are claimed"
    );
}

/// A bucket of 1 per 300 ms serves its rows one by one as it refills: at every moment the
/// claims made are at most its capacity plus what the time since it was created earned.
pub async fn rate_limit_refills<S: FsmStore + ?Sized>(store: &S) {
    let limit = RateLimit::new(1, Duration::from_millis(300));
    let since = Instant::now();
    store
        .set_rate_limit("slow", limit)
        .await
        .expect("set rate limit");
    let ids = insert(
        store,
        &(0..3).map(|i| limited("slow", i)).collect::<Vec<_>>(),
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut claims = 0_usize;
    while claims < ids.len() {
        assert!(Instant::now() < deadline, "the bucket never refilled");
        // Every row due by the engine's clock (rows moved by the bucket too): only the
        // bucket holds rows back.
        claims += store
            .pick(
                super::QUEUE,
                "w",
                at(1_000_000_000),
                at(1_060_000_000),
                10,
                at(1_000),
            )
            .await
            .expect("pick")
            .len();
        assert!(
            claims as f64 <= allowance(limit, since),
            "{claims} claims after {:?} from a bucket of 1 per 300 ms",
            since.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Two pickers racing on one bucket of 3 per 400 ms claim, together, no more than it holds
/// and earns.
pub async fn concurrent_pickers_share_a_rate_limit<S: FsmStore + ?Sized>(store: &S) {
    let limit = RateLimit::new(3, Duration::from_millis(400));
    let since = Instant::now();
    store
        .set_rate_limit("shared", limit)
        .await
        .expect("set rate limit");
    insert(
        store,
        &(0..12).map(|i| limited("shared", i)).collect::<Vec<_>>(),
    )
    .await;
    // Every row due by the engine's clock (rows moved by the bucket too): only the bucket
    // holds rows back.
    let far = at(1_000_000_000);
    let until = far + Duration::from_secs(60);
    let mut claims = 0_usize;
    for _ in 0..15 {
        let (a, b) = tokio::join!(
            store.pick(super::QUEUE, "a", far, until, 4, at(1_000)),
            store.pick(super::QUEUE, "b", far, until, 4, at(1_000)),
        );
        claims += a.expect("pick").len() + b.expect("pick").len();
        assert!(
            claims as f64 <= allowance(limit, since),
            "{claims} claims after {:?} from a bucket of 3 per 400 ms",
            since.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    assert!(
        claims > 3,
        "the bucket's first tokens and some it earned are claimed: {claims}"
    );
}

/// A paused queue is not picked from (other queues are); pausing and resuming say whether
/// they changed anything; the paused queues are listed; a resumed queue is picked again.
pub async fn paused_queue_is_not_picked<S: FsmStore + ?Sized>(store: &S) {
    let id = insert_one(store, row(None)).await;
    let mut other = row(None);
    other.queue = "other".to_owned();
    let other = insert_one(store, other).await;
    assert!(store.pause_queue(super::QUEUE, at(1)).await.expect("pause"));
    assert!(!store.pause_queue(super::QUEUE, at(2)).await.expect("pause"));
    let paused = store.paused_queues().await.expect("paused queues");
    assert_eq!(paused.len(), 1);
    assert_eq!(
        (paused[0].queue.as_str(), paused[0].paused_at),
        (super::QUEUE, at(1))
    );
    assert!(
        pick(store, 10, at(10)).await.is_empty(),
        "a paused queue is not picked"
    );
    assert_eq!(get(store, id).await.status, Status::Runnable);
    let picked = store
        .pick("other", "w", at(10), at(70_000), 10, at(10))
        .await
        .expect("pick");
    assert_eq!(picked.len(), 1);
    assert_eq!(picked[0].id, other, "other queues run on");
    assert!(store.resume_queue(super::QUEUE).await.expect("resume"));
    assert!(!store.resume_queue(super::QUEUE).await.expect("resume"));
    assert!(store.paused_queues().await.expect("paused").is_empty());
    claim(store, id, at(20)).await;
}

fn cancelled(outcome: CancelOutcome) -> (InstanceId, u64) {
    match outcome {
        CancelOutcome::Cancelled { id, instances } => (id, instances),
        other => panic!("expected a cancel, got {other:?}"),
    }
}

/// Cancelling an executing instance ends it `failed` with the reason, frees its claim and
/// its key, deletes its inbox, and makes its step's outcome stale; a second cancel finds it
/// ended; unknown ids and keys are not found.
pub async fn cancel_fences_the_executing_outcome<S: FsmStore + ?Sized>(store: &S) {
    let id = insert_one(store, row(Some("order:1"))).await;
    super::send(store, id, "early").await;
    let claimed = claim(store, id, at(1)).await;
    let outcome_of = store
        .cancel(&Target::from("order:1"), "cancelled by ops", at(2))
        .await
        .expect("cancel");
    assert_eq!(cancelled(outcome_of), (id, 1));
    let record = get(store, id).await;
    assert_eq!(record.status, Status::Failed);
    assert_eq!(record.last_error.as_deref(), Some("cancelled by ops"));
    assert_eq!((record.locked_by, record.lease_expires_at), (None, None));
    assert_eq!(record.updated_at, at(2));
    assert!(store.inbox(id).await.expect("inbox").is_empty());
    assert_eq!(
        store.find("order:1").await.expect("find"),
        None,
        "the key is free"
    );
    assert_eq!(
        complete(store, &[outcome(&claimed, done())], at(3)).await,
        vec![Committed::Stale],
        "the cancelled step's outcome does not commit"
    );
    let record = get(store, id).await;
    assert_eq!((record.status, record.result), (Status::Failed, None));
    assert_eq!(
        store
            .heartbeat(&[super::lease(&claimed)], at(90_000))
            .await
            .expect("heartbeat"),
        0
    );
    assert_eq!(
        store
            .cancel(&Target::Id(id), "again", at(4))
            .await
            .expect("cancel"),
        CancelOutcome::Ended {
            id,
            status: Status::Failed
        }
    );
    assert_eq!(
        store
            .cancel(&Target::Id(InstanceId::new(id.get() + 1000)), "x", at(4))
            .await
            .expect("cancel"),
        CancelOutcome::NotFound
    );
    assert_eq!(
        store
            .cancel(&Target::from("order:1"), "x", at(4))
            .await
            .expect("cancel"),
        CancelOutcome::NotFound
    );
    assert!(
        store
            .signal(&Target::Id(id), &super::signal("late", None), at(5))
            .await
            .expect("signal")
            .is_none(),
        "a cancelled instance takes no signals"
    );
}

/// A parent awaiting its children: cancelling one child counts as a failed child (the parent
/// is released once the last ends); cancelling the parent ends its live children too.
pub async fn cancel_handles_parents_and_children<S: FsmStore + ?Sized>(store: &S) {
    let parent = insert_one(store, row(None)).await;
    let claimed = claim(store, parent, at(0)).await;
    let spawn = Transition::ScheduleChildren {
        step: "joined".to_owned(),
        state: "{}".to_owned(),
        children: vec![row(None), row(None)],
    };
    commit_one(store, outcome(&claimed, spawn), at(1)).await;
    let children: Vec<InstanceId> = store
        .list(&crate::fsm::ListFilter::default())
        .await
        .expect("list")
        .iter()
        .filter(|record| record.parent_id == Some(parent))
        .map(|record| record.id)
        .collect();
    assert_eq!(children.len(), 2);

    assert_eq!(
        cancelled(
            store
                .cancel(&Target::Id(children[0]), "no", at(2))
                .await
                .expect("cancel")
        ),
        (children[0], 1)
    );
    let record = get(store, parent).await;
    assert_eq!(
        (record.status, record.children_pending),
        (Status::AwaitingChildren, 1),
        "one child left"
    );
    // The other child ends: the barrier is released.
    let child = claim(store, children[1], at(3)).await;
    commit_one(store, outcome(&child, done()), at(4)).await;
    assert_eq!(get(store, parent).await.status, Status::Runnable);

    // A second family: cancelling the parent ends its live children.
    let parent = insert_one(store, row(None)).await;
    let mut picked: Vec<Claimed> = pick(store, 10, at(10)).await;
    picked.retain(|claim| claim.id == parent);
    let spawn = Transition::ScheduleChildren {
        step: "joined".to_owned(),
        state: "{}".to_owned(),
        children: vec![row(None), row(None)],
    };
    commit_one(store, outcome(&picked[0], spawn), at(11)).await;
    let (id, instances) = cancelled(
        store
            .cancel(&Target::Id(parent), "cancelled", at(12))
            .await
            .expect("cancel"),
    );
    assert_eq!(
        (id, instances),
        (parent, 3),
        "the parent and its two children"
    );
    for record in store
        .list(&crate::fsm::ListFilter::default())
        .await
        .expect("list")
        .iter()
        .filter(|record| record.id == parent || record.parent_id == Some(parent))
    {
        assert_eq!(record.status, Status::Failed, "{}", record.id);
        assert_eq!(record.last_error.as_deref(), Some("cancelled"));
    }
}

/// A cancel racing an executing step's outcome: exactly one wins. Either the outcome
/// applied and the cancel finds the instance ended, or the cancel applied and the outcome is
/// stale; never both, never neither.
pub async fn cancel_races_an_outcome<S: FsmStore + ?Sized>(store: &S) {
    for round in 0..10 {
        let id = insert_one(store, row(None)).await;
        let claimed = claim(store, id, at(round)).await;
        let commits = [outcome(&claimed, done())];
        let target = Target::Id(id);
        let (committed, cancel) = tokio::join!(
            store.complete(&commits, at(round + 1)),
            store.cancel(&target, "cancelled", at(round + 1)),
        );
        let committed = committed.expect("complete");
        let record = get(store, id).await;
        match cancel.expect("cancel") {
            CancelOutcome::Cancelled { .. } => {
                assert_eq!(committed, vec![Committed::Stale], "round {round}");
                assert_eq!(record.status, Status::Failed);
            }
            CancelOutcome::Ended { status, .. } => {
                assert_eq!(committed, vec![Committed::Applied], "round {round}");
                assert_eq!((status, record.status), (Status::Done, Status::Done));
            }
            CancelOutcome::NotFound => panic!("round {round}: the instance vanished"),
        }
    }
}
