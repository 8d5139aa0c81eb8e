//! What a step returns ([`Outcome`]) and the instances it or a caller creates ([`Instance`],
//! erased as [`AnyInstance`]).

use std::fmt;
use std::marker::PhantomData;
use std::time::{Duration, SystemTime};

use super::definition::{Fsm, FsmState, Step};
use super::json;
use super::status::Status;

/// What a step (or the error handler) decides: the specification's outcome table.
///
/// | outcome | effect | attempt | runs next |
/// |---|---|---|---|
/// | [`next(step)`](Self::next) | move to `step` | 0 | now |
/// | [`retry(delay)`](Self::retry) | the same step again | + 1 | after `delay` |
/// | [`await_signal(names, step)`](Self::await_signal) | park until a signal named in `names` | | on arrival, `step` |
/// | [`schedule_childs(step, children)`](Self::schedule_childs) | spawn `children`, park until all ended | 0 | on release, `step` |
/// | [`done(result)`](Self::done) | end, with `result` | | |
/// | [`stop(reason)`](Self::stop) | end, failed with `reason` | | |
///
/// The state changes a step made through `&mut self` are committed with its outcome (except
/// for `done` and `stop`, which keep the state as it was committed before the step).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use durable_runtime::fsm::{durable_fsm, Outcome, OutcomeKind, StepContext};
///
/// #[durable_fsm(result = String)]
/// pub struct Order { tries: u32 }
///
/// #[durable_fsm]
/// impl Order {
///     #[step(initial)]
///     fn start(&mut self, _ctx: &StepContext) -> Outcome<Self> {
///         Outcome::await_signal(["paid", "cancelled"], Self::SETTLE)
///             .timeout(Duration::from_secs(3600))
///     }
///
///     #[step]
///     fn settle(&mut self, ctx: &StepContext) -> Outcome<Self> {
///         match ctx.awaited().first().map(|signal| signal.name()) {
///             Some("paid") => Outcome::done("receipt".to_owned()),
///             Some(_) => Outcome::stop("cancelled"),
///             None => Outcome::stop("no payment within the hour"),
///         }
///     }
/// }
///
/// let outcome = Outcome::<Order>::retry(Duration::from_secs(1));
/// assert_eq!(outcome.kind(), OutcomeKind::Retry);
/// ```
pub struct Outcome<F> {
    pub(crate) inner: Inner,
    fsm: PhantomData<fn() -> F>,
}

pub(crate) enum Inner {
    Next(&'static str),
    Retry(Duration),
    Await {
        names: Vec<String>,
        step: &'static str,
        timeout: Option<Duration>,
    },
    ScheduleChilds {
        step: &'static str,
        children: Vec<AnyInstance>,
    },
    /// The result, encoded when the outcome is made (or why it cannot be).
    Done(Result<String, String>),
    Stop(String),
}

/// The kind of an [`Outcome`], for tallies and metrics.
///
/// # Examples
///
/// ```
/// use durable_runtime::fsm::OutcomeKind;
///
/// assert_eq!(OutcomeKind::ScheduleChilds.as_str(), "schedule_childs");
/// assert!(OutcomeKind::Done.is_terminal());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OutcomeKind {
    /// [`Outcome::next`].
    Next,
    /// [`Outcome::retry`].
    Retry,
    /// [`Outcome::await_signal`].
    Await,
    /// [`Outcome::schedule_childs`].
    ScheduleChilds,
    /// [`Outcome::done`].
    Done,
    /// [`Outcome::stop`].
    Stop,
}

impl OutcomeKind {
    /// Every kind.
    pub const ALL: [OutcomeKind; 6] = [
        OutcomeKind::Next,
        OutcomeKind::Retry,
        OutcomeKind::Await,
        OutcomeKind::ScheduleChilds,
        OutcomeKind::Done,
        OutcomeKind::Stop,
    ];

    /// The name used in metrics and tallies.
    pub const fn as_str(self) -> &'static str {
        match self {
            OutcomeKind::Next => "next",
            OutcomeKind::Retry => "retry",
            OutcomeKind::Await => "await",
            OutcomeKind::ScheduleChilds => "schedule_childs",
            OutcomeKind::Done => "done",
            OutcomeKind::Stop => "stop",
        }
    }

    /// Whether the outcome ends the instance.
    pub const fn is_terminal(self) -> bool {
        matches!(self, OutcomeKind::Done | OutcomeKind::Stop)
    }
}

impl fmt::Display for OutcomeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl<F> Outcome<F> {
    /// Moves on to `step`, runnable at once, attempt reset to 0. Consumes the awaited signals
    /// the step was handed.
    pub fn next(step: Step<F>) -> Self {
        Self {
            inner: Inner::Next(step.name()),
            fsm: PhantomData,
        }
    }

    /// Runs the same step again after `delay` (zero: at once), attempt + 1. Consumes nothing
    /// and keeps the awaited names, so the retry sees the same awaited signals. The engine
    /// never computes a backoff: derive `delay` from [`StepContext::attempt`](super::StepContext::attempt).
    pub fn retry(delay: Duration) -> Self {
        Self {
            inner: Inner::Retry(delay),
            fsm: PhantomData,
        }
    }

    /// Parks the instance until a signal named in `names` is in its inbox, then runs `step`
    /// with the matching signals in [`StepContext::awaited`](super::StepContext::awaited).
    /// A matching signal already in the inbox (and not already handed to this step as
    /// awaited) makes the instance runnable at once: a signal sent before the park is never
    /// lost. Consumes nothing. Add [`timeout`](Self::timeout) to run `step` anyway after a
    /// while.
    pub fn await_signal<I, S>(names: I, step: Step<F>) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            inner: Inner::Await {
                names: names.into_iter().map(Into::into).collect(),
                step: step.name(),
                timeout: None,
            },
            fsm: PhantomData,
        }
    }

    /// Bounds an [`await_signal`](Self::await_signal): when `timeout` passes with no matching
    /// signal, the instance runs its next step anyway, with whatever arrived (maybe nothing)
    /// as awaited. The timeout fires within the engine's reaper interval after the deadline.
    /// Only an await has a timeout: on any other outcome this changes nothing.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        if let Inner::Await { timeout: t, .. } = &mut self.inner {
            *t = Some(timeout);
        }
        self
    }

    /// Spawns `children` and parks until every one of them has ended (done or failed), then
    /// runs `step` with them in [`StepContext::children`](super::StepContext::children).
    /// The children are inserted and the parent parked in one transaction; a child whose
    /// correlation key is occupied is not inserted and not waited for, and with no child
    /// inserted `step` runs at once. Consumes the awaited signals the step was handed.
    pub fn schedule_childs<I, C>(step: Step<F>, children: I) -> Self
    where
        I: IntoIterator<Item = C>,
        C: Into<AnyInstance>,
    {
        Self {
            inner: Inner::ScheduleChilds {
                step: step.name(),
                children: children.into_iter().map(Into::into).collect(),
            },
            fsm: PhantomData,
        }
    }

    /// Ends the instance as failed with `reason`. Deletes its inbox; a parent joining on it is
    /// released by one.
    pub fn stop(reason: impl fmt::Display) -> Self {
        Self {
            inner: Inner::Stop(reason.to_string()),
            fsm: PhantomData,
        }
    }

    /// Which outcome this is.
    pub fn kind(&self) -> OutcomeKind {
        match &self.inner {
            Inner::Next(_) => OutcomeKind::Next,
            Inner::Retry(_) => OutcomeKind::Retry,
            Inner::Await { .. } => OutcomeKind::Await,
            Inner::ScheduleChilds { .. } => OutcomeKind::ScheduleChilds,
            Inner::Done(_) => OutcomeKind::Done,
            Inner::Stop(_) => OutcomeKind::Stop,
        }
    }
}

impl<F: FsmState> Outcome<F> {
    /// Ends the instance with `result`. Deletes its inbox; a parent joining on it is
    /// released by one. (The result is encoded here; one that cannot be stored is an error
    /// of the step, for its error handler.)
    pub fn done(result: F::Result) -> Self {
        Self {
            inner: Inner::Done(json::encode_state(&result)),
            fsm: PhantomData,
        }
    }
}

impl<F> fmt::Debug for Outcome<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner {
            Inner::Next(step) => f.debug_tuple("Next").field(step).finish(),
            Inner::Retry(delay) => f.debug_tuple("Retry").field(delay).finish(),
            Inner::Await {
                names,
                step,
                timeout,
            } => f
                .debug_struct("Await")
                .field("names", names)
                .field("step", step)
                .field("timeout", timeout)
                .finish(),
            Inner::ScheduleChilds { step, children } => f
                .debug_struct("ScheduleChilds")
                .field("step", step)
                .field("children", &children.len())
                .finish(),
            Inner::Done(_) => f.write_str("Done"),
            Inner::Stop(reason) => f.debug_tuple("Stop").field(reason).finish(),
        }
    }
}

/// A new instance of `F`, with its insert options: correlation key and scope, concurrency key
/// and limit, queue, priority, start time, first step. A plain state value inserts with the defaults.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use durable_runtime::fsm::{durable_fsm, Instance, Outcome, Status, StepContext};
///
/// #[durable_fsm(queue = "payments")]
/// pub struct Order { order_id: String }
///
/// #[durable_fsm]
/// impl Order {
///     #[step(initial)]
///     fn start(&mut self, _ctx: &StepContext) -> Outcome<Self> {
///         Outcome::done(())
///     }
/// }
///
/// let order = Instance::new(Order { order_id: "42".into() })
///     .correlation_key("order:42")
///     .priority(-5)
///     .delay(Duration::from_secs(60));
/// assert_eq!(order.state().order_id, "42");
///
/// // The key stays reserved after the instance ends, until it is garbage-collected.
/// let reserved = Instance::new(Order::default())
///     .correlation_key("order:43")
///     .scope(Status::ALL);
/// # drop(reserved);
/// ```
#[derive(Debug)]
pub struct Instance<F: Fsm> {
    state: F,
    step: Step<F>,
    queue: Option<String>,
    priority: Option<i16>,
    start: Start,
    correlation_key: Option<String>,
    scope: Vec<Status>,
    concurrency_key: Option<String>,
    concurrency_limit: u16,
    rate_limit: Option<(String, u32)>,
}

/// When a new instance may first run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Start {
    Now,
    After(Duration),
    At(SystemTime),
}

impl<F: Fsm> Instance<F> {
    /// An instance starting at the initial step on `F`'s queue and priority, without a key.
    pub fn new(state: F) -> Self {
        Self {
            state,
            step: F::INITIAL,
            queue: None,
            priority: None,
            start: Start::Now,
            correlation_key: None,
            scope: Status::LIVE.to_vec(),
            concurrency_key: None,
            concurrency_limit: 1,
            rate_limit: None,
        }
    }

    /// The state it starts with.
    pub fn state(&self) -> &F {
        &self.state
    }

    /// Gives it a business key, which is both its signal address and a uniqueness guard: no
    /// two instances occupy a key at once (by default while live; see [`scope`](Self::scope)).
    /// Inserting an instance whose key is occupied inserts nothing.
    #[must_use]
    pub fn correlation_key(mut self, key: impl Into<String>) -> Self {
        self.correlation_key = Some(key.into());
        self
    }

    /// The statuses in which the key is occupied (default [`Status::LIVE`]: unique among live
    /// instances, free again once it ends). Add [`Status::Done`] and [`Status::Failed`] to keep
    /// the key reserved after the end; an empty scope makes the key an address only, with no
    /// uniqueness (and, since the address resolves through the occupied key, no signal by key).
    #[must_use]
    pub fn scope(mut self, statuses: impl IntoIterator<Item = Status>) -> Self {
        let mut scope: Vec<Status> = statuses.into_iter().collect();
        scope.sort();
        scope.dedup();
        self.scope = scope;
        self
    }

    /// Gives it a concurrency key: at most [`concurrency_limit`](Self::concurrency_limit)
    /// instances with this key execute a step at once, across every worker (1 by default:
    /// the instances of a key run one step at a time, in the order the pick takes them, by
    /// priority then eligibility). Instances without a key are not limited. The database
    /// enforces it: an executing instance holds one slot of its key, and a unique index over
    /// executing rows refuses a second holder of a slot.
    ///
    /// Unlike the correlation key, it is neither an address nor a uniqueness guard: any number
    /// of instances may wait with the same concurrency key.
    ///
    /// ```
    /// use durable_runtime::fsm::{durable_fsm, Instance, Outcome, StepContext};
    ///
    /// #[durable_fsm]
    /// pub struct Transfer { account: String, cents: i64 }
    ///
    /// #[durable_fsm]
    /// impl Transfer {
    ///     #[step(initial)]
    ///     fn post(&mut self, _ctx: &StepContext) -> Outcome<Self> {
    ///         Outcome::done(())
    ///     }
    /// }
    ///
    /// // Transfers of one account run one at a time; other accounts' run alongside.
    /// let transfer = Instance::new(Transfer { account: "acct:7".into(), cents: 500 })
    ///     .concurrency_key("acct:7");
    /// assert_eq!(transfer.concurrency().0, Some("acct:7"));
    /// ```
    #[must_use]
    pub fn concurrency_key(mut self, key: impl Into<String>) -> Self {
        self.concurrency_key = Some(key.into());
        self
    }

    /// How many instances of its concurrency key may execute at once (default 1; 0 is taken
    /// as 1). It takes effect with [`concurrency_key`](Self::concurrency_key); give every
    /// instance of a key the same limit (an instance runs only in one of the first `limit`
    /// slots of its key).
    ///
    /// ```
    /// use durable_runtime::fsm::{durable_fsm, Instance, Outcome, StepContext};
    ///
    /// #[durable_fsm]
    /// pub struct Crawl { host: String }
    ///
    /// #[durable_fsm]
    /// impl Crawl {
    ///     #[step(initial)]
    ///     fn fetch(&mut self, _ctx: &StepContext) -> Outcome<Self> {
    ///         Outcome::done(())
    ///     }
    /// }
    ///
    /// // At most 4 fetches per host at once.
    /// let crawl = Instance::new(Crawl { host: "example.com".into() })
    ///     .concurrency_key("host:example.com")
    ///     .concurrency_limit(4);
    /// assert_eq!(crawl.concurrency(), (Some("host:example.com"), 4));
    /// ```
    #[must_use]
    pub fn concurrency_limit(mut self, limit: u16) -> Self {
        self.concurrency_limit = limit.max(1);
        self
    }

    /// Its concurrency key and limit.
    pub fn concurrency(&self) -> (Option<&str>, u16) {
        (self.concurrency_key.as_deref(), self.concurrency_limit)
    }

    /// Gives it a rate-limit key: each claim of one of its steps takes a token of the key's
    /// bucket (stored with [`Engine::set_rate_limit`](super::Engine::set_rate_limit)), and
    /// waits, runnable, while the bucket is empty. A key without a stored limit is not
    /// limited. Same as [`rate_limit_units(key, 1)`](Self::rate_limit_units).
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::fsm::{durable_fsm, Instance, Outcome};
    ///
    /// #[durable_fsm(name = "sms")]
    /// pub struct Sms { to: String }
    ///
    /// #[durable_fsm]
    /// impl Sms {
    ///     #[step(initial)]
    ///     fn send(&mut self) -> Outcome<Self> { Outcome::done(()) }
    /// }
    ///
    /// let sms = Instance::new(Sms { to: "+33".into() }).rate_limit_key("sms-provider");
    /// assert_eq!(sms.rate_limit(), Some(("sms-provider", 1)));
    /// ```
    #[must_use]
    pub fn rate_limit_key(self, key: impl Into<String>) -> Self {
        self.rate_limit_units(key, 1)
    }

    /// Gives it a rate-limit key whose claims each take `units` tokens (at least 1; 0 is
    /// taken as 1). An instance needing more units than the bucket's capacity waits until
    /// the capacity is raised.
    #[must_use]
    pub fn rate_limit_units(mut self, key: impl Into<String>, units: u32) -> Self {
        self.rate_limit = Some((key.into(), units.max(1)));
        self
    }

    /// Its rate-limit key and units.
    pub fn rate_limit(&self) -> Option<(&str, u32)> {
        self.rate_limit
            .as_ref()
            .map(|(key, units)| (key.as_str(), *units))
    }

    /// Runs it on `queue` instead of `F`'s.
    #[must_use]
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }

    /// Its priority instead of `F`'s: lower runs first.
    #[must_use]
    pub fn priority(mut self, priority: i16) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Starts it `delay` after the insert.
    #[must_use]
    pub fn delay(mut self, delay: Duration) -> Self {
        self.start = Start::After(delay);
        self
    }

    /// Starts it at `at`.
    #[must_use]
    pub fn start_at(mut self, at: SystemTime) -> Self {
        self.start = Start::At(at);
        self
    }

    /// Starts it at `step` instead of the initial step.
    #[must_use]
    pub fn step(mut self, step: Step<F>) -> Self {
        self.step = step;
        self
    }
}

/// An [`Instance`] of any FSM, its state already encoded: what `insert_all` and
/// `schedule_childs` take, so that one batch can mix FSMs. Every `Instance<F>` and every
/// state value of an FSM converts into one.
///
/// # Examples
///
/// ```
/// use durable_runtime::fsm::{durable_fsm, AnyInstance, Instance, Outcome, StepContext};
///
/// #[durable_fsm]
/// pub struct Task { n: u32 }
///
/// #[durable_fsm]
/// impl Task {
///     #[step(initial)]
///     fn start(&mut self, _ctx: &StepContext) -> Outcome<Self> {
///         Outcome::done(())
///     }
/// }
///
/// let batch: Vec<AnyInstance> = vec![
///     Task { n: 1 }.into(),
///     Instance::new(Task { n: 2 }).correlation_key("task:2").into(),
/// ];
/// assert_eq!(batch[1].fsm(), "Task");
/// assert_eq!(batch[1].correlation_key(), Some("task:2"));
/// ```
#[derive(Clone, Debug)]
pub struct AnyInstance {
    pub(crate) fsm: &'static str,
    pub(crate) fsm_version: i32,
    pub(crate) step: &'static str,
    /// The encoded state, or why it could not be encoded.
    pub(crate) state: Result<String, String>,
    pub(crate) queue: String,
    pub(crate) priority: i16,
    pub(crate) start: Start,
    pub(crate) correlation_key: Option<String>,
    pub(crate) scope: Vec<Status>,
    pub(crate) concurrency_key: Option<String>,
    pub(crate) concurrency_limit: u16,
    pub(crate) rate_limit: Option<(String, u32)>,
}

impl AnyInstance {
    /// The FSM's name.
    pub fn fsm(&self) -> &'static str {
        self.fsm
    }

    /// The correlation key.
    pub fn correlation_key(&self) -> Option<&str> {
        self.correlation_key.as_deref()
    }

    /// Gives it the business key `key` (see [`Instance::correlation_key`]), or takes its key
    /// away with `None`.
    pub fn with_correlation_key(mut self, key: Option<String>) -> Self {
        self.correlation_key = key;
        self
    }

    /// The concurrency key.
    pub fn concurrency_key(&self) -> Option<&str> {
        self.concurrency_key.as_deref()
    }

    /// The queue it runs on.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// Its rate-limit key and units (see [`Instance::rate_limit_key`]).
    pub fn rate_limit(&self) -> Option<(&str, u32)> {
        self.rate_limit
            .as_ref()
            .map(|(key, units)| (key.as_str(), *units))
    }

    /// Gives it the rate-limit key `key` with `units` per claim (see
    /// [`Instance::rate_limit_units`]), or takes it away with `None`.
    pub fn with_rate_limit(mut self, rate_limit: Option<(String, u32)>) -> Self {
        self.rate_limit = rate_limit.map(|(key, units)| (key, units.max(1)));
        self
    }
}

impl<F: Fsm> From<Instance<F>> for AnyInstance {
    fn from(instance: Instance<F>) -> Self {
        Self {
            fsm: F::NAME,
            fsm_version: F::VERSION,
            step: instance.step.name(),
            state: json::encode_state(&instance.state),
            queue: instance.queue.unwrap_or_else(|| F::QUEUE.to_owned()),
            priority: instance.priority.unwrap_or(F::PRIORITY),
            start: instance.start,
            correlation_key: instance.correlation_key,
            scope: instance.scope,
            concurrency_key: instance.concurrency_key,
            concurrency_limit: instance.concurrency_limit,
            rate_limit: instance.rate_limit,
        }
    }
}

impl<F: Fsm> From<F> for AnyInstance {
    fn from(state: F) -> Self {
        Instance::new(state).into()
    }
}
