// The after-load hook takes `&mut self` and optionally `ctx: &Context`, and returns `()` or
// `Result<(), E>`.
use durable_runtime::{Context, durable_object};

#[durable_object]
pub struct Counter {
    count: i64,
}

#[durable_object]
impl Counter {
    #[after_load]
    fn loaded(&mut self, ctx: &Context, extra: i64) {
        let _ = (ctx, extra);
    }
}

#[durable_object]
pub struct Other {
    count: i64,
}

#[durable_object]
impl Other {
    #[after_load]
    fn loaded(&mut self) -> i64 {
        self.count
    }
}

fn main() {}
