// Versions are positive, priorities fit an i16, queues have a name.
use durable_runtime::fsm::{durable_fsm, Outcome};

#[durable_fsm(version = 0, priority = 40000, queue = "")]
pub struct Order {}

#[durable_fsm]
impl Order {
    #[step(initial)]
    fn start(&mut self) -> Outcome<Self> {
        Outcome::done(())
    }
}

fn main() {}
