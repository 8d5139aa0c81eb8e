// Unknown options of the struct attribute are refused, with a suggestion.
use durable_runtime::durable_object;

#[durable_object(hibernate_afterr = "5m")]
pub struct Counter {
    count: i64,
}

#[durable_object]
impl Counter {}

fn main() {}
