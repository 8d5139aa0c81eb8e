// A step returns `Outcome<Self>` or `Result<Outcome<Self>, E>`.
use durable_runtime::fsm::{durable_fsm, StepContext};

#[durable_fsm]
pub struct Order {}

#[durable_fsm]
impl Order {
    #[step(initial)]
    fn start(&mut self, _ctx: &StepContext) -> u32 {
        7
    }
}

fn main() {}
