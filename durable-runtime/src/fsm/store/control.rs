//! The rows of the scheduling controls: rate limits (durable token buckets), paused queues,
//! and what a cancel found. Every store keeps them with the same arithmetic, here.
//!
//! A bucket holds at most `capacity` tokens and gains `capacity` tokens per `per`, computed
//! lazily: a claim that needs its tokens first adds what the time since `refilled_at` earned,
//! then takes its units. The time is the database's clock, read under the bucket's lock, so
//! that several engines on one database (with clocks that disagree) share one bucket exactly.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use super::super::status::{InstanceId, Status};

/// A token bucket: at most `capacity` claims (of one unit each) at once, refilled at
/// `capacity` per `per`.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use durable_runtime::fsm::store::RateLimit;
///
/// // Ten claims a second, in bursts of at most ten.
/// let limit = RateLimit::new(10, Duration::from_secs(1));
/// assert_eq!(limit, RateLimit::per_second(10));
/// assert!(limit.check().is_ok());
/// assert!(RateLimit::new(0, Duration::from_secs(1)).check().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RateLimit {
    /// The most tokens the bucket holds (at least 1), and how many it gains per `per`.
    pub capacity: u32,
    /// The refill period (at least a microsecond).
    pub per: Duration,
}

impl RateLimit {
    /// `capacity` tokens per `per`.
    pub fn new(capacity: u32, per: Duration) -> Self {
        Self { capacity, per }
    }

    /// `capacity` tokens per second.
    pub fn per_second(capacity: u32) -> Self {
        Self::new(capacity, Duration::from_secs(1))
    }

    /// `capacity` tokens per minute.
    pub fn per_minute(capacity: u32) -> Self {
        Self::new(capacity, Duration::from_secs(60))
    }

    /// Why a store cannot keep this limit, if it cannot: a capacity of zero, or a period
    /// shorter than a microsecond or longer than `i64` microseconds.
    ///
    /// # Errors
    ///
    /// The reason, as a sentence.
    pub fn check(&self) -> Result<(), String> {
        if self.capacity == 0 {
            return Err("a rate limit needs a capacity of at least 1".into());
        }
        match i64::try_from(self.per.as_micros()) {
            Ok(micros) if micros >= 1 => Ok(()),
            _ => Err(format!(
                "a rate limit's period must be between 1µs and i64::MAX µs, not {:?}",
                self.per
            )),
        }
    }

    /// The period in whole microseconds (see [`RateLimit::check`]).
    pub fn per_micros(&self) -> i64 {
        i64::try_from(self.per.as_micros())
            .unwrap_or(i64::MAX)
            .max(1)
    }
}

/// A rate limit as stored, with its bucket's last computed level.
#[derive(Clone, Debug, PartialEq)]
pub struct RateLimitRecord {
    /// The rate-limit key.
    pub key: String,
    /// The bucket's settings.
    pub limit: RateLimit,
    /// The tokens the bucket held at `refilled_at` (fractions accrue between claims).
    pub tokens: f64,
    /// When `tokens` was last computed, by the database's clock.
    pub refilled_at: SystemTime,
}

/// A bucket's arithmetic, in microseconds of the database's clock: what every store runs
/// under the bucket's lock when a pick claims rows of its key.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use durable_runtime::fsm::store::{RateLimit, TokenBucket};
///
/// let mut bucket = TokenBucket::full(RateLimit::new(2, Duration::from_secs(1)), 0);
/// assert!(bucket.take(1) && bucket.take(1));
/// assert!(!bucket.take(1), "empty");
/// assert_eq!(bucket.wait_for(1), Duration::from_millis(500));
/// bucket.refill(500_000);
/// assert!(bucket.take(1), "half a second earned one token");
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TokenBucket {
    /// The settings.
    pub limit: RateLimit,
    /// The tokens held at `refilled_at`.
    pub tokens: f64,
    /// When `tokens` was computed, in microseconds since the Unix epoch.
    pub refilled_at: i64,
}

impl TokenBucket {
    /// A full bucket at `at` (microseconds since the epoch).
    pub fn full(limit: RateLimit, at: i64) -> Self {
        Self {
            limit,
            tokens: f64::from(limit.capacity),
            refilled_at: at,
        }
    }

    /// Adds what the time from `refilled_at` to `at` earned, up to the capacity. A reading
    /// earlier than `refilled_at` (another clock, or a reading taken before the lock was
    /// granted) earns nothing and moves nothing back: tokens are never minted twice.
    pub fn refill(&mut self, at: i64) {
        if at <= self.refilled_at {
            return;
        }
        let capacity = f64::from(self.limit.capacity);
        let earned = (at - self.refilled_at) as f64 * capacity / self.limit.per_micros() as f64;
        self.tokens = (self.tokens + earned).min(capacity);
        self.refilled_at = at;
    }

    /// Takes `units` tokens if the bucket holds them.
    pub fn take(&mut self, units: u32) -> bool {
        let units = f64::from(units);
        // A hair of tolerance: refills are computed in floating point.
        if self.tokens + 1e-9 >= units {
            self.tokens = (self.tokens - units).max(0.0);
            true
        } else {
            false
        }
    }

    /// How long until the bucket holds `units` tokens (zero if it does); a whole period when
    /// it never can (more units than its capacity: the row is looked at again then).
    pub fn wait_for(&self, units: u32) -> Duration {
        if units > self.limit.capacity {
            return self.limit.per;
        }
        let missing = f64::from(units) - self.tokens;
        if missing <= 1e-9 {
            return Duration::ZERO;
        }
        let micros =
            (missing * self.limit.per_micros() as f64 / f64::from(self.limit.capacity)).ceil();
        Duration::from_micros(micros as u64)
    }
}

/// What the rate limits decide for one candidate of a pick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RateDecision {
    /// No rate-limit key, or a key without a stored limit: claim it freely.
    Free,
    /// Its bucket holds its units: claim it, and take them if the claim is made.
    Granted,
    /// Its bucket does not hold its units: leave it runnable, eligible again after `wait`
    /// (when the bucket will have earned them, at the earliest).
    Deferred {
        /// How long until its bucket will hold its units.
        wait: Duration,
    },
}

/// Decides, in pick order, which candidates (`(rate-limit key, units)`) their buckets can
/// serve: the buckets (already refilled to the database's clock) are only read, and each
/// grant reserves its units so that two candidates never count the same tokens. Once a key
/// defers a candidate, its later candidates are deferred too (a key's rows run in order),
/// each a little later than the one before.
///
/// # Examples
///
/// ```
/// use std::collections::HashMap;
/// use std::time::Duration;
/// use durable_runtime::fsm::store::{RateDecision, RateLimit, TokenBucket, decide_rate_limits};
///
/// let buckets = HashMap::from([(
///     "api".to_owned(),
///     TokenBucket::full(RateLimit::new(1, Duration::from_secs(1)), 0),
/// )]);
/// let decisions = decide_rate_limits(&[(Some("api"), 1), (Some("api"), 1), (None, 1)], &buckets);
/// assert_eq!(decisions[0], RateDecision::Granted);
/// assert_eq!(decisions[1], RateDecision::Deferred { wait: Duration::from_secs(1) });
/// assert_eq!(decisions[2], RateDecision::Free);
/// ```
pub fn decide_rate_limits(
    candidates: &[(Option<&str>, u32)],
    buckets: &HashMap<String, TokenBucket>,
) -> Vec<RateDecision> {
    let mut reserved: HashMap<&str, f64> = HashMap::new();
    let mut deferring: HashMap<&str, bool> = HashMap::new();
    candidates
        .iter()
        .map(|(key, units)| {
            let Some((key, bucket)) = key.and_then(|key| buckets.get(key).map(|b| (key, b))) else {
                return RateDecision::Free;
            };
            let units = (*units).max(1);
            let held = reserved.entry(key).or_insert(0.0);
            let mut rest = *bucket;
            rest.tokens -= *held;
            *held += f64::from(units);
            let deferred = deferring.entry(key).or_insert(false);
            if !*deferred && rest.take(units) {
                return RateDecision::Granted;
            }
            *deferred = true;
            RateDecision::Deferred {
                wait: rest.wait_for(units).max(Duration::from_millis(1)),
            }
        })
        .collect()
}

/// A paused queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PausedQueue {
    /// The queue.
    pub queue: String,
    /// When it was paused (the engine's clock).
    pub paused_at: SystemTime,
}

/// What [`FsmStore::cancel`](super::FsmStore::cancel) found and did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CancelOutcome {
    /// The instance (and every live descendant) is now `failed` with the cancel's reason.
    Cancelled {
        /// The instance.
        id: InstanceId,
        /// How many instances were cancelled: it and its live descendants.
        instances: u64,
    },
    /// The instance had already ended: nothing changed.
    Ended {
        /// The instance.
        id: InstanceId,
        /// Its status.
        status: Status,
    },
    /// No instance has this id, or nobody occupies this key.
    NotFound,
}
