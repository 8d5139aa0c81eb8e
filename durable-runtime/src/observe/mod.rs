//! What the runtime reports about itself: lifecycle events and metrics.

pub(crate) mod events;
pub mod metrics;
