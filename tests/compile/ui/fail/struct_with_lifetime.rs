// The state owns its data: a lifetime is refused.
use durable_runtime::durable_object;

#[durable_object]
pub struct Named<'a> {
    name: &'a str,
}

fn main() {}
