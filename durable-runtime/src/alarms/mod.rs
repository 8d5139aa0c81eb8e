//! Alarm names, times and retry settings.

pub(crate) mod args;
pub(crate) mod claims;
pub(crate) mod handle;
pub(crate) mod limit;
pub(crate) mod timers;

use std::marker::PhantomData;
use std::time::{Duration, SystemTime};

/// The name of an alarm of object type `O` whose handler takes an argument of type `A` (`()`
/// for none), as declared by an `#[alarm]` method.
///
/// `#[durable_object]` generates one constant per alarm handler (`Counter::CLEANUP` for
/// `#[alarm] fn cleanup`), so only alarms that have a handler can be scheduled, and only with
/// the argument their handler takes: an alarm without one is scheduled with
/// [`Context::schedule_alarm`](crate::Context::schedule_alarm), an alarm with one with
/// [`Context::schedule_alarm_with`](crate::Context::schedule_alarm_with), and a wrong argument
/// type does not compile.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use durable_runtime::{durable_object, Context};
///
/// #[durable_object]
/// pub struct Session {
///     expired: bool,
/// }
///
/// #[durable_object]
/// impl Session {
///     #[handler]
///     fn handle_touch(&mut self, ctx: &Context) {
///         // Re-arm the expiry: scheduling a name again replaces it.
///         ctx.schedule_alarm(Session::EXPIRE, Duration::from_secs(30 * 60));
///     }
///
///     #[alarm]
///     fn expire(&mut self) {
///         self.expired = true;
///     }
/// }
///
/// assert_eq!(Session::EXPIRE.name(), "expire");
/// ```
pub struct Alarm<O, A = ()> {
    name: &'static str,
    object: PhantomData<fn() -> (O, A)>,
}

impl<O, A> Alarm<O, A> {
    /// The alarm `name` of `O`: only the macro names alarms (through the private module), so
    /// that an alarm of one type cannot be made for another.
    pub(crate) const fn new(name: &'static str) -> Self {
        Self {
            name,
            object: PhantomData,
        }
    }

    /// The alarm's name, as stored.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::durable_object;
    ///
    /// #[durable_object]
    /// pub struct Invoice { reminded: u32 }
    ///
    /// #[durable_object]
    /// impl Invoice {
    ///     #[alarm]
    ///     fn send_reminder(&mut self) { self.reminded += 1; }
    /// }
    ///
    /// assert_eq!(Invoice::SEND_REMINDER.name(), "send_reminder");
    /// ```
    pub const fn name(&self) -> &'static str {
        self.name
    }
}

impl<O, A> Clone for Alarm<O, A> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<O, A> Copy for Alarm<O, A> {}

impl<O, A> PartialEq for Alarm<O, A> {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl<O, A> Eq for Alarm<O, A> {}

/// When an alarm is due: after a delay, or at a wall-clock time (stored in UTC).
///
/// Both `Duration` and `SystemTime` convert into it, so scheduling calls accept either.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use durable_runtime::AlarmTime;
///
/// let now = SystemTime::now();
/// let in_a_minute: AlarmTime = Duration::from_secs(60).into();
/// assert!(in_a_minute.resolve(now) == now + Duration::from_secs(60));
/// let at: AlarmTime = now.into();
/// assert_eq!(at.resolve(now), now);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AlarmTime {
    /// Due this long after it is scheduled.
    After(Duration),
    /// Due at this wall-clock time.
    At(SystemTime),
}

impl AlarmTime {
    /// The due time, relative to `now` for a delay.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::{Duration, UNIX_EPOCH};
    /// use durable_runtime::AlarmTime;
    ///
    /// let now = UNIX_EPOCH + Duration::from_secs(1_000);
    /// let delay = AlarmTime::After(Duration::from_secs(30));
    /// assert_eq!(delay.resolve(now), UNIX_EPOCH + Duration::from_secs(1_030));
    /// // A wall-clock time does not depend on `now`, even when it is already past.
    /// let at = AlarmTime::At(UNIX_EPOCH + Duration::from_secs(10));
    /// assert_eq!(at.resolve(now), UNIX_EPOCH + Duration::from_secs(10));
    /// ```
    pub fn resolve(self, now: SystemTime) -> SystemTime {
        match self {
            Self::After(delay) => now + delay,
            Self::At(at) => at,
        }
    }
}

impl From<Duration> for AlarmTime {
    fn from(delay: Duration) -> Self {
        Self::After(delay)
    }
}

impl From<SystemTime> for AlarmTime {
    fn from(at: SystemTime) -> Self {
        Self::At(at)
    }
}

/// How failed alarms are retried: exponential backoff, then kept as a dead alarm.
///
/// Defaults: first retry after 1 s, doubling up to 5 minutes, 10 attempts in all.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use durable_runtime::RetryPolicy;
///
/// let policy = RetryPolicy::default();
/// assert_eq!(policy.delay_after(1), Duration::from_secs(1));
/// assert_eq!(policy.delay_after(3), Duration::from_secs(4));
/// assert_eq!(policy.delay_after(30), Duration::from_secs(300));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryPolicy {
    /// The delay before the second attempt.
    pub initial_delay: Duration,
    /// The longest delay between two attempts.
    pub max_delay: Duration,
    /// How many attempts in all before the alarm is kept as dead.
    pub max_attempts: u32,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            initial_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(5 * 60),
            max_attempts: 10,
        }
    }
}

impl RetryPolicy {
    /// A policy with the given initial delay, cap and number of attempts (at least one: zero
    /// counts as one).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::RetryPolicy;
    ///
    /// let policy = RetryPolicy::new(Duration::from_millis(500), Duration::from_secs(10), 5);
    /// assert_eq!(policy.initial_delay, Duration::from_millis(500));
    /// assert_eq!(policy.max_attempts, 5);
    /// assert_eq!(RetryPolicy::new(Duration::ZERO, Duration::ZERO, 0).max_attempts, 1);
    /// ```
    pub fn new(initial_delay: Duration, max_delay: Duration, max_attempts: u32) -> Self {
        Self {
            initial_delay,
            max_delay,
            max_attempts: max_attempts.max(1),
        }
    }

    /// The delay before the next attempt, after `failed_attempts` failures (1 for the first).
    ///
    /// The initial delay doubles with each failure, up to `max_delay`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::RetryPolicy;
    ///
    /// let policy = RetryPolicy::new(Duration::from_secs(2), Duration::from_secs(10), 5);
    /// assert_eq!(policy.delay_after(1), Duration::from_secs(2));
    /// assert_eq!(policy.delay_after(2), Duration::from_secs(4));
    /// assert_eq!(policy.delay_after(3), Duration::from_secs(8));
    /// assert_eq!(policy.delay_after(4), Duration::from_secs(10));
    /// ```
    pub fn delay_after(&self, failed_attempts: u32) -> Duration {
        let doublings = failed_attempts.saturating_sub(1).min(32);
        self.initial_delay
            .saturating_mul(1u32 << doublings.min(31))
            .min(self.max_delay)
    }
}

/// Settings of the alarm scheduler.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use durable_runtime::AlarmSettings;
///
/// let settings = AlarmSettings::default();
/// assert_eq!(settings.poll_interval, Duration::from_secs(30));
/// assert_eq!(settings.claim_ttl, Duration::from_millis(1_500));
/// assert_eq!(settings.claim_ahead, Duration::from_millis(50));
///
/// let eager = AlarmSettings::default().with_claim_ahead(Duration::from_millis(200));
/// assert_eq!(eager.claim_ahead, Duration::from_millis(200));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AlarmSettings {
    /// How often storage is polled even when no alarm is known to be due: the recovery path
    /// for alarms written by another process (and for wall-clock jumps).
    pub poll_interval: Duration,
    /// The length of a claim's lease. The scheduler renews the leases of the alarms it holds
    /// or fires every quarter of it, so a claim lapses only when its process died or stalled
    /// for more than half of it; the alarm of a process that died is then fired by another
    /// scheduler (or the restarted process) as soon as its lease ends.
    pub claim_ttl: Duration,
    /// How failing alarms are retried.
    pub retry: RetryPolicy,
    /// How many alarms are claimed in one storage round trip (zero counts as one).
    pub claim_batch: usize,
    /// How long before its due time an alarm is claimed, and its object started, so that it
    /// fires on time. When claiming and reading the objects take longer than this, the
    /// scheduler claims earlier: by twice the time they take, up to one second and a quarter
    /// of `claim_ttl` (zero keeps claiming only due alarms). An alarm cancelled or rescheduled
    /// through this runtime in that window does not fire under the old claim.
    pub claim_ahead: Duration,
    /// How many alarms one object may have, however they are set (by its handlers, through
    /// [`Runtime::schedule_alarm`](crate::Runtime::schedule_alarm) and its by-name and HTTP
    /// forms): a call that would leave the object with more fails with
    /// [`Error::TooManyAlarms`](crate::Error::TooManyAlarms) and writes nothing; setting a name
    /// the object already has again replaces it. The store checks it in the commit. A type's
    /// [`ObjectOptions::max_alarms`](crate::ObjectOptions::max_alarms) overrides it. Default
    /// 100.
    pub max_alarms_per_object: usize,
    /// How many alarms this runtime owns claims of at most — held until due, firing, or being
    /// released — before it claims more (zero counts as one). A burst of due alarms larger
    /// than what the runtime fires in a moment is claimed as firings make room, not all at
    /// once: the leases of claims waiting to fire would otherwise have to be renewed in
    /// storage, taking the writes that firing needs, and other runtimes on the same database
    /// could not take their share. Default 8,192: at the default `claim_ttl` a claim fires
    /// before its lease needs renewing as long as the runtime fires over 22,000 alarms a
    /// second, and at 60,000 a second the runtime may still hold claims for the next tenth of
    /// a second, firings waiting for their commit included.
    pub max_claimed: usize,
}

impl Default for AlarmSettings {
    fn default() -> Self {
        Self {
            poll_interval: Duration::from_secs(30),
            claim_ttl: Duration::from_millis(1_500),
            retry: RetryPolicy::default(),
            claim_batch: 512,
            claim_ahead: Duration::from_millis(50),
            max_alarms_per_object: 100,
            max_claimed: 8_192,
        }
    }
}

impl AlarmSettings {
    /// Sets the poll interval.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::AlarmSettings;
    ///
    /// let settings = AlarmSettings::default().with_poll_interval(Duration::from_secs(5));
    /// assert_eq!(settings.poll_interval, Duration::from_secs(5));
    /// ```
    pub fn with_poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// Sets the length of a claim's lease (see [`claim_ttl`](Self::claim_ttl)).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::AlarmSettings;
    ///
    /// let settings = AlarmSettings::default().with_claim_ttl(Duration::from_secs(120));
    /// assert_eq!(settings.claim_ttl, Duration::from_secs(120));
    /// ```
    pub fn with_claim_ttl(mut self, ttl: Duration) -> Self {
        self.claim_ttl = ttl;
        self
    }

    /// Sets the retry policy.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::{AlarmSettings, RetryPolicy};
    ///
    /// let retry = RetryPolicy::new(Duration::from_secs(1), Duration::from_secs(60), 3);
    /// let settings = AlarmSettings::default().with_retry(retry);
    /// assert_eq!(settings.retry.max_attempts, 3);
    /// ```
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Sets how long before its due time an alarm is claimed (zero claims only due alarms).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::AlarmSettings;
    ///
    /// let settings = AlarmSettings::default().with_claim_ahead(Duration::ZERO);
    /// assert_eq!(settings.claim_ahead, Duration::ZERO);
    /// ```
    pub fn with_claim_ahead(mut self, ahead: Duration) -> Self {
        self.claim_ahead = ahead;
        self
    }

    /// Sets how many alarms one object may have (see
    /// [`max_alarms_per_object`](Self::max_alarms_per_object)).
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::AlarmSettings;
    ///
    /// assert_eq!(AlarmSettings::default().max_alarms_per_object, 100);
    /// let settings = AlarmSettings::default().with_max_alarms_per_object(1_000);
    /// assert_eq!(settings.max_alarms_per_object, 1_000);
    /// ```
    pub fn with_max_alarms_per_object(mut self, max: usize) -> Self {
        self.max_alarms_per_object = max;
        self
    }

    /// Sets how many alarms this runtime owns claims of at most (see
    /// [`max_claimed`](Self::max_claimed)).
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::AlarmSettings;
    ///
    /// assert_eq!(AlarmSettings::default().max_claimed, 8_192);
    /// let settings = AlarmSettings::default().with_max_claimed(10_000);
    /// assert_eq!(settings.max_claimed, 10_000);
    /// ```
    pub fn with_max_claimed(mut self, max: usize) -> Self {
        self.max_claimed = max;
        self
    }
}
