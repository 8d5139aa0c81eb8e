// Every FSM has exactly one `#[step(initial)]`: where new instances start.
use durable_runtime::fsm::{durable_fsm, Outcome, StepContext};

#[durable_fsm]
pub struct Order {}

#[durable_fsm]
impl Order {
    #[step]
    fn charge(&mut self, _ctx: &StepContext) -> Outcome<Self> {
        Outcome::done(())
    }
}

fn main() {}
