// `#[handler]` and `#[after_load]` only mean something inside a `#[durable_object]` impl.
use durable_runtime::{after_load, handler};

pub struct Counter {
    count: i64,
}

impl Counter {
    #[handler]
    fn handle_get(&self) -> i64 {
        self.count
    }

    #[after_load]
    fn loaded(&mut self) {}
}

fn main() {}
