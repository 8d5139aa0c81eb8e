// The shapes of `#[job]` that must compile warning-free.
#![deny(warnings)]
// `perform` written as a function returning a future is one of the accepted shapes.
#![allow(clippy::manual_async_fn)]

use std::time::Duration;

use durable_runtime::fsm::{FsmState, Job, JobSettings, StepContext, job};

#[derive(Debug, thiserror::Error)]
#[error("refused")]
pub struct Refused;

/// Every option.
#[job(name = "mail.send", version = 2, queue = "mail", priority = -3, max_attempts = 5, backoff = "250ms", max_backoff = "1m")]
pub struct SendEmail {
    to: String,
    #[field(default = 3)]
    tries: u32,
}

impl Job for SendEmail {
    type Error = Refused;

    async fn perform(&self, ctx: &StepContext) -> Result<(), Refused> {
        if self.to.is_empty() || ctx.attempt() > self.tries {
            return Err(Refused);
        }
        Ok(())
    }
}

/// No options, an error that is only `Display` (`anyhow`-like), no fields.
#[job]
pub struct Tick {}

pub struct Text(String);

impl std::fmt::Display for Text {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Job for Tick {
    type Error = Text;

    fn perform(
        &self,
        _ctx: &StepContext,
    ) -> impl std::future::Future<Output = Result<(), Text>> + Send {
        async { Err(Text("not yet".into())) }
    }
}

/// Checks what the generated code does (run by this package's tests).
pub fn runs() {
    assert_eq!(SendEmail::NAME, "mail.send");
    assert_eq!(SendEmail::VERSION, 2);
    assert_eq!(SendEmail::PRIORITY, -3);
    assert_eq!(SendEmail::MAX_ATTEMPTS, 5);
    assert_eq!(SendEmail::delay(2), Duration::from_secs(1));
    assert_eq!(Tick::NAME, "Tick");
    assert_eq!(Tick::MAX_ATTEMPTS, 3);
    assert_eq!(Tick::BACKOFF, Duration::from_secs(1));
    assert_eq!(Tick::MAX_BACKOFF, Duration::from_secs(300));
    let _ = SendEmail::default().tries;
}
