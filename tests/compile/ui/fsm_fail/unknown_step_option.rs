// `#[step]` takes only `initial`.
use durable_runtime::fsm::{durable_fsm, Outcome};

#[durable_fsm]
pub struct Order {}

#[durable_fsm]
impl Order {
    #[step(first)]
    fn start(&mut self) -> Outcome<Self> {
        Outcome::done(())
    }
}

fn main() {}
