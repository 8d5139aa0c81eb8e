// An FSM needs its steps before an engine can run it.
use durable_runtime::fsm::{durable_fsm, Engine, MemoryFsmStore};

#[durable_fsm]
pub struct Order {}

fn main() {
    let _ = Engine::builder(MemoryFsmStore::new()).register::<Order>();
}
