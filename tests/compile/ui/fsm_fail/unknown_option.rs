// Options are spelled as documented.
use durable_runtime::fsm::{durable_fsm, Outcome};

#[durable_fsm(que = "payments")]
pub struct Order {}

#[durable_fsm]
impl Order {
    #[step(initial)]
    fn start(&mut self) -> Outcome<Self> {
        Outcome::done(())
    }
}

fn main() {}
