// A `#[durable_object]` struct needs a `#[durable_object]` impl block.
use durable_runtime::durable_object;

#[durable_object]
pub struct Counter {
    count: i64,
}

fn main() {}
