// A duration string that does not parse, or that is zero, is refused on the literal.
use durable_runtime::durable_object;

#[durable_object(shutdown_after = "5 parsecs")]
pub struct Counter {
    count: i64,
}

#[durable_object]
impl Counter {}

#[durable_object(call_timeout = "0s")]
pub struct Zero {
    count: i64,
}

#[durable_object]
impl Zero {}

fn main() {}
