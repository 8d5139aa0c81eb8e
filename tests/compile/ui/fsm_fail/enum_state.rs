// The state is a struct: the steps are the FSM's states.
use durable_runtime::fsm::durable_fsm;

#[durable_fsm]
pub enum Order {
    Open,
    Paid,
}

fn main() {}
