// A handler cannot be generic or have lifetime parameters.
use durable_runtime::durable_object;

#[durable_object]
pub struct Counter {
    count: i64,
}

#[durable_object]
impl Counter {
    #[handler]
    fn handle_set<T: Into<i64>>(&mut self, value: T) {
        self.count = value.into();
    }

    #[handler]
    fn handle_name<'a>(&'a self, name: &'a str) -> usize {
        name.len()
    }
}

fn main() {}
