// `#[durable_object]` implements `Default`, `Serialize` and `Deserialize` itself.
use durable_runtime::durable_object;

#[durable_object]
#[derive(Debug, Default, serde::Serialize)]
pub struct Counter {
    count: i64,
}

#[durable_object]
impl Counter {}

fn main() {}
