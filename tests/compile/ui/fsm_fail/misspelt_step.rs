// Steps are named by their typed constants: a misspelt one does not compile.
use durable_runtime::fsm::{durable_fsm, Outcome};

#[durable_fsm]
pub struct Order {}

#[durable_fsm]
impl Order {
    #[step(initial)]
    fn start(&mut self) -> Outcome<Self> {
        Outcome::next(Self::CHRAGE)
    }

    #[step]
    fn charge(&mut self) -> Outcome<Self> {
        Outcome::done(())
    }
}

fn main() {}
