// A `#[job]` struct needs `impl Job`.
use durable_runtime::fsm::job;

#[job]
pub struct SendEmail {
    to: String,
}

fn main() {}
