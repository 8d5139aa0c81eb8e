//! Nothing leaves an object before the state it came from is committed: a handler that runs
//! while an earlier call's write is still in flight (on that write's uncommitted state) may
//! call other objects, schedule their alarms or delete them, but those calls wait until the
//! write commits, and are never sent if it fails. On virtual time, with a storage that delays
//! and fails commits on demand.

use std::time::Duration;

use durable_runtime::storage::{MemoryStorage, ObjectKey, Storage};
use durable_runtime::testing::FaultyStorage;
use durable_runtime::{Context, Error, Runtime, durable_object};
use tokio::time::sleep;

#[durable_object]
pub struct Account {
    balance: u64,
}

#[durable_object]
impl Account {
    #[handler]
    fn handle_deposit(&mut self, amount: u64) -> u64 {
        self.balance += amount;
        self.balance
    }

    /// Moves the whole balance to the ledger.
    #[handler]
    async fn handle_sweep(&mut self, ctx: &Context) -> Result<u64, String> {
        let amount = std::mem::take(&mut self.balance);
        Ledger::credit(ctx.runtime(), "ledger", amount)
            .await
            .map_err(|err| err.to_string())?;
        Ok(amount)
    }

    /// Reminds the ledger to audit this account.
    #[handler]
    async fn handle_remind(&mut self, ctx: &Context) -> Result<(), Error> {
        ctx.runtime()
            .schedule_alarm("ledger", Ledger::AUDIT, Duration::from_secs(60))
            .await
    }

    /// Closes the ledger.
    #[handler]
    async fn handle_close_ledger(&mut self, ctx: &Context) -> Result<bool, Error> {
        ctx.runtime().delete::<Ledger>("ledger").await
    }

    /// Tells the outside world the balance, once it is committed.
    #[handler]
    async fn handle_announce(&self, ctx: &Context) -> Result<u64, String> {
        ctx.wait_committed().await.map_err(|err| err.to_string())?;
        let stored = ctx.runtime().read_state::<Account>(ctx.id()).await;
        let stored = stored.map_err(|err| err.to_string())?;
        ANNOUNCED
            .lock()
            .unwrap()
            .push((self.balance, stored.map_or(0, |account| account.balance)));
        Ok(self.balance)
    }

    /// Reads the ledger's total (a synchronous read), then what storage holds of this account.
    #[handler]
    async fn handle_peek(&self, ctx: &Context) -> Result<(u64, u64), String> {
        let total = Ledger::total(ctx.runtime(), "ledger")
            .await
            .map_err(|err| err.to_string())?;
        let stored = ctx.runtime().read_state::<Account>(ctx.id()).await;
        let stored = stored.map_err(|err| err.to_string())?;
        Ok((total, stored.map_or(0, |account| account.balance)))
    }
}

#[durable_object]
pub struct Ledger {
    total: u64,
    /// The account's balance in storage when each credit arrived.
    stored_balances: Vec<u64>,
}

#[durable_object]
impl Ledger {
    #[handler]
    async fn handle_credit(&mut self, ctx: &Context, amount: u64) -> Result<u64, Error> {
        let stored = ctx.runtime().read_state::<Account>("acc").await?;
        self.stored_balances
            .push(stored.map_or(0, |account| account.balance));
        self.total += amount;
        Ok(self.total)
    }

    #[handler]
    fn handle_total(&self) -> u64 {
        self.total
    }

    #[alarm]
    fn audit(&mut self) {}
}

const COMMIT_DELAY: Duration = Duration::from_millis(20);

/// What `announce` told the outside world: the balance it saw, and the one storage held.
static ANNOUNCED: std::sync::Mutex<Vec<(u64, u64)>> = std::sync::Mutex::new(Vec::new());

/// A runtime whose account and ledger exist, on a storage that delays every commit.
async fn slow_runtime() -> (Runtime, FaultyStorage<MemoryStorage>) {
    let store = FaultyStorage::new(MemoryStorage::new());
    let rt = Runtime::new(store.clone());
    Account::deposit(&rt, "acc", 0).await.unwrap();
    Ledger::total(&rt, "ledger").await.unwrap();
    store.delay_commits(COMMIT_DELAY);
    (rt, store)
}

/// Deposits `amount` in a task of its own, and returns once its write is in flight.
async fn deposit_in_flight(
    rt: &Runtime,
    amount: u64,
) -> tokio::task::JoinHandle<Result<u64, Error>> {
    let deposit = tokio::spawn({
        let rt = rt.clone();
        async move { Account::deposit(&rt, "acc", amount).await }
    });
    sleep(Duration::from_millis(1)).await;
    deposit
}

async fn stored_balance(store: &impl Storage) -> u64 {
    let stored = store.load(&ObjectKey::new("Account", "acc")).await.unwrap();
    // An account never stored holds the default balance.
    stored.object().map_or(0, |stored| {
        let state: serde_json::Value = serde_json::from_slice(&stored.state).unwrap();
        state["balance"].as_u64().unwrap()
    })
}

#[tokio::test(start_paused = true)]
async fn a_call_out_from_uncommitted_state_is_not_sent_when_that_state_fails_to_commit() {
    let (rt, store) = slow_runtime().await;
    store.fail_commits(1);
    let deposit = deposit_in_flight(&rt, 100).await;
    // Runs on the uncommitted 100 while the deposit's write is in flight.
    let sweep = Account::sweep(&rt, "acc").await;
    let deposit = deposit.await.unwrap();
    assert!(
        matches!(deposit, Err(Error::OutcomeUnknown { .. })),
        "the deposit's commit failed: {deposit:?}"
    );
    // The sweep was not applied: it fails with the deposit's write, retryable.
    assert!(
        matches!(&sweep, Err(Error::Storage { source, .. }) if source.is_retryable()),
        "the sweep saw the failed deposit: {sweep:?}"
    );
    assert_eq!(stored_balance(store.inner()).await, 0);
    // The ledger never heard of money whose deposit failed.
    assert_eq!(Ledger::total(&rt, "ledger").await.unwrap(), 0);
    assert!(rt.read_state::<Ledger>("ledger").await.unwrap().is_none());
    // The account serves on from what storage holds.
    assert_eq!(Account::deposit(&rt, "acc", 5).await.unwrap(), 5);
}

#[tokio::test(start_paused = true)]
async fn a_call_out_from_uncommitted_state_leaves_only_once_that_state_is_committed() {
    let (rt, store) = slow_runtime().await;
    let deposit = deposit_in_flight(&rt, 100).await;
    assert_eq!(Account::sweep(&rt, "acc").await.unwrap(), 100);
    assert_eq!(deposit.await.unwrap().unwrap(), 100);
    // When the credit reached the ledger, the deposit it came from was in storage.
    let ledger = rt.read_state::<Ledger>("ledger").await.unwrap().unwrap();
    assert_eq!(ledger.stored_balances, [100]);
    assert_eq!(ledger.total, 100);
    assert_eq!(stored_balance(store.inner()).await, 0);
}

#[tokio::test(start_paused = true)]
async fn an_alarm_scheduled_on_another_object_from_uncommitted_state_is_not_when_it_fails() {
    let (rt, store) = slow_runtime().await;
    store.fail_commits(1);
    let deposit = deposit_in_flight(&rt, 100).await;
    let remind = Account::remind(&rt, "acc").await;
    assert!(deposit.await.unwrap().is_err());
    assert!(remind.is_err(), "{remind:?}");
    assert!(rt.list_alarms::<Ledger>("ledger").await.unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_deletion_of_another_object_from_uncommitted_state_is_not_made_when_it_fails() {
    let (rt, store) = slow_runtime().await;
    // A ledger that is stored, so that a deletion would show.
    Ledger::credit(&rt, "ledger", 1).await.unwrap();
    store.fail_commits(1);
    let deposit = deposit_in_flight(&rt, 100).await;
    let close = Account::close_ledger(&rt, "acc").await;
    assert!(deposit.await.unwrap().is_err());
    assert!(close.is_err(), "{close:?}");
    assert!(rt.read_state::<Ledger>("ledger").await.unwrap().is_some());
}

#[tokio::test(start_paused = true)]
async fn a_synchronous_read_of_another_object_does_not_wait_for_the_commit() {
    let (rt, store) = slow_runtime().await;
    let deposit = deposit_in_flight(&rt, 100).await;
    // A synchronous `&self` handler can pass nothing on: the read goes at once, while the
    // deposit is still in flight (its own reply waits for the deposit, as every reply does).
    let (total, stored) = Account::peek(&rt, "acc").await.unwrap();
    assert_eq!((total, stored), (0, 0));
    assert_eq!(deposit.await.unwrap().unwrap(), 100);
    assert_eq!(stored_balance(store.inner()).await, 100);
}

#[tokio::test(start_paused = true)]
async fn an_effect_a_handler_waits_to_commit_is_made_after_it_and_never_for_a_failed_write() {
    let (rt, store) = slow_runtime().await;
    store.fail_commits(1);
    let deposit = deposit_in_flight(&rt, 100).await;
    let failed = Account::announce(&rt, "acc").await;
    assert!(deposit.await.unwrap().is_err());
    assert!(failed.is_err(), "{failed:?}");
    assert!(
        ANNOUNCED.lock().unwrap().is_empty(),
        "announced a failed deposit"
    );

    let deposit = deposit_in_flight(&rt, 100).await;
    assert_eq!(Account::announce(&rt, "acc").await.unwrap(), 100);
    assert_eq!(deposit.await.unwrap().unwrap(), 100);
    assert_eq!(*ANNOUNCED.lock().unwrap(), [(100, 100)]);
}
