// An object has at most one `#[after_load]` hook.
use durable_runtime::durable_object;

#[durable_object]
pub struct Counter {
    count: i64,
}

#[durable_object]
impl Counter {
    #[after_load]
    fn first(&mut self) {}

    #[after_load]
    fn second(&mut self) {}
}

// Also when the first one breaks a rule of its own.
#[durable_object]
pub struct Gauge {
    value: i64,
}

#[durable_object]
impl Gauge {
    #[after_load]
    fn broken(self) {}

    #[after_load]
    fn fine(&mut self) {}
}

fn main() {}
