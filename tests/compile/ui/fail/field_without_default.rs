// A field whose type has no `Default` needs `#[field(default = ..)]`.
use durable_runtime::durable_object;

#[derive(serde::Serialize, serde::Deserialize)]
pub struct NoDefault(u32);

#[durable_object]
pub struct Counter {
    count: i64,
    limit: NoDefault,
}

#[durable_object]
impl Counter {}

fn main() {}
