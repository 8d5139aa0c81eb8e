// Handler methods are named `handle_<name>`.
use durable_runtime::durable_object;

#[durable_object]
pub struct Counter {
    count: i64,
}

#[durable_object]
impl Counter {
    #[handler]
    fn increment(&mut self, by: i64) -> i64 {
        self.count += by;
        self.count
    }
}

fn main() {}
