// An alarm takes at most one argument (before the attempt number), of a storable type, and is
// scheduled with exactly that type: without it, with another type, or with one when it takes
// none does not compile.
use std::time::Duration;

use durable_runtime::{Context, durable_object};

pub struct NotStorable;

#[durable_object]
pub struct Reminder {
    said: Vec<String>,
}

#[durable_object]
impl Reminder {
    #[alarm]
    fn two(&mut self, text: String, other: String) {
        let _ = (text, other);
    }

    #[alarm]
    fn opaque(&mut self, value: NotStorable) {
        let _ = value;
    }

    #[alarm]
    fn remind(&mut self, text: String) {
        self.said.push(text);
    }

    #[alarm]
    fn ring(&mut self) {}

    #[handler]
    fn handle_wrong_type(&mut self, ctx: &Context) {
        ctx.schedule_alarm_with(Reminder::REMIND, &7u32, Duration::ZERO).unwrap();
    }

    #[handler]
    fn handle_missing(&mut self, ctx: &Context) {
        ctx.schedule_alarm(Reminder::REMIND, Duration::ZERO);
    }

    #[handler]
    fn handle_unexpected(&mut self, ctx: &Context) {
        ctx.schedule_alarm_with(Reminder::RING, &"text".to_owned(), Duration::ZERO).unwrap();
    }
}

fn main() {}
