//! Calls with an idempotency key: the reply is stored with the call's commit and a call with
//! the same key is answered from it without running the handler, also from a new runtime on the
//! same database (a restart) and from another runtime on it; a key reused by a different call
//! is refused; a failed commit stores nothing; expired keys are swept.
//!
//! Storage scenarios run on memory, SQLite and Postgres (skipped without `DATABASE_URL`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use durable_runtime::storage::{ObjectKey, Storage};
use durable_runtime::testing::FaultyStorage;
use durable_runtime::{
    CallByNameError, CallOptions, Context, Error, MemoryStorage, Runtime, durable_object,
};
use durable_tests::Backend;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Handler runs per object id, across every runtime of the test process (tests run in
/// parallel, each on ids of its own).
static RUNS: Mutex<BTreeMap<String, usize>> = Mutex::new(BTreeMap::new());

fn ran(ctx: &Context) {
    *RUNS.lock().unwrap().entry(ctx.id().to_owned()).or_default() += 1;
}

/// How many handler runs the objects `ids` saw.
fn runs_of(ids: &[&str]) -> usize {
    let runs = RUNS.lock().unwrap();
    ids.iter()
        .map(|id| runs.get(*id).copied().unwrap_or(0))
        .sum()
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub enum LedgerError {
    Insufficient { balance: i64 },
}

impl std::fmt::Display for LedgerError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?}")
    }
}

#[durable_object]
pub struct Ledger {
    balance: i64,
}

#[durable_object(expose)]
impl Ledger {
    #[handler]
    fn handle_deposit(&mut self, ctx: &Context, amount: i64) -> i64 {
        ran(ctx);
        self.balance += amount;
        self.balance
    }

    #[handler]
    fn handle_withdraw(&mut self, ctx: &Context, amount: i64) -> Result<i64, LedgerError> {
        ran(ctx);
        if amount > self.balance {
            return Err(LedgerError::Insufficient {
                balance: self.balance,
            });
        }
        self.balance -= amount;
        Ok(self.balance)
    }

    #[handler]
    fn handle_balance(&self, ctx: &Context) -> i64 {
        ran(ctx);
        self.balance
    }
}

/// A unique object id per scenario and backend.
fn id(name: &str) -> String {
    format!("{name}-{}", durable_tests::unique_prefix())
}

async fn backends() -> Vec<Backend> {
    let mut backends = vec![durable_tests::memory().await, durable_tests::sqlite().await];
    backends.extend(durable_tests::postgres().await);
    backends
}

#[tokio::test]
async fn replay_returns_the_stored_reply_without_running_the_handler() {
    for backend in backends().await {
        let rt = Runtime::new(Arc::clone(&backend.store));
        let a = id("replay");
        let caller = || Ledger::with(&rt).idempotency_key("dep-1");
        let before = runs_of(&[&a]);
        assert_eq!(caller().deposit(&a, 5).await.unwrap(), 5);
        assert_eq!(caller().deposit(&a, 5).await.unwrap(), 5);
        assert_eq!(
            runs_of(&[&a]) - before,
            1,
            "the retry was answered from the stored reply"
        );
        assert_eq!(
            Ledger::deposit(&rt, &a, 1).await.unwrap(),
            6,
            "deposited once"
        );

        // A handler error is a reply too: replayed, not run again.
        let before = runs_of(&[&a]);
        let withdraw = || async {
            Ledger::with(&rt)
                .idempotency_key("wd-1")
                .withdraw(&a, 100)
                .await
        };
        let first = withdraw().await.unwrap_err();
        let again = withdraw().await.unwrap_err();
        assert!(matches!(
            first,
            Error::Handler(LedgerError::Insufficient { balance: 6 })
        ));
        assert!(matches!(
            again,
            Error::Handler(LedgerError::Insufficient { balance: 6 })
        ));
        assert_eq!(runs_of(&[&a]) - before, 1);

        // A read-only handler's reply is stored as well.
        let before = runs_of(&[&a]);
        let read = || async {
            Ledger::with(&rt)
                .idempotency_key("read-1")
                .balance(&a)
                .await
        };
        assert_eq!(read().await.unwrap(), 6);
        Ledger::deposit(&rt, &a, 4).await.unwrap();
        assert_eq!(
            read().await.unwrap(),
            6,
            "the stored reply, not the current balance"
        );
        assert_eq!(runs_of(&[&a]) - before, 2, "one read and one deposit ran");

        // After a restart: a new runtime on the same database answers from storage.
        rt.shutdown().await;
        let again = Runtime::new(backend.open_again().await);
        let before = runs_of(&[&a]);
        assert_eq!(
            Ledger::with(&again)
                .idempotency_key("dep-1")
                .deposit(&a, 5)
                .await
                .unwrap(),
            5
        );
        assert_eq!(runs_of(&[&a]), before);
        assert_eq!(Ledger::balance(&again, &a).await.unwrap(), 10);
        again.shutdown().await;
    }
}

#[tokio::test]
async fn a_key_reused_by_a_different_call_is_refused() {
    for backend in backends().await {
        let rt = Runtime::new(Arc::clone(&backend.store));
        let a = id("reuse");
        Ledger::with(&rt)
            .idempotency_key("k")
            .deposit(&a, 5)
            .await
            .unwrap();
        let before = runs_of(&[&a]);
        let other_arguments = Ledger::with(&rt).idempotency_key("k").deposit(&a, 6).await;
        assert!(
            matches!(&other_arguments, Err(Error::IdempotencyKeyReused { idempotency_key, .. }) if idempotency_key == "k"),
            "{other_arguments:?}"
        );
        let other_handler = Ledger::with(&rt).idempotency_key("k").withdraw(&a, 5).await;
        assert!(matches!(
            other_handler,
            Err(Error::IdempotencyKeyReused { .. })
        ));
        assert_eq!(runs_of(&[&a]), before, "nothing ran");
        // The same key on another object is another key.
        let b = id("reuse-b");
        assert_eq!(
            Ledger::with(&rt)
                .idempotency_key("k")
                .deposit(&b, 6)
                .await
                .unwrap(),
            6
        );
        rt.shutdown().await;
    }
}

#[tokio::test]
async fn a_failed_commit_stores_nothing_and_the_retry_runs() {
    let store = FaultyStorage::new(MemoryStorage::new());
    let rt = Runtime::new(store.clone());
    let a = id("failed");
    Ledger::deposit(&rt, &a, 1).await.unwrap();
    store.fail_commits(1);
    let failed = Ledger::with(&rt).idempotency_key("k").deposit(&a, 5).await;
    assert!(
        matches!(failed, Err(Error::OutcomeUnknown { .. })),
        "{failed:?}"
    );
    let key = ObjectKey::new("Ledger", a.as_str());
    assert_eq!(store.load_idempotent_reply(&key, "k").await.unwrap(), None);
    let before = runs_of(&[&a]);
    assert_eq!(
        Ledger::with(&rt)
            .idempotency_key("k")
            .deposit(&a, 5)
            .await
            .unwrap(),
        6
    );
    assert_eq!(runs_of(&[&a]) - before, 1, "the retry ran the handler");
    assert!(
        store
            .load_idempotent_reply(&key, "k")
            .await
            .unwrap()
            .is_some()
    );
}

#[tokio::test]
async fn a_second_runtime_sees_the_first_runtimes_reply() {
    for backend in backends().await {
        let first = Runtime::new(Arc::clone(&backend.store));
        let second = Runtime::new(backend.open_again().await);
        let a = id("two");
        assert_eq!(
            Ledger::with(&first)
                .idempotency_key("k")
                .deposit(&a, 3)
                .await
                .unwrap(),
            3
        );
        // The first runtime's instance goes; the second one owns the object from now on.
        first.shutdown().await;
        let before = runs_of(&[&a]);
        assert_eq!(
            Ledger::with(&second)
                .idempotency_key("k")
                .deposit(&a, 3)
                .await
                .unwrap(),
            3
        );
        assert_eq!(runs_of(&[&a]), before);
        assert_eq!(Ledger::balance(&second, &a).await.unwrap(), 3);
        second.shutdown().await;
    }
}

#[tokio::test(start_paused = true)]
async fn expired_keys_are_swept_and_then_run_again() {
    let store = MemoryStorage::new();
    let rt = Runtime::builder(store.clone())
        .clock_follows_tokio()
        .idempotency_retention(Duration::from_secs(3600))
        .build();
    let a = id("expiry");
    let key = ObjectKey::new("Ledger", a.as_str());
    Ledger::with(&rt)
        .idempotency_key("k")
        .deposit(&a, 1)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3599)).await;
    assert_eq!(
        Ledger::with(&rt)
            .idempotency_key("k")
            .deposit(&a, 1)
            .await
            .unwrap(),
        1
    );
    assert!(
        store
            .load_idempotent_reply(&key, "k")
            .await
            .unwrap()
            .is_some()
    );
    // The background sweep runs every 150 s with this retention.
    tokio::time::sleep(Duration::from_secs(2 + 150)).await;
    for _ in 0..100 {
        if store
            .load_idempotent_reply(&key, "k")
            .await
            .unwrap()
            .is_none()
        {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(
        store.load_idempotent_reply(&key, "k").await.unwrap(),
        None,
        "swept"
    );
    let before = runs_of(&[&a]);
    assert_eq!(
        Ledger::with(&rt)
            .idempotency_key("k")
            .deposit(&a, 1)
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        runs_of(&[&a]) - before,
        1,
        "an expired key runs the call again"
    );
}

#[tokio::test]
async fn deleting_the_object_forgets_its_keys() {
    let rt = Runtime::new(MemoryStorage::new());
    let a = id("delete");
    Ledger::with(&rt)
        .idempotency_key("k")
        .deposit(&a, 1)
        .await
        .unwrap();
    assert!(rt.delete::<Ledger>(&a).await.unwrap());
    let before = runs_of(&[&a]);
    assert_eq!(
        Ledger::with(&rt)
            .idempotency_key("k")
            .deposit(&a, 7)
            .await
            .unwrap(),
        7
    );
    assert_eq!(runs_of(&[&a]) - before, 1);
}

#[tokio::test]
async fn calls_by_name_share_the_typed_calls_keys() {
    let rt = Runtime::builder(MemoryStorage::new())
        .expose::<Ledger>()
        .build();
    let a = id("by-name");
    let keyed = CallOptions::new().with_idempotency_key("k");
    assert_eq!(
        Ledger::with(&rt)
            .idempotency_key("k")
            .deposit(&a, 2)
            .await
            .unwrap(),
        2
    );
    let before = runs_of(&[&a]);
    let replayed = rt
        .call_by_name_with("Ledger", &a, "deposit", json!({"amount": 2}), &keyed)
        .await
        .unwrap();
    assert_eq!(replayed, json!(2));
    assert_eq!(
        runs_of(&[&a]),
        before,
        "the same call by name is answered from the typed call's reply"
    );
    let refused = rt
        .call_by_name_with("Ledger", &a, "deposit", json!({"amount": 3}), &keyed)
        .await;
    assert!(matches!(
        refused,
        Err(CallByNameError::Runtime(Error::IdempotencyKeyReused { .. }))
    ));
    // A handler error stored by name is replayed by name as the same JSON error.
    let withdraw = CallOptions::new().with_idempotency_key("w");
    for _ in 0..2 {
        let error = rt
            .call_by_name_with("Ledger", &a, "withdraw", json!({"amount": 50}), &withdraw)
            .await;
        assert!(
            matches!(&error, Err(CallByNameError::Handler { error, .. }) if *error == json!({"Insufficient": {"balance": 2}})),
            "{error:?}"
        );
    }
}
