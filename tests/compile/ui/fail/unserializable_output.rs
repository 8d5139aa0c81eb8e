// A handler's result type must be serializable; the error is on the type.
use durable_runtime::durable_object;

pub struct Opaque;

#[durable_object]
pub struct Counter {
    count: i64,
}

#[durable_object]
impl Counter {
    #[handler]
    fn handle_give(&self) -> Opaque {
        Opaque
    }

    #[handler]
    fn handle_try_give(&self) -> Result<Opaque, String> {
        Ok(Opaque)
    }
}

fn main() {}
