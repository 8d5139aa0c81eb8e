// An alarm handler takes `&mut self`, then optionally `ctx: &Context`, then optionally
// `attempt: u32`, and returns `()` or `Result<(), E>`; its constant must not clash.
use durable_runtime::{Context, durable_object};

#[durable_object]
pub struct Reminder {
    fired: u32,
}

#[durable_object]
impl Reminder {
    #[alarm]
    fn wrong_order(&mut self, attempt: u32, ctx: &Context) {
        let _ = (attempt, ctx);
    }

    #[alarm]
    fn extra(&mut self, attempt: u32, label: String) {
        let _ = (attempt, label);
    }

    #[alarm]
    fn by_value(self) {}

    #[alarm]
    fn counts(&mut self) -> u32 {
        self.fired
    }

    #[alarm]
    fn ring(&mut self) {}

    const RING: u32 = 1;

    #[handler]
    #[alarm]
    fn handle_both(&mut self) {}
}

fn main() {}
