use durable_runtime::{durable_object, MemoryStorage, Runtime};

#[derive(Debug)]
pub struct NotJson;

#[durable_object]
pub struct Account {
    balance: u64,
}

#[durable_object]
impl Account {
    #[handler]
    fn handle_withdraw(&mut self, amount: u64) -> Result<u64, NotJson> {
        self.balance = self.balance.checked_sub(amount).ok_or(NotJson)?;
        Ok(self.balance)
    }
}

async fn calls(rt: &Runtime) {
    // Without a key the error type need not be serde.
    let _ = Account::withdraw(rt, "a", 1).await;
    let _ = Account::with(rt).withdraw("a", 1).await;
    // A key stores the reply: refused at compile time.
    let _ = Account::with(rt).idempotency_key("k").withdraw("a", 1).await;
}

fn main() {
    let _ = calls(&Runtime::new(MemoryStorage::new()));
}
