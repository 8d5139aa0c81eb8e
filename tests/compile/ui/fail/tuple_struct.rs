// The state has named fields: a tuple struct is refused.
use durable_runtime::durable_object;

#[durable_object]
pub struct Counter(i64);

fn main() {}
