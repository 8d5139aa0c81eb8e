// A step takes `&mut self` and, optionally, `ctx: &StepContext`, and says what comes next.
use durable_runtime::fsm::{durable_fsm, Outcome, StepContext};

#[durable_fsm]
pub struct Order {}

#[durable_fsm]
impl Order {
    #[step(initial)]
    fn start(self, _ctx: &StepContext) -> Outcome<Self> {
        Outcome::next(Self::CHARGE)
    }

    #[step]
    fn charge(&mut self, amount: u64) -> Outcome<Self> {
        let _ = amount;
        Outcome::next(Self::SETTLE)
    }

    #[step]
    fn settle(&mut self, _ctx: &StepContext) {}
}

fn main() {}
