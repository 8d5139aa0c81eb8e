// An object has at most one `#[after_load]` hook.
use durable_runtime::durable_object;

#[durable_object]
pub struct Counter {
    count: i64,
}

#[durable_object]
impl Counter {
    #[after_load]
    fn first(&mut self) {}

    #[after_load]
    fn second(&mut self) {}
}

fn main() {}
