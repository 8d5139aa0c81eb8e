// Options belong to the struct half; the impl half only takes `crate = ".."`.
use durable_runtime::durable_object;

#[durable_object]
pub struct Counter {
    count: i64,
}

#[durable_object(hibernate_after = "5m", unknown = 1)]
impl Counter {}

fn main() {}
