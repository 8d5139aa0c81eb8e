// A step constant belongs to its FSM: another FSM's step is a type error.
use durable_runtime::fsm::{durable_fsm, Outcome};

#[durable_fsm]
pub struct Order {}

#[durable_fsm]
impl Order {
    #[step(initial)]
    fn start(&mut self) -> Outcome<Self> {
        Outcome::next(Invoice::START)
    }
}

#[durable_fsm]
pub struct Invoice {}

#[durable_fsm]
impl Invoice {
    #[step(initial)]
    fn start(&mut self) -> Outcome<Self> {
        Outcome::done(())
    }
}

fn main() {}
