// A handler argument must be a nameable type: `impl Trait` is refused.
use durable_runtime::durable_object;

#[durable_object]
pub struct Counter {
    count: i64,
}

#[durable_object]
impl Counter {
    #[handler]
    fn handle_add(&mut self, by: impl Into<i64>) -> i64 {
        self.count += by.into();
        self.count
    }
}

fn main() {}
