// An option given twice is refused on its second occurrence.
use durable_runtime::durable_object;

#[durable_object(hibernate_after = "5m", hibernate_after = "10m")]
pub struct Counter {
    count: i64,
}

#[durable_object]
impl Counter {}

fn main() {}
