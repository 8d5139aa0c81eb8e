use durable_runtime::durable_object;

#[durable_object]
pub struct Counter {
    count: u64,
}

#[durable_object(expose)]
impl Counter {
    #[handler(hidden)]
    fn handle_get(&self) -> u64 {
        self.count
    }
}

fn main() {}
