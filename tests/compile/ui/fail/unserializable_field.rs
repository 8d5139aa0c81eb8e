// A state field's type must be storable; the error is on the field's type.
use durable_runtime::durable_object;

#[derive(Default)]
pub struct Opaque;

#[durable_object]
pub struct Counter {
    count: i64,
    opaque: Opaque,
}

#[durable_object]
impl Counter {}

fn main() {}
