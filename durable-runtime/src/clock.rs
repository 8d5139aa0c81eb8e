//! Wall-clock time as the runtime sees it.

use std::time::SystemTime;

use tokio::time::Instant;

use crate::storage::truncate_to_micros;

/// Where the runtime reads the current UTC time for alarms.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Clock {
    /// The system clock.
    System,
    /// A clock that advances with tokio's clock, so paused ("virtual") time in tests moves
    /// alarm time too.
    Tokio {
        start_system: SystemTime,
        start_instant: Instant,
    },
}

impl Clock {
    pub(crate) fn following_tokio() -> Self {
        Self::Tokio {
            start_system: SystemTime::now(),
            start_instant: Instant::now(),
        }
    }

    /// The current time, truncated to the microsecond precision storage keeps.
    pub(crate) fn now(&self) -> SystemTime {
        truncate_to_micros(match self {
            Self::System => SystemTime::now(),
            Self::Tokio {
                start_system,
                start_instant,
            } => *start_system + start_instant.elapsed(),
        })
    }
}
