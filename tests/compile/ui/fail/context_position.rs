// The context comes first after `self`, by shared reference.
use durable_runtime::{Context, durable_object};

#[durable_object]
pub struct Counter {
    count: i64,
}

#[durable_object]
impl Counter {
    #[handler]
    fn handle_late(&mut self, by: i64, ctx: &Context) {
        let _ = (by, ctx);
    }

    #[handler]
    fn handle_mutable(&mut self, ctx: &mut Context) {
        let _ = ctx;
    }
}

fn main() {}
