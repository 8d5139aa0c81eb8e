// Alarm handlers of every accepted shape, their constants, and alarms next to handlers and an
// after-load hook.
#![deny(warnings, missing_docs)]
//! Alarms.

use std::time::Duration;

use durable_runtime::{Alarm, Context, MemoryStorage, Runtime, durable_object};

/// Alarms of every shape.
#[durable_object]
pub struct Reminder {
    fired: Vec<String>,
}

#[durable_object]
impl Reminder {
    #[after_load]
    fn loaded(&mut self) {}

    #[handler]
    fn handle_arm(&mut self, ctx: &Context) {
        ctx.schedule_alarm(Reminder::PLAIN, Duration::from_secs(60));
        ctx.schedule_alarm(Self::WITH_CTX, Duration::from_secs(60));
    }

    /// Fires with nothing.
    #[alarm]
    fn plain(&mut self) {
        self.fired.push("plain".to_owned());
    }

    #[alarm]
    fn with_ctx(&mut self, ctx: &Context) {
        self.fired.push(ctx.id().to_owned());
    }

    #[alarm]
    fn with_attempt(&mut self, attempt: u32) -> Result<(), String> {
        if attempt < 2 {
            return Err(format!("attempt {attempt}"));
        }
        Ok(())
    }

    #[durable_runtime::alarm]
    async fn with_both(
        &mut self,
        ctx: &durable_runtime::Context,
        attempt: u32,
    ) -> Result<(), std::io::Error> {
        self.fired.push(format!("{}:{attempt}", ctx.id()));
        Ok(())
    }

    #[cfg(unix)]
    #[alarm]
    fn platform(&mut self) {}

    #[cfg(not(unix))]
    #[alarm]
    fn platform(&mut self) {}
}

/// Checks what the generated code does (run by this package's tests).
pub async fn runs() {
    let all: [Alarm<Reminder>; 5] = [
        Reminder::PLAIN,
        Reminder::WITH_CTX,
        Reminder::WITH_ATTEMPT,
        Reminder::WITH_BOTH,
        Reminder::PLATFORM,
    ];
    let names: Vec<_> = all.iter().map(|alarm| alarm.name()).collect();
    assert_eq!(
        names,
        ["plain", "with_ctx", "with_attempt", "with_both", "platform"]
    );
    let rt = Runtime::new(MemoryStorage::new());
    Reminder::arm(&rt, "r").await.unwrap();
    let alarms = rt.list_alarms::<Reminder>("r").await.unwrap();
    assert_eq!(alarms.len(), 2);
}
