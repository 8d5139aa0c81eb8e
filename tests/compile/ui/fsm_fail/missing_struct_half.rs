// A `#[durable_fsm]` impl block needs a `#[durable_fsm]` struct.
use durable_runtime::fsm::{durable_fsm, Outcome};

#[derive(Default)]
pub struct Order {}

#[durable_fsm]
impl Order {
    #[step(initial)]
    fn start(&mut self) -> Outcome<Self> {
        Outcome::done(())
    }
}

fn main() {}
