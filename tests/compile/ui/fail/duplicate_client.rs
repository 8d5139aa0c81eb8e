// Two handlers cannot have one client name.
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

    #[handler]
    fn r#handle_get(&self) -> i64 {
        self.count
    }
}

fn main() {}
