// Options belong to the struct.
use durable_runtime::fsm::{durable_fsm, Outcome};

#[durable_fsm]
pub struct Order {}

#[durable_fsm(queue = "payments", version = 2)]
impl Order {
    #[step(initial)]
    fn start(&mut self) -> Outcome<Self> {
        Outcome::done(())
    }
}

fn main() {}
