// Alarms with an argument, with and without the context and the attempt number; scheduled from
// a handler and from outside with their own argument type.
use std::time::Duration;

use durable_runtime::{Context, MemoryStorage, Runtime, durable_object};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
pub struct Reminder {
    text: String,
}

#[durable_object]
pub struct Calendar {
    said: Vec<String>,
}

#[durable_object]
impl Calendar {
    #[handler]
    fn handle_plan(&mut self, ctx: &Context) {
        let reminder = Reminder { text: "hi".into() };
        ctx.schedule_alarm_with(Self::REMIND, &reminder, Duration::ZERO)
            .unwrap();
        ctx.schedule_alarm_with(Self::COUNT, &(1, 2), Duration::ZERO)
            .unwrap();
        ctx.cancel_alarm(Self::COUNT);
    }

    #[alarm]
    fn remind(&mut self, reminder: Reminder) {
        self.said.push(reminder.text);
    }

    #[alarm]
    async fn count(&mut self, ctx: &Context, pair: (u32, u32), attempt: u32) {
        let _ = (ctx, pair, attempt);
    }

    #[alarm]
    fn number(&mut self, _ctx: &Context, value: u64) -> Result<(), String> {
        let _ = value;
        Ok(())
    }
}

async fn outside(rt: &Runtime) {
    rt.schedule_alarm_with("c1", Calendar::NUMBER, &5, Duration::ZERO)
        .await
        .unwrap();
    rt.cancel_alarm("c1", Calendar::REMIND).await.unwrap();
}

/// Checks what the generated code does (run by this package's tests).
pub async fn runs() {
    outside(&Runtime::new(MemoryStorage::new())).await;
}
