// A job needs an attempt, durations with a unit, and a cap no shorter than the first delay.
use durable_runtime::fsm::{job, Job, StepContext};

#[job(max_attempts = 0, backoff = "10s", max_backoff = "1s")]
pub struct Zero {}

impl Job for Zero {
    type Error = String;

    async fn perform(&self, _ctx: &StepContext) -> Result<(), String> {
        Ok(())
    }
}

#[job(backoff = "soon", max_backoff = 5)]
pub struct Vague {}

impl Job for Vague {
    type Error = String;

    async fn perform(&self, _ctx: &StepContext) -> Result<(), String> {
        Ok(())
    }
}

#[job(max_attempts = -1, retries = 3)]
pub struct Negative {}

impl Job for Negative {
    type Error = String;

    async fn perform(&self, _ctx: &StepContext) -> Result<(), String> {
        Ok(())
    }
}

fn main() {}
