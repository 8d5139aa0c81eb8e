// The result is stored as JSON.
use durable_runtime::fsm::{durable_fsm, Outcome};

pub struct Receipt {
    pub cents: u64,
}

#[durable_fsm(result = Receipt)]
pub struct Order {}

#[durable_fsm]
impl Order {
    #[step(initial)]
    fn start(&mut self) -> Outcome<Self> {
        Outcome::done(Receipt { cents: 1 })
    }
}

fn main() {}
