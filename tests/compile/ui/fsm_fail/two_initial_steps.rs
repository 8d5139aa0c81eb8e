// One initial step only.
use durable_runtime::fsm::{durable_fsm, Outcome, StepContext};

#[durable_fsm]
pub struct Order {}

#[durable_fsm]
impl Order {
    #[step(initial)]
    fn start(&mut self, _ctx: &StepContext) -> Outcome<Self> {
        Outcome::next(Self::CHARGE)
    }

    #[step(initial)]
    fn charge(&mut self, _ctx: &StepContext) -> Outcome<Self> {
        Outcome::done(())
    }
}

fn main() {}
