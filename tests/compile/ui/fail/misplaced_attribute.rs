// `#[durable_object]` goes on a struct or its inherent impl block: not on a function or a
// trait impl.
use durable_runtime::durable_object;

#[durable_object]
fn not_an_object() {}

#[durable_object]
pub struct Counter {
    count: i64,
}

#[durable_object]
impl Clone for Counter {
    fn clone(&self) -> Self {
        Self { count: self.count }
    }
}

#[durable_object]
impl Counter {}

fn main() {}
