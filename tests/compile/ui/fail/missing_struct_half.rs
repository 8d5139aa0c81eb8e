// A `#[durable_object]` impl block needs a `#[durable_object]` struct.
use durable_runtime::durable_object;

pub struct Counter {
    count: i64,
}

#[durable_object]
impl Counter {
    #[handler]
    fn handle_get(&self) -> i64 {
        self.count
    }
}

fn main() {}
