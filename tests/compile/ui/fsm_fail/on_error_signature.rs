// The error handler receives the error; there is one at most.
use durable_runtime::fsm::{durable_fsm, Outcome, StepContext, StepError};

#[durable_fsm]
pub struct Order {}

#[durable_fsm]
impl Order {
    #[step(initial)]
    fn start(&mut self) -> Outcome<Self> {
        Outcome::done(())
    }

    #[on_error]
    fn failed(&mut self, ctx: &StepContext) -> Outcome<Self> {
        let _ = ctx;
        Outcome::stop("failed")
    }

    #[on_error]
    fn failed_again(&mut self, error: StepError) -> Outcome<Self> {
        Outcome::stop(error)
    }
}

fn main() {}
