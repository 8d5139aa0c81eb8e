use durable_runtime::durable_object;

pub struct NotJson;

#[durable_object]
pub struct Account {
    balance: u64,
}

#[durable_object(expose)]
impl Account {
    #[handler]
    fn handle_withdraw(&mut self, amount: u64) -> Result<u64, NotJson> {
        self.balance = self.balance.checked_sub(amount).ok_or(NotJson)?;
        Ok(self.balance)
    }
}

fn main() {}
