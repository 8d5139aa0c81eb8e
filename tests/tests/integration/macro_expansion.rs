//! `#[durable_object]` end to end: the same object as the hand-written expansion in
//! `durable-runtime/tests/expanded_spec.rs`, written with the real macro, and what its
//! expansion must do at run time.
#![deny(warnings, missing_docs)]

use std::time::Duration;

use durable_runtime::{Context, DurableObject, Error, MemoryStorage, Runtime, durable_object};

/// A handler error.
#[derive(Debug, PartialEq, Eq)]
pub struct TooBig(pub i64);

impl std::fmt::Display for TooBig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "too big: {}", self.0)
    }
}

/// The counter of `expanded_spec.rs`.
#[durable_object(
    hibernate_after = "5m",
    shutdown_after = "1h30m",
    call_timeout = "250ms",
    queue_capacity = 8
)]
pub struct Counter {
    #[field(default = 10)]
    count: i64,
    label: String,
    #[field(default = vec![1, 2])]
    seeds: Vec<u8>,
}

#[durable_object]
impl Counter {
    #[after_load]
    fn loaded(&mut self, ctx: &Context) {
        ctx.id().clone_into(&mut self.label);
    }

    /// Adds `by`.
    #[handler]
    fn handle_increment(&mut self, by: i64) -> i64 {
        self.count += by;
        self.count
    }

    #[handler]
    async fn handle_get(&self) -> i64 {
        self.count
    }

    #[handler]
    fn handle_label(&self) -> String {
        self.label.clone()
    }

    #[handler]
    fn handle_seeds(&self) -> Vec<u8> {
        self.seeds.clone()
    }

    #[handler]
    fn handle_checked(&mut self, ctx: &Context, by: i64) -> Result<i64, TooBig> {
        assert!(!ctx.id().is_empty());
        self.count += by;
        if self.count > 100 {
            return Err(TooBig(self.count));
        }
        Ok(self.count)
    }

    #[handler]
    async fn handle_reset(&mut self) {
        self.count = 0;
    }

    /// A plain method, re-emitted untouched.
    fn twice(&self) -> i64 {
        self.count * 2
    }

    #[handler]
    fn handle_doubled(&self) -> i64 {
        self.twice()
    }

    /// Adds one.
    #[alarm]
    fn tick(&mut self, attempt: u32) {
        self.count += i64::from(attempt);
    }
}

/// An object whose hook is async and fallible, and whose name is overridden.
#[durable_object(name = "renamed-hooked")]
pub struct Hooked {
    loads: u32,
}

/// The hook's error.
#[derive(Debug)]
pub struct HookFailed;

impl std::fmt::Display for HookFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("hook failed")
    }
}

impl std::error::Error for HookFailed {}

#[durable_object]
impl Hooked {
    #[after_load]
    async fn on_load(&mut self) -> Result<(), HookFailed> {
        self.loads += 1;
        Ok(())
    }

    #[handler]
    fn handle_loads(&self) -> u32 {
        self.loads
    }
}

fn runtime() -> Runtime {
    Runtime::new(MemoryStorage::new())
}

#[tokio::test]
async fn clients_round_trip() {
    let rt = runtime();
    assert_eq!(Counter::increment(&rt, "a", 5).await.unwrap(), 15);
    assert_eq!(Counter::get(&rt, "a").await.unwrap(), 15);
    assert_eq!(Counter::doubled(&rt, "a").await.unwrap(), 30);
    assert_eq!(Counter::checked(&rt, "a", 1).await.unwrap(), 16);
    Counter::reset(&rt, "a").await.unwrap();
    assert_eq!(Counter::get(&rt, "a").await.unwrap(), 0);
}

#[tokio::test]
async fn handler_errors_reach_the_caller_typed() {
    let rt = runtime();
    assert_eq!(Counter::increment(&rt, "a", 5).await.unwrap(), 15);
    let result: Result<i64, Error<TooBig>> = Counter::checked(&rt, "a", 100).await;
    assert!(matches!(result, Err(Error::Handler(TooBig(115)))));
    // Rolled back.
    assert_eq!(Counter::get(&rt, "a").await.unwrap(), 15);
}

#[tokio::test]
async fn after_load_runs() {
    let rt = runtime();
    assert_eq!(Counter::label(&rt, "user:7").await.unwrap(), "user:7");
    assert_eq!(Hooked::loads(&rt, "h").await.unwrap(), 1);
    assert_eq!(Hooked::loads(&rt, "h").await.unwrap(), 1);
}

#[tokio::test]
async fn field_defaults_apply() {
    let fresh = Counter::default();
    assert_eq!(fresh.count, 10);
    assert_eq!(fresh.label, "");
    assert_eq!(fresh.seeds, [1, 2]);
    let rt = runtime();
    assert_eq!(Counter::seeds(&rt, "s").await.unwrap(), [1, 2]);
}

#[test]
fn options_and_type_name_are_exposed() {
    let options = Counter::options();
    assert_eq!(options.hibernate_after, Some(Duration::from_secs(300)));
    assert_eq!(options.shutdown_after, Some(Duration::from_secs(5400)));
    assert_eq!(options.call_timeout, Some(Duration::from_millis(250)));
    assert_eq!(options.queue_capacity, Some(8));
    assert_eq!(Counter::TYPE_NAME, "Counter");

    assert_eq!(Hooked::options(), durable_runtime::ObjectOptions::new());
    assert_eq!(Hooked::TYPE_NAME, "renamed-hooked");
}

#[tokio::test]
async fn handle_methods_delegate() {
    let rt = runtime();
    let handle = Counter::handle(&rt, String::from("via-handle"));
    assert_eq!(handle.id(), "via-handle");
    assert_eq!(handle.increment(2).await.unwrap(), 12);
    assert_eq!(handle.clone().get().await.unwrap(), 12);
    assert!(matches!(
        handle.checked(1000).await,
        Err(Error::Handler(TooBig(1012)))
    ));
    handle.reset().await.unwrap();
    assert_eq!(Counter::get(&rt, "via-handle").await.unwrap(), 0);
    assert!(format!("{handle:?}").contains("via-handle"));
}

#[tokio::test]
async fn state_is_stored_under_the_type_name_with_serde() {
    let store = MemoryStorage::new();
    let rt = Runtime::new(store.clone());
    Counter::increment(&rt, "x", 1).await.unwrap();
    Hooked::loads(&rt, "y").await.unwrap();
    use durable_runtime::storage::{ObjectKey, Storage};
    let counter = store
        .load(&ObjectKey::new("Counter", "x"))
        .await
        .unwrap()
        .object()
        .unwrap();
    let state: serde_json::Value = serde_json::from_slice(&counter.state).unwrap();
    assert_eq!(
        state,
        serde_json::json!({"count": 11, "label": "x", "seeds": [1, 2]})
    );
    assert!(
        store
            .load(&ObjectKey::new("renamed-hooked", "y"))
            .await
            .unwrap()
            .object()
            .is_some()
    );
}

#[tokio::test]
async fn alarm_constants_name_their_handlers() {
    assert_eq!(Counter::TICK.name(), "tick");
    let rt = runtime();
    rt.schedule_alarm("a", Counter::TICK, Duration::from_secs(3600))
        .await
        .unwrap();
    let alarms = rt.list_alarms::<Counter>("a").await.unwrap();
    assert_eq!(alarms.len(), 1);
    assert_eq!(alarms[0].name, "tick");
}

/// A crate's own one-argument `Result` alias, whose error could be stored if mistaken for a
/// plain value.
pub mod ledger {
    use serde::{Deserialize, Serialize};

    /// Why a ledger refused an entry.
    #[derive(Debug, PartialEq, Eq, Serialize, Deserialize)]
    pub struct Overdrawn;

    /// The ledger's result.
    pub type Result<T> = std::result::Result<T, Overdrawn>;
}

/// A ledger whose handlers return one-argument `Result` aliases.
#[durable_object]
pub struct Ledger {
    balance: i64,
}

#[durable_object]
impl Ledger {
    /// Adds `amount`, refusing to go below zero.
    #[handler]
    fn handle_add(&mut self, amount: i64) -> ledger::Result<i64> {
        self.balance += amount;
        if self.balance < 0 {
            return Err(ledger::Overdrawn);
        }
        Ok(self.balance)
    }

    /// Adds `amount`, failing with an I/O error below zero.
    #[handler]
    async fn handle_add_io(&mut self, amount: i64) -> std::io::Result<i64> {
        self.balance += amount;
        if self.balance < 0 {
            return Err(std::io::Error::other("overdrawn"));
        }
        Ok(self.balance)
    }

    /// The balance.
    #[handler]
    fn handle_balance(&self) -> i64 {
        self.balance
    }
}

#[tokio::test]
async fn one_argument_result_aliases_are_fallible_handlers() {
    let rt = runtime();
    assert_eq!(Ledger::add(&rt, "l", 10).await.unwrap(), 10);
    let refused: Result<i64, Error<ledger::Overdrawn>> = Ledger::add(&rt, "l", -20).await;
    assert!(
        matches!(refused, Err(Error::Handler(ledger::Overdrawn))),
        "{refused:?}"
    );
    assert_eq!(Ledger::balance(&rt, "l").await.unwrap(), 10, "rolled back");
    let refused: Result<i64, Error<std::io::Error>> = Ledger::add_io(&rt, "l", -20).await;
    assert!(matches!(&refused, Err(Error::Handler(e)) if e.to_string() == "overdrawn"));
    assert_eq!(Ledger::balance(&rt, "l").await.unwrap(), 10, "rolled back");
    assert_eq!(Ledger::add_io(&rt, "l", 5).await.unwrap(), 15);
}
