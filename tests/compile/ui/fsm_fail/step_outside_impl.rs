// `#[step]` only means something inside a `#[durable_fsm]` impl block.
use durable_runtime::fsm::step;

pub struct Order {}

impl Order {
    #[step]
    fn start(&mut self) {}
}

fn main() {}
