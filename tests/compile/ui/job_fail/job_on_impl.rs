// `#[job]` goes on the struct; the work is `impl Job`, without the attribute.
use durable_runtime::fsm::{job, StepContext};

#[job]
pub struct SendEmail {}

#[job]
impl SendEmail {
    async fn perform(&self, _ctx: &StepContext) -> Result<(), String> {
        Ok(())
    }
}

fn main() {}
