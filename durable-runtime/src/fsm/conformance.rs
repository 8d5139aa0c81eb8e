//! The FSM store conformance suite (features `fsm` and `conformance`): one set of checks
//! every [`FsmStore`] must pass, one per rule of the specification the store keeps.
//!
//! Each check is a `pub async fn` taking a fresh, empty store and panicking with a message
//! when the store breaks a rule. [`fsm_conformance_tests!`](crate::fsm_conformance_tests)
//! declares one `#[tokio::test]` per check; [`run_all`] runs them in turn.
//!
//! # Examples
//!
//! ```
//! use durable_runtime::fsm::MemoryFsmStore;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! durable_runtime::fsm::conformance::run_all(|| async { MemoryFsmStore::new() }).await;
//! # }
//! ```
//!
//! In a test file, one test per check (the closure gets the check's name and returns a
//! fixture, or `None` to skip):
//!
//! ```
//! # mod tests {
//! use durable_runtime::fsm::MemoryFsmStore;
//!
//! durable_runtime::fsm_conformance_tests!(|_case| async { Some(MemoryFsmStore::new()) });
//! # }
//! # fn main() {}
//! ```

mod concurrency;
mod controls;
mod listing;

pub use concurrency::{
    concurrency_key_one_at_a_time, concurrency_limit_two, concurrent_pickers_respect_limits,
    key_order_follows_priority_then_eligibility, released_slot_runs_the_next_in_line,
    saturated_keys_are_passed_over,
};
pub use controls::{
    cancel_fences_the_executing_outcome, cancel_handles_parents_and_children,
    cancel_races_an_outcome, concurrent_pickers_share_a_rate_limit, paused_queue_is_not_picked,
    rate_limit_caps_claims, rate_limit_refills,
};
pub use listing::{list_filters_by_name_and_status, list_pages_by_keyset};

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::status::{InstanceId, Status};
use super::store::{
    Claimed, Committed, FsmStore, InstanceRecord, Lease, NewInstance, NewSignal, OutcomeCommit,
    Target, Transition,
};
use crate::storage::truncate_to_micros;

/// What a test setup hands to the checks: a store, plus whatever must live as long as it.
/// Every [`FsmStore`] is a fixture of itself.
pub trait FsmFixture {
    /// The store under test.
    type Store: FsmStore + ?Sized;

    /// The store under test.
    fn store(&self) -> &Self::Store;
}

impl<S: FsmStore> FsmFixture for S {
    type Store = S;

    fn store(&self) -> &S {
        self
    }
}

/// Declares one `#[tokio::test]` per FSM store check in the calling module. The argument
/// takes the check's name and returns a future of `Option<F>` where `F:`
/// [`FsmFixture`]: a fresh, empty store, or `None` to skip the test.
#[macro_export]
macro_rules! fsm_conformance_tests {
    ($setup:expr $(,)?) => {
        $crate::__fsm_conformance_cases!(__fsm_conformance_test_fns { $setup });
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __fsm_conformance_test_fns {
    ({ $setup:expr } $($case:ident)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let Some(fixture) = ($setup)(stringify!($case)).await else {
                    return;
                };
                $crate::fsm::conformance::$case(
                    $crate::fsm::conformance::FsmFixture::store(&fixture),
                )
                .await;
            }
        )*
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __fsm_conformance_run_all {
    ({ $make:ident } $($case:ident)*) => {
        $(
            $crate::conformance::__run_case(stringify!($case), async {
                let store = $make().await;
                $crate::fsm::conformance::$case(&store).await;
            })
            .await;
        )*
    };
}

/// The list of checks, in one place.
#[doc(hidden)]
#[macro_export]
macro_rules! __fsm_conformance_cases {
    ($callback:ident { $($args:tt)* }) => {
        $crate::$callback! {
            { $($args)* }
            insert_then_get
            insert_skips_occupied_keys
            key_is_freed_by_termination_unless_scoped
            empty_scope_is_no_guard
            pick_orders_by_priority_then_eligibility
            pick_marks_executing_with_fresh_token
            concurrent_pickers_are_disjoint
            heartbeat_extends_held_leases_only
            reaper_returns_expired_leases_with_attempt
            stale_outcome_changes_nothing
            next_consumes_exactly_received
            retry_keeps_awaits_and_inbox
            await_parks_or_wakes_on_unseen_match
            signal_wakes_matching_await_only
            signal_dedup_key
            signal_without_target
            signal_by_correlation_key
            terminal_outcomes_clear_inbox
            schedule_children_counts_inserted
            schedule_no_children_runs_at_once
            children_join_releases_barrier
            sibling_joins_in_one_batch
            await_deadline_sweep
            gc_spares_children_of_live_parents
            concurrent_signal_and_park_lose_no_wakeup
            times_round_trip
            concurrency_key_one_at_a_time
            concurrency_limit_two
            saturated_keys_are_passed_over
            released_slot_runs_the_next_in_line
            key_order_follows_priority_then_eligibility
            concurrent_pickers_respect_limits
            list_filters_by_name_and_status
            list_pages_by_keyset
            rate_limit_caps_claims
            rate_limit_refills
            concurrent_pickers_share_a_rate_limit
            paused_queue_is_not_picked
            cancel_fences_the_executing_outcome
            cancel_handles_parents_and_children
            cancel_races_an_outcome
        }
    };
}

/// Runs every check, each on a new store from `make`.
pub async fn run_all<S, F, Fut>(make: F)
where
    S: FsmStore,
    F: Fn() -> Fut,
    Fut: Future<Output = S>,
{
    __fsm_conformance_cases!(__fsm_conformance_run_all { make });
}

/// A fixed instant plus `offset_ms`, with an odd microsecond part so that truncation shows.
fn at(offset_ms: i64) -> SystemTime {
    const BASE_MICROS: i64 = 1_700_000_000_123_457;
    let micros = BASE_MICROS + offset_ms * 1000;
    truncate_to_micros(UNIX_EPOCH + Duration::from_micros(micros as u64))
}

const FSM: &str = "conformance";
const QUEUE: &str = "q";

fn row(key: Option<&str>) -> NewInstance {
    NewInstance {
        fsm: FSM.to_owned(),
        fsm_version: 1,
        step: "start".to_owned(),
        state: r#"{"n":1}"#.to_owned(),
        queue: QUEUE.to_owned(),
        priority: 0,
        eligible_at: at(0),
        correlation_key: key.map(str::to_owned),
        correlation_scope: Status::LIVE.to_vec(),
        concurrency_key: None,
        concurrency_limit: 1,
        rate_limit_key: None,
        rate_limit_units: 1,
    }
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("stored JSON {text:?} is invalid: {e}"))
}

async fn insert<S: FsmStore + ?Sized>(store: &S, rows: &[NewInstance]) -> Vec<InstanceId> {
    store.insert(rows, at(0)).await.expect("insert")
}

async fn insert_one<S: FsmStore + ?Sized>(store: &S, row: NewInstance) -> InstanceId {
    let ids = insert(store, &[row]).await;
    assert_eq!(ids.len(), 1, "a row with a free key is inserted");
    ids[0]
}

async fn get<S: FsmStore + ?Sized>(store: &S, id: InstanceId) -> InstanceRecord {
    store
        .get(id)
        .await
        .expect("get")
        .unwrap_or_else(|| panic!("instance {id} is missing"))
}

async fn pick<S: FsmStore + ?Sized>(store: &S, limit: usize, now: SystemTime) -> Vec<Claimed> {
    store
        .pick(
            QUEUE,
            "worker-a",
            now,
            now + Duration::from_secs(60),
            limit,
            now,
        )
        .await
        .expect("pick")
}

/// Picks exactly `id` (the only runnable row).
async fn claim<S: FsmStore + ?Sized>(store: &S, id: InstanceId, now: SystemTime) -> Claimed {
    let mut claimed = pick(store, 10, now).await;
    assert_eq!(claimed.len(), 1, "one runnable row is picked");
    let claimed = claimed.remove(0);
    assert_eq!(claimed.id, id, "the runnable row is picked");
    claimed
}

fn lease(claimed: &Claimed) -> Lease {
    Lease {
        id: claimed.id,
        token: claimed.token,
    }
}

fn outcome(claimed: &Claimed, transition: Transition) -> OutcomeCommit {
    OutcomeCommit {
        lease: lease(claimed),
        received: Vec::new(),
        transition,
    }
}

async fn complete<S: FsmStore + ?Sized>(
    store: &S,
    commits: &[OutcomeCommit],
    now: SystemTime,
) -> Vec<Committed> {
    store.complete(commits, now).await.expect("complete")
}

async fn commit_one<S: FsmStore + ?Sized>(store: &S, commit: OutcomeCommit, now: SystemTime) {
    assert_eq!(
        complete(store, &[commit], now).await,
        vec![Committed::Applied],
        "an outcome under a held claim applies"
    );
}

fn next(step: &str, state: &str) -> Transition {
    Transition::Next {
        step: step.to_owned(),
        state: state.to_owned(),
    }
}

fn await_(names: &[&str], deadline: Option<SystemTime>) -> Transition {
    Transition::Await {
        step: "woken".to_owned(),
        state: r#"{"n":2}"#.to_owned(),
        names: names.iter().map(|name| (*name).to_owned()).collect(),
        deadline,
    }
}

fn done() -> Transition {
    Transition::Done {
        result: r#"{"ok":true}"#.to_owned(),
    }
}

fn signal(name: &str, dedup: Option<&str>) -> NewSignal {
    NewSignal {
        name: name.to_owned(),
        payload: r#"{"p":1}"#.to_owned(),
        dedup_key: dedup.map(str::to_owned),
    }
}

async fn send<S: FsmStore + ?Sized>(
    store: &S,
    target: impl Into<Target>,
    name: &str,
) -> super::store::Delivered {
    store
        .signal(&target.into(), &signal(name, None), at(1))
        .await
        .expect("signal")
        .expect("the target is live")
}

/// An instance parked on `names` (inserted, picked, awaited), with nothing in its inbox.
async fn parked<S: FsmStore + ?Sized>(store: &S, names: &[&str]) -> InstanceId {
    let id = insert_one(store, row(None)).await;
    let claimed = claim(store, id, at(0)).await;
    commit_one(store, outcome(&claimed, await_(names, None)), at(0)).await;
    assert_eq!(get(store, id).await.status, Status::AwaitingSignal);
    id
}

/// Inserted rows read back with every field as given, runnable, attempt 0.
pub async fn insert_then_get<S: FsmStore + ?Sized>(store: &S) {
    let mut new = row(Some("k1"));
    new.priority = -3;
    new.queue = QUEUE.to_owned();
    new.fsm_version = 7;
    let id = insert_one(store, new).await;
    let record = get(store, id).await;
    assert_eq!(record.id, id);
    assert_eq!(
        (
            record.fsm.as_str(),
            record.fsm_version,
            record.step.as_str()
        ),
        (FSM, 7, "start")
    );
    assert_eq!(json(&record.state), json(r#"{"n":1}"#));
    assert_eq!(record.status, Status::Runnable);
    assert_eq!((record.priority, record.attempt), (-3, 0));
    assert_eq!(record.correlation_key.as_deref(), Some("k1"));
    assert_eq!(record.correlation_scope, Status::LIVE.to_vec());
    assert_eq!((record.parent_id, record.children_pending), (None, 0));
    assert_eq!(
        (record.result, record.awaits, record.last_error),
        (None, None, None)
    );
    assert!(
        store
            .get(InstanceId::new(id.get() + 1000))
            .await
            .expect("get")
            .is_none()
    );
}

/// A key occupied by a stored row or by an earlier row of the same batch skips the row; rows
/// without a key never conflict.
pub async fn insert_skips_occupied_keys<S: FsmStore + ?Sized>(store: &S) {
    let first = insert_one(store, row(Some("a"))).await;
    let ids = insert(
        store,
        &[
            row(Some("b")),
            row(Some("a")),
            row(Some("b")),
            row(None),
            row(None),
            row(Some("c")),
        ],
    )
    .await;
    assert_eq!(ids.len(), 4, "b, c and two keyless rows: {ids:?}");
    assert_eq!(store.find("a").await.expect("find"), Some(first));
    let b = store.find("b").await.expect("find").expect("b is occupied");
    assert!(ids.contains(&b));
    assert_eq!(store.find("zzz").await.expect("find"), None);
}

/// The default scope frees a key when its instance ends; a scope holding the terminal
/// statuses keeps it reserved.
pub async fn key_is_freed_by_termination_unless_scoped<S: FsmStore + ?Sized>(store: &S) {
    let id = insert_one(store, row(Some("free"))).await;
    let claimed = claim(store, id, at(0)).await;
    commit_one(store, outcome(&claimed, done()), at(1)).await;
    assert_eq!(store.find("free").await.expect("find"), None);
    let again = insert_one(store, row(Some("free"))).await;
    assert_ne!(again, id);

    let mut reserved = row(Some("kept"));
    reserved.correlation_scope = Status::ALL.to_vec();
    reserved.queue = "other".to_owned();
    let kept = insert_one(store, reserved.clone()).await;
    let claimed = store
        .pick("other", "w", at(0), at(60_000), 1, at(0))
        .await
        .expect("pick")
        .remove(0);
    commit_one(store, outcome(&claimed, done()), at(1)).await;
    assert_eq!(store.find("kept").await.expect("find"), Some(kept));
    assert!(
        insert(store, &[reserved]).await.is_empty(),
        "a key reserved after the end refuses a new instance"
    );
}

/// An empty scope makes a key neither unique nor addressable.
pub async fn empty_scope_is_no_guard<S: FsmStore + ?Sized>(store: &S) {
    let mut open = row(Some("open"));
    open.correlation_scope = Vec::new();
    let ids = insert(store, &[open.clone(), open]).await;
    assert_eq!(ids.len(), 2);
    assert_eq!(store.find("open").await.expect("find"), None);
    let delivered = store
        .signal(&Target::Key("open".into()), &signal("x", None), at(1))
        .await
        .expect("signal");
    assert_eq!(delivered, None);
}

/// The pick takes the lowest priority first, then the earliest `eligible_at`, only rows of
/// its queue that are due, and at most `limit`.
pub async fn pick_orders_by_priority_then_eligibility<S: FsmStore + ?Sized>(store: &S) {
    let mut rows = Vec::new();
    for (priority, eligible_ms, queue) in [
        (5, 0, QUEUE),
        (0, 20, QUEUE),
        (0, 10, QUEUE),
        (-1, 30, QUEUE),
        (-9, 0, "elsewhere"),
        (-9, 5_000, QUEUE),
    ] {
        let mut new = row(None);
        new.priority = priority;
        new.eligible_at = at(eligible_ms);
        new.queue = queue.to_owned();
        new.state = format!(r#"{{"p":{priority},"e":{eligible_ms}}}"#);
        rows.push(new);
    }
    insert(store, &rows).await;
    let first = pick(store, 2, at(1_000)).await;
    let order: Vec<serde_json::Value> = first.iter().map(|c| json(&c.state)).collect();
    assert_eq!(
        order,
        vec![json(r#"{"p":-1,"e":30}"#), json(r#"{"p":0,"e":10}"#)]
    );
    let rest = pick(store, 10, at(1_000)).await;
    let order: Vec<serde_json::Value> = rest.iter().map(|c| json(&c.state)).collect();
    assert_eq!(
        order,
        vec![json(r#"{"p":0,"e":20}"#), json(r#"{"p":5,"e":0}"#)],
        "the row of another queue and the row not yet due are left"
    );
    assert_eq!(pick(store, 10, at(5_000)).await.len(), 1, "due at 5 s");
}

/// A picked row is executing, held by the worker with a lease and a token no earlier claim
/// of it had; it is not picked again while held.
pub async fn pick_marks_executing_with_fresh_token<S: FsmStore + ?Sized>(store: &S) {
    let id = insert_one(store, row(Some("t"))).await;
    let first = claim(store, id, at(0)).await;
    assert_eq!((first.step.as_str(), first.attempt), ("start", 0));
    assert_eq!(first.correlation_key.as_deref(), Some("t"));
    let record = get(store, id).await;
    assert_eq!(record.status, Status::Executing);
    assert_eq!(record.locked_by.as_deref(), Some("worker-a"));
    assert_eq!(record.lease_expires_at, Some(at(60_000)));
    assert!(
        pick(store, 10, at(0)).await.is_empty(),
        "a held row is not picked"
    );
    assert_eq!(
        store.find("t").await.expect("find"),
        Some(id),
        "executing occupies the key"
    );

    // Reaped, then claimed again: a new token.
    store.reap(at(61_000)).await.expect("reap");
    let second = claim(store, id, at(62_000)).await;
    assert_ne!(first.token, second.token, "each claim has its own token");
    assert_eq!(second.attempt, 1);
}

/// Two pickers at once claim disjoint rows.
pub async fn concurrent_pickers_are_disjoint<S: FsmStore + ?Sized>(store: &S) {
    let rows: Vec<NewInstance> = (0..40).map(|_| row(None)).collect();
    insert(store, &rows).await;
    let (a, b) = tokio::join!(pick(store, 25, at(0)), pick(store, 25, at(0)));
    let mut ids: Vec<InstanceId> = a.iter().chain(&b).map(|c| c.id).collect();
    assert_eq!(ids.len(), 40, "every row is picked once");
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 40, "no row is picked twice");
}

/// A heartbeat extends leases still held under their token, and no other.
pub async fn heartbeat_extends_held_leases_only<S: FsmStore + ?Sized>(store: &S) {
    let id = insert_one(store, row(None)).await;
    let claimed = claim(store, id, at(0)).await;
    let stale = Lease {
        id,
        token: claimed.token + 1000,
    };
    let extended = store
        .heartbeat(&[lease(&claimed), stale], at(120_000))
        .await
        .expect("heartbeat");
    assert_eq!(extended, 1);
    assert_eq!(get(store, id).await.lease_expires_at, Some(at(120_000)));
    assert_eq!(
        store.reap(at(90_000)).await.expect("reap").expired_leases,
        0
    );
}

/// The reaper returns rows whose lease ended to runnable with attempt + 1, and leaves live
/// leases alone.
pub async fn reaper_returns_expired_leases_with_attempt<S: FsmStore + ?Sized>(store: &S) {
    let id = insert_one(store, row(None)).await;
    claim(store, id, at(0)).await;
    assert_eq!(
        store.reap(at(60_000)).await.expect("reap").expired_leases,
        0,
        "not before the end"
    );
    let swept = store.reap(at(60_001)).await.expect("reap");
    assert_eq!(swept.expired_leases, 1);
    let record = get(store, id).await;
    assert_eq!((record.status, record.attempt), (Status::Runnable, 1));
    assert_eq!((record.locked_by, record.lease_expires_at), (None, None));
    assert_eq!(record.step, "start", "the same step runs again");
}

/// An outcome under a lost claim is stale: the row, its inbox, its parent and its would-be
/// children are untouched.
pub async fn stale_outcome_changes_nothing<S: FsmStore + ?Sized>(store: &S) {
    // A parent awaiting one child, the child's claim lost to the reaper.
    let parent = insert_one(store, row(None)).await;
    let claimed = claim(store, parent, at(0)).await;
    let mut child = row(Some("child"));
    child.queue = "children".to_owned();
    commit_one(
        store,
        outcome(
            &claimed,
            Transition::ScheduleChildren {
                step: "join".into(),
                state: "{}".into(),
                children: vec![child],
            },
        ),
        at(0),
    )
    .await;
    let child_claim = store
        .pick("children", "w", at(0), at(10), 1, at(0))
        .await
        .expect("pick")
        .remove(0);
    send(store, child_claim.id, "note").await;
    store.reap(at(11)).await.expect("reap");
    let before = get(store, child_claim.id).await;
    for transition in [
        done(),
        Transition::Stop {
            reason: "late".into(),
        },
        next("elsewhere", "{}"),
        await_(&["note"], None),
        Transition::ScheduleChildren {
            step: "x".into(),
            state: "{}".into(),
            children: vec![row(Some("grandchild"))],
        },
    ] {
        let result = complete(store, &[outcome(&child_claim, transition)], at(12)).await;
        assert_eq!(result, vec![Committed::Stale]);
    }
    let after = get(store, child_claim.id).await;
    assert_eq!(after, before, "a stale outcome changes nothing on the row");
    assert_eq!(store.inbox(child_claim.id).await.expect("inbox").len(), 1);
    let parent = get(store, parent).await;
    assert_eq!(
        (parent.status, parent.children_pending),
        (Status::AwaitingChildren, 1)
    );
    assert_eq!(
        store.find("grandchild").await.expect("find"),
        None,
        "spawns nothing"
    );
}

/// `next` moves on with attempt 0, drops the awaited names and deletes exactly the received
/// signals.
pub async fn next_consumes_exactly_received<S: FsmStore + ?Sized>(store: &S) {
    let id = parked(store, &["a", "b"]).await;
    send(store, id, "a").await;
    send(store, id, "b").await;
    send(store, id, "other").await;
    let claimed = claim(store, id, at(2)).await;
    assert_eq!(claimed.awaits, Some(vec!["a".to_owned(), "b".to_owned()]));
    assert_eq!(claimed.inbox.len(), 3);
    let a = claimed.inbox.iter().find(|s| s.name == "a").expect("a").id;
    let mut commit = outcome(&claimed, next("after", r#"{"n":3}"#));
    commit.received = vec![a];
    commit_one(store, commit, at(3)).await;
    let record = get(store, id).await;
    assert_eq!(
        (record.status, record.step.as_str()),
        (Status::Runnable, "after")
    );
    assert_eq!((record.attempt, record.awaits), (0, None));
    assert_eq!(record.eligible_at, at(3));
    assert_eq!(json(&record.state), json(r#"{"n":3}"#));
    let names: Vec<String> = store
        .inbox(id)
        .await
        .expect("inbox")
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, vec!["b".to_owned(), "other".to_owned()]);
}

/// `retry` runs the same step again at the given time with attempt + 1, keeping the awaited
/// names and the inbox.
pub async fn retry_keeps_awaits_and_inbox<S: FsmStore + ?Sized>(store: &S) {
    let id = parked(store, &["go"]).await;
    send(store, id, "go").await;
    let claimed = claim(store, id, at(2)).await;
    let mut commit = outcome(
        &claimed,
        Transition::Retry {
            state: r#"{"n":9}"#.into(),
            eligible_at: at(5_000),
        },
    );
    commit.received = claimed.inbox.iter().map(|s| s.id).collect();
    commit_one(store, commit, at(3)).await;
    let record = get(store, id).await;
    assert_eq!(
        (record.status, record.step.as_str()),
        (Status::Runnable, "woken")
    );
    assert_eq!((record.attempt, record.eligible_at), (1, at(5_000)));
    assert_eq!(record.awaits, Some(vec!["go".to_owned()]));
    assert_eq!(store.inbox(id).await.expect("inbox").len(), 1);
    assert!(
        pick(store, 1, at(4_999)).await.is_empty(),
        "not before its time"
    );
    let again = claim(store, id, at(5_000)).await;
    assert_eq!((again.attempt, again.inbox.len()), (1, 1));
}

/// `await` parks on its names, unless a matching signal the step was not handed is already
/// in the inbox: then it is runnable at once (no lost wake-up). Signals the step was handed
/// do not count (re-awaiting them parks, no busy loop).
pub async fn await_parks_or_wakes_on_unseen_match<S: FsmStore + ?Sized>(store: &S) {
    // Already there before the park: runnable at once.
    let id = insert_one(store, row(None)).await;
    let claimed = claim(store, id, at(0)).await;
    send(store, id, "early").await;
    commit_one(store, outcome(&claimed, await_(&["early"], None)), at(1)).await;
    let record = get(store, id).await;
    assert_eq!(
        (record.status, record.step.as_str()),
        (Status::Runnable, "woken")
    );

    // Re-awaiting a signal already handed to the step parks.
    let claimed = claim(store, id, at(2)).await;
    let mut commit = outcome(&claimed, await_(&["early", "late"], None));
    commit.received = claimed.inbox.iter().map(|s| s.id).collect();
    commit_one(store, commit, at(3)).await;
    let record = get(store, id).await;
    assert_eq!(record.status, Status::AwaitingSignal);
    assert_eq!(
        record.awaits,
        Some(vec!["early".to_owned(), "late".to_owned()])
    );
    assert_eq!(
        store.inbox(id).await.expect("inbox").len(),
        1,
        "await consumes nothing"
    );

    // The rest of the pack arrives: woken, with both.
    assert!(send(store, id, "late").await.woke);
    let claimed = claim(store, id, at(4)).await;
    assert_eq!(claimed.inbox.len(), 2);
}

/// A signal flips an instance awaiting its name to runnable, keeping the awaited names; any
/// other name is stored without waking it.
pub async fn signal_wakes_matching_await_only<S: FsmStore + ?Sized>(store: &S) {
    let id = parked(store, &["paid", "cancelled"]).await;
    let other = send(store, id, "unrelated").await;
    assert!(!other.woke);
    assert_eq!(get(store, id).await.status, Status::AwaitingSignal);
    let paid = send(store, id, "paid").await;
    assert!(paid.woke);
    assert_eq!(paid.target, id);
    let record = get(store, id).await;
    assert_eq!(
        (record.status, record.eligible_at),
        (Status::Runnable, at(1))
    );
    assert_eq!(
        record.awaits,
        Some(vec!["paid".to_owned(), "cancelled".to_owned()])
    );
    let inbox = store.inbox(id).await.expect("inbox");
    assert_eq!(inbox.len(), 2);
    assert_eq!(json(&inbox[1].payload), json(r#"{"p":1}"#));
    assert_eq!(inbox[1].inserted_at, at(1));
    let second = send(store, id, "paid").await;
    assert!(!second.woke, "already runnable");
}

/// A deduplication key is delivered once per instance while in the inbox; signals without
/// one are all kept.
pub async fn signal_dedup_key<S: FsmStore + ?Sized>(store: &S) {
    let id = insert_one(store, row(None)).await;
    let target = Target::Id(id);
    let first = store
        .signal(&target, &signal("evt", Some("d1")), at(1))
        .await
        .expect("signal")
        .expect("live");
    let again = store
        .signal(&target, &signal("evt", Some("d1")), at(2))
        .await
        .expect("signal")
        .expect("live");
    assert!(first.signal.is_some());
    assert_eq!(again.signal, None, "the same dedup key adds nothing");
    for _ in 0..2 {
        store
            .signal(&target, &signal("evt", None), at(3))
            .await
            .expect("signal");
    }
    let inbox = store.inbox(id).await.expect("inbox");
    assert_eq!(inbox.len(), 3);
    assert_eq!(inbox[0].dedup_key.as_deref(), Some("d1"));
}

/// No live target (no such id, an ended instance, an unoccupied key): nothing is stored.
pub async fn signal_without_target<S: FsmStore + ?Sized>(store: &S) {
    let id = insert_one(store, row(Some("ending"))).await;
    let missing = InstanceId::new(id.get() + 1000);
    assert_eq!(
        store
            .signal(&Target::Id(missing), &signal("x", None), at(1))
            .await
            .expect("signal"),
        None
    );
    assert_eq!(
        store
            .signal(&Target::Key("nobody".into()), &signal("x", None), at(1))
            .await
            .expect("signal"),
        None
    );
    let claimed = claim(store, id, at(0)).await;
    commit_one(store, outcome(&claimed, done()), at(1)).await;
    for target in [Target::Id(id), Target::Key("ending".into())] {
        assert_eq!(
            store
                .signal(&target, &signal("x", None), at(2))
                .await
                .expect("signal"),
            None,
            "{target:?} ended"
        );
    }
    assert!(store.inbox(id).await.expect("inbox").is_empty());
}

/// A signal by correlation key reaches the instance occupying it.
pub async fn signal_by_correlation_key<S: FsmStore + ?Sized>(store: &S) {
    let id = insert_one(store, row(Some("order:42"))).await;
    insert_one(store, row(Some("order:43"))).await;
    let claimed = claim_first(store, id).await;
    commit_one(store, outcome(&claimed, await_(&["paid"], None)), at(0)).await;
    let delivered = send(store, "order:42", "paid").await;
    assert_eq!(delivered.target, id);
    assert!(delivered.woke);
    assert_eq!(get(store, id).await.status, Status::Runnable);
}

/// Picks rows until `id` is claimed, releasing nothing (the others stay executing).
async fn claim_first<S: FsmStore + ?Sized>(store: &S, id: InstanceId) -> Claimed {
    pick(store, 10, at(0))
        .await
        .into_iter()
        .find(|claimed| claimed.id == id)
        .unwrap_or_else(|| panic!("{id} is picked"))
}

/// `done` records the result without rewriting the state and deletes the whole inbox; `stop`
/// records the error and deletes the inbox too.
pub async fn terminal_outcomes_clear_inbox<S: FsmStore + ?Sized>(store: &S) {
    let ids = insert(store, &[row(None), row(None)]).await;
    for id in &ids {
        send(store, *id, "leftover").await;
    }
    let claimed = pick(store, 2, at(0)).await;
    let by_id = |id: InstanceId| claimed.iter().find(|c| c.id == id).expect("picked");
    complete(
        store,
        &[
            OutcomeCommit {
                lease: lease(by_id(ids[0])),
                received: Vec::new(),
                transition: done(),
            },
            OutcomeCommit {
                lease: lease(by_id(ids[1])),
                received: Vec::new(),
                transition: Transition::Stop {
                    reason: "gave up".into(),
                },
            },
        ],
        at(1),
    )
    .await;
    let finished = get(store, ids[0]).await;
    assert_eq!(finished.status, Status::Done);
    assert_eq!(
        json(finished.result.as_deref().expect("result")),
        json(r#"{"ok":true}"#)
    );
    assert_eq!(
        json(&finished.state),
        json(r#"{"n":1}"#),
        "state not rewritten"
    );
    let failed = get(store, ids[1]).await;
    assert_eq!(failed.status, Status::Failed);
    assert_eq!(failed.last_error.as_deref(), Some("gave up"));
    for id in ids {
        assert!(store.inbox(id).await.expect("inbox").is_empty());
        assert_eq!(get(store, id).await.locked_by, None);
    }
}

/// `schedule_childs` inserts the children (parent set, keys checked) and parks the parent with
/// `children_pending` = children inserted; the received signals are consumed.
pub async fn schedule_children_counts_inserted<S: FsmStore + ?Sized>(store: &S) {
    insert_one(store, {
        let mut taken = row(Some("taken"));
        taken.queue = "busy".to_owned();
        taken
    })
    .await;
    let id = parked(store, &["go"]).await;
    send(store, id, "go").await;
    let claimed = claim(store, id, at(2)).await;
    let mut children: Vec<NewInstance> = ["c1", "taken", "c3"]
        .into_iter()
        .map(|key| {
            let mut child = row(Some(key));
            child.queue = "kids".to_owned();
            child
        })
        .collect();
    children.push({
        let mut keyless = row(None);
        keyless.queue = "kids".to_owned();
        keyless
    });
    let mut commit = outcome(
        &claimed,
        Transition::ScheduleChildren {
            step: "join".into(),
            state: r#"{"n":4}"#.into(),
            children,
        },
    );
    commit.received = claimed.inbox.iter().map(|s| s.id).collect();
    commit_one(store, commit, at(3)).await;
    let parent = get(store, id).await;
    assert_eq!(
        (parent.status, parent.step.as_str(), parent.children_pending),
        (Status::AwaitingChildren, "join", 3)
    );
    assert_eq!((parent.attempt, parent.awaits), (0, None));
    assert!(
        store.inbox(id).await.expect("inbox").is_empty(),
        "received consumed"
    );
    let kids = store
        .pick("kids", "w", at(3), at(100), 10, at(3))
        .await
        .expect("pick");
    assert_eq!(kids.len(), 3);
    for kid in &kids {
        assert_eq!(get(store, kid.id).await.parent_id, Some(id));
    }
}

/// Zero children inserted: the barrier is already released, the parent runnable at its next
/// step.
pub async fn schedule_no_children_runs_at_once<S: FsmStore + ?Sized>(store: &S) {
    let id = insert_one(store, row(None)).await;
    let claimed = claim(store, id, at(0)).await;
    commit_one(
        store,
        outcome(
            &claimed,
            Transition::ScheduleChildren {
                step: "join".into(),
                state: "{}".into(),
                children: Vec::new(),
            },
        ),
        at(1),
    )
    .await;
    let record = get(store, id).await;
    assert_eq!(
        (record.status, record.step.as_str(), record.children_pending),
        (Status::Runnable, "join", 0)
    );
}

/// Each child's terminal commit decrements its parent; the last one releases it (runnable
/// at its next step), and the parent's step sees every child with its status and result.
pub async fn children_join_releases_barrier<S: FsmStore + ?Sized>(store: &S) {
    let id = insert_one(store, row(None)).await;
    let claimed = claim(store, id, at(0)).await;
    let kids: Vec<NewInstance> = (0..3)
        .map(|_| {
            let mut child = row(None);
            child.queue = "kids".to_owned();
            child
        })
        .collect();
    commit_one(
        store,
        outcome(
            &claimed,
            Transition::ScheduleChildren {
                step: "join".into(),
                state: "{}".into(),
                children: kids,
            },
        ),
        at(0),
    )
    .await;
    let kids = store
        .pick("kids", "w", at(0), at(100), 10, at(0))
        .await
        .expect("pick");
    assert_eq!(kids.len(), 3);
    // One child moves on (no join), one is done, one fails.
    commit_one(store, outcome(&kids[0], next("more", "{}")), at(1)).await;
    commit_one(store, outcome(&kids[1], done()), at(2)).await;
    assert_eq!(get(store, id).await.children_pending, 2);
    commit_one(
        store,
        outcome(
            &kids[2],
            Transition::Stop {
                reason: "boom".into(),
            },
        ),
        at(3),
    )
    .await;
    let parent = get(store, id).await;
    assert_eq!(
        (parent.status, parent.children_pending),
        (Status::AwaitingChildren, 1)
    );
    let last = store
        .pick("kids", "w", at(4), at(100), 10, at(4))
        .await
        .expect("pick")
        .remove(0);
    commit_one(store, outcome(&last, done()), at(5)).await;
    let parent = get(store, id).await;
    assert_eq!(
        (parent.status, parent.children_pending, parent.eligible_at),
        (Status::Runnable, 0, at(5))
    );
    let claimed = claim(store, id, at(6)).await;
    assert_eq!(claimed.step, "join");
    let mut statuses: Vec<Status> = claimed.children.iter().map(|c| c.status).collect();
    statuses.sort();
    assert_eq!(statuses, vec![Status::Done, Status::Done, Status::Failed]);
    let failed = claimed
        .children
        .iter()
        .find(|c| c.status == Status::Failed)
        .expect("failed child");
    assert_eq!(failed.last_error.as_deref(), Some("boom"));
    let done_child = claimed
        .children
        .iter()
        .find(|c| c.status == Status::Done)
        .expect("done child");
    assert_eq!(
        json(done_child.result.as_deref().expect("result")),
        json(r#"{"ok":true}"#)
    );
}

/// Siblings ending in one batch decrement their parent by the right total and release it.
pub async fn sibling_joins_in_one_batch<S: FsmStore + ?Sized>(store: &S) {
    let id = insert_one(store, row(None)).await;
    let claimed = claim(store, id, at(0)).await;
    let kids: Vec<NewInstance> = (0..4)
        .map(|_| {
            let mut child = row(None);
            child.queue = "kids".to_owned();
            child
        })
        .collect();
    commit_one(
        store,
        outcome(
            &claimed,
            Transition::ScheduleChildren {
                step: "join".into(),
                state: "{}".into(),
                children: kids,
            },
        ),
        at(0),
    )
    .await;
    let kids = store
        .pick("kids", "w", at(0), at(100), 10, at(0))
        .await
        .expect("pick");
    let commits: Vec<OutcomeCommit> = kids.iter().map(|kid| outcome(kid, done())).collect();
    assert_eq!(
        complete(store, &commits, at(1)).await,
        vec![Committed::Applied; 4]
    );
    let parent = get(store, id).await;
    assert_eq!(
        (parent.status, parent.children_pending),
        (Status::Runnable, 0)
    );
}

/// An await with a deadline is woken by the sweep once the deadline has come, at its next
/// step with its awaited names kept; a signal before the deadline wins.
pub async fn await_deadline_sweep<S: FsmStore + ?Sized>(store: &S) {
    let ids = insert(store, &[row(None), row(None)]).await;
    let claimed = pick(store, 2, at(0)).await;
    let commits: Vec<OutcomeCommit> = claimed
        .iter()
        .map(|c| outcome(c, await_(&["go"], Some(at(10_000)))))
        .collect();
    complete(store, &commits, at(0)).await;
    assert_eq!(get(store, ids[0]).await.await_deadline, Some(at(10_000)));
    assert!(send(store, ids[1], "go").await.woke);
    assert_eq!(store.reap(at(9_999)).await.expect("reap").await_timeouts, 0);
    let swept = store.reap(at(10_000)).await.expect("reap");
    assert_eq!(
        swept.await_timeouts, 1,
        "the signalled one is not timed out"
    );
    let record = get(store, ids[0]).await;
    assert_eq!(
        (record.status, record.step.as_str()),
        (Status::Runnable, "woken")
    );
    assert_eq!(record.awaits, Some(vec!["go".to_owned()]));
    assert_eq!(record.eligible_at, at(10_000));
    assert_eq!(record.await_deadline, None);
    assert_eq!(
        store.reap(at(20_000)).await.expect("reap").await_timeouts,
        0
    );
}

/// GC deletes ended rows older than the cutoff, up to the limit, keeping live and recent rows
/// and the ended children of a parent that has not ended.
pub async fn gc_spares_children_of_live_parents<S: FsmStore + ?Sized>(store: &S) {
    // Three old ended rows, one recent, one live.
    let ids = insert(
        store,
        &[row(None), row(None), row(None), row(None), row(None)],
    )
    .await;
    let claimed = pick(store, 5, at(0)).await;
    for (index, claimed) in claimed.iter().take(4).enumerate() {
        let when = if index == 3 { at(50_000) } else { at(1_000) };
        commit_one(store, outcome(claimed, done()), when).await;
    }
    // A parent still joining on two children that ended long ago (one still pending).
    let parent = insert_one(store, {
        let mut parent = row(None);
        parent.queue = "parents".to_owned();
        parent
    })
    .await;
    let parent_claim = store
        .pick("parents", "w", at(0), at(100), 1, at(0))
        .await
        .expect("pick")
        .remove(0);
    let kids: Vec<NewInstance> = (0..2)
        .map(|_| {
            let mut child = row(None);
            child.queue = "kids".to_owned();
            child
        })
        .collect();
    commit_one(
        store,
        outcome(
            &parent_claim,
            Transition::ScheduleChildren {
                step: "join".into(),
                state: "{}".into(),
                children: kids,
            },
        ),
        at(0),
    )
    .await;
    let kid = store
        .pick("kids", "w", at(0), at(100), 1, at(0))
        .await
        .expect("pick")
        .remove(0);
    commit_one(store, outcome(&kid, done()), at(1_000)).await;

    assert_eq!(
        store.gc(at(10_000), 2).await.expect("gc"),
        2,
        "the limit holds"
    );
    assert_eq!(store.gc(at(10_000), 100).await.expect("gc"), 1);
    assert_eq!(store.gc(at(10_000), 100).await.expect("gc"), 0);
    let mut left = 0;
    for id in ids.iter().copied().chain([parent, kid.id]) {
        if store.get(id).await.expect("get").is_some() {
            left += 1;
        }
    }
    assert_eq!(left, 4, "recent, live, parent and its ended child are kept");
}

/// Signals delivered while the instance parks on their name, in every interleaving the two
/// connections produce, leave it runnable or with no matching signal in its inbox.
pub async fn concurrent_signal_and_park_lose_no_wakeup<S: FsmStore + ?Sized>(store: &S) {
    const ROUNDS: usize = 40;
    let rows: Vec<NewInstance> = (0..ROUNDS).map(|_| row(None)).collect();
    insert(store, &rows).await;
    let claimed = pick(store, ROUNDS, at(0)).await;
    assert_eq!(claimed.len(), ROUNDS);
    for (round, claimed) in claimed.iter().enumerate() {
        let commits = [outcome(claimed, await_(&["go"], None))];
        let park = store.complete(&commits, at(1));
        let target = Target::Id(claimed.id);
        let go = signal("go", None);
        let deliver = store.signal(&target, &go, at(1));
        if round % 2 == 0 {
            let (parked, delivered) = tokio::join!(park, deliver);
            parked.expect("park");
            delivered.expect("signal").expect("live");
        } else {
            let (delivered, parked) = tokio::join!(deliver, park);
            parked.expect("park");
            delivered.expect("signal").expect("live");
        }
        let record = get(store, claimed.id).await;
        assert_eq!(
            record.status,
            Status::Runnable,
            "round {round}: a signal in the inbox and the instance parked on its name"
        );
    }
}

/// Times come back exactly as written (microseconds).
pub async fn times_round_trip<S: FsmStore + ?Sized>(store: &S) {
    let mut new = row(None);
    new.eligible_at = at(123);
    let id = insert_one(store, new).await;
    let record = get(store, id).await;
    assert_eq!(record.eligible_at, at(123));
    assert_eq!(record.inserted_at, at(0));
    let claimed = claim(store, id, at(456)).await;
    commit_one(
        store,
        outcome(&claimed, await_(&["x"], Some(at(789)))),
        at(500),
    )
    .await;
    let record = get(store, id).await;
    assert_eq!(record.updated_at, at(500));
    assert_eq!(record.await_deadline, Some(at(789)));
}
