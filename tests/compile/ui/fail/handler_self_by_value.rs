// A handler borrows the object: `self` by value (or boxed) is refused on the receiver.
use durable_runtime::durable_object;

#[durable_object]
pub struct Counter {
    count: i64,
}

#[durable_object]
impl Counter {
    #[handler]
    fn handle_take(self) -> i64 {
        self.count
    }

    #[handler]
    fn handle_boxed(self: Box<Self>) -> i64 {
        self.count
    }

    #[handler]
    fn handle_nothing() -> i64 {
        0
    }
}

fn main() {}
