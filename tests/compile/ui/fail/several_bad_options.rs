// Every bad option and field attribute of an item is reported at once.
use durable_runtime::durable_object;

#[durable_object(hibernate_after = "5x", queue_capacity = 0, bogus = 1, name = "")]
pub struct Counter {
    #[field(defualt = 1)]
    count: i64,
    #[field(default)]
    other: i64,
}

#[durable_object]
impl Counter {}

fn main() {}
