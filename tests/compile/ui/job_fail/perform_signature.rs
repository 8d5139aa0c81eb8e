// `perform` takes `&self` and the context, and returns `Result<(), Self::Error>`.
use durable_runtime::fsm::{job, Job, StepContext};

#[job]
pub struct SendEmail {}

impl Job for SendEmail {
    type Error = String;

    async fn perform(&mut self, _ctx: &StepContext) -> Result<(), String> {
        Ok(())
    }
}

fn main() {}
