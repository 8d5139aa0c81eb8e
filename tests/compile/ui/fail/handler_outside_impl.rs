// `#[handler]`, `#[after_load]` and `#[alarm]` only mean something inside a
// `#[durable_object]` impl block.
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

    #[durable_runtime::alarm]
    fn ring(&mut self) {}
}

fn main() {}
