// The state cannot be generic.
use durable_runtime::durable_object;

#[durable_object]
pub struct Cache<T> {
    items: Vec<T>,
}

fn main() {}
