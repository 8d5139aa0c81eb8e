//! Wall-clock time as the runtime sees it.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::storage::truncate_to_micros;

/// Where the runtime reads the current UTC time for alarms.
#[derive(Clone, Debug)]
pub(crate) enum Clock {
    /// The system clock.
    System,
    /// A clock that advances with tokio's clock, so paused ("virtual") time in tests moves
    /// alarm time too. Tests can also jump it, as a system clock adjustment would, without
    /// moving tokio's clock.
    Tokio {
        start_system: SystemTime,
        start_instant: Instant,
        /// Microseconds added to the wall time by jumps (negative: set back).
        jumped: Arc<AtomicI64>,
    },
}

impl Clock {
    pub(crate) fn following_tokio() -> Self {
        Self::Tokio {
            start_system: SystemTime::now(),
            start_instant: Instant::now(),
            jumped: Arc::default(),
        }
    }

    /// The current time, truncated to the microsecond precision storage keeps.
    pub(crate) fn now(&self) -> SystemTime {
        truncate_to_micros(match self {
            Self::System => SystemTime::now(),
            Self::Tokio {
                start_system,
                start_instant,
                jumped,
            } => {
                let now = *start_system + start_instant.elapsed();
                let jumped = jumped.load(Ordering::Acquire);
                let by = Duration::from_micros(jumped.unsigned_abs());
                if jumped >= 0 { now + by } else { now - by }
            }
        })
    }

    /// Moves the wall time forward (`forward`) or back by `by`. Returns false for the system
    /// clock, which only the system moves.
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub(crate) fn jump(&self, by: Duration, forward: bool) -> bool {
        let Self::Tokio { jumped, .. } = self else {
            return false;
        };
        let micros = i64::try_from(by.as_micros()).unwrap_or(i64::MAX);
        jumped.fetch_add(if forward { micros } else { -micros }, Ordering::AcqRel);
        true
    }
}
