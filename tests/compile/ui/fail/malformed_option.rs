// Durations are string literals with a unit; a bare number is refused.
use durable_runtime::durable_object;

#[durable_object(hibernate_after = 5)]
pub struct Counter {
    count: i64,
}

#[durable_object]
impl Counter {}

fn main() {}
