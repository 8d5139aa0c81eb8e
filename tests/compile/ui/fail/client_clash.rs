// A plain method cannot have the name of a generated client, nor `handle`; a handler's client
// cannot be `handle` or `id`, nor hide a trait method (`default`, `clone`, ...).
use durable_runtime::durable_object;

#[durable_object]
pub struct Counter {
    count: i64,
}

#[durable_object]
impl Counter {
    #[handler]
    fn handle_get(&self) -> i64 {
        self.count
    }

    fn get(&self) -> i64 {
        self.count
    }

    fn handle(&self) {}

    #[handler]
    fn handle_id(&self) {}

    #[handler]
    fn handle_default(&self) {}

    #[handler]
    fn handle_clone(&self) {}
}

fn main() {}
