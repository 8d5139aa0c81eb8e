// A handler argument type must be serializable; the error is on the type.
use durable_runtime::durable_object;

pub struct Opaque;

#[durable_object]
pub struct Counter {
    count: i64,
}

#[durable_object]
impl Counter {
    #[handler]
    fn handle_take(&mut self, by: i64, opaque: Opaque) {
        let _ = (by, opaque);
    }
}

fn main() {}
