// The state is a struct: an enum is refused.
use durable_runtime::durable_object;

#[durable_object]
pub enum Light {
    On,
    Off,
}

fn main() {}
