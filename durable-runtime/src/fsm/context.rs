//! What a step sees besides its state: [`StepContext`], with the signals of its inbox
//! ([`Signal`]) and its children ([`ChildInfo`]).

use std::time::SystemTime;

use serde::de::DeserializeOwned;

use super::status::{InstanceId, SignalId, Status};
use super::store::{ChildRecord, Claimed, SignalRecord};

/// The context of one step execution.
///
/// # Examples
///
/// ```
/// use durable_runtime::fsm::{durable_fsm, Outcome, StepContext};
///
/// #[durable_fsm]
/// pub struct Payment { seen: Vec<String> }
///
/// #[durable_fsm]
/// impl Payment {
///     #[step(initial)]
///     fn start(&mut self, ctx: &StepContext) -> Outcome<Self> {
///         // The instance id is a good idempotency key for effects of the step.
///         let _key = format!("payment-{}-{}", ctx.id(), ctx.step());
///         if ctx.attempt() > 0 {
///             // This step runs again: a retry, an error handler's retry or a crash.
///         }
///         Outcome::await_signal(["paid"], Self::SETTLE)
///     }
///
///     #[step]
///     fn settle(&mut self, ctx: &StepContext) -> Outcome<Self> {
///         self.seen = ctx.awaited().iter().map(|s| s.name().to_owned()).collect();
///         Outcome::done(())
///     }
/// }
/// # fn main() {}
/// ```
#[derive(Clone, Debug)]
pub struct StepContext {
    id: InstanceId,
    fsm: &'static str,
    fsm_version: i32,
    step: String,
    attempt: u32,
    correlation_key: Option<String>,
    awaited: Vec<Signal>,
    all: Vec<Signal>,
    children: Vec<ChildInfo>,
    now: SystemTime,
}

impl StepContext {
    /// The context of the step `claimed` holds.
    pub(crate) fn new(fsm: &'static str, claimed: &Claimed, now: SystemTime) -> Self {
        let all: Vec<Signal> = claimed.inbox.iter().map(Signal::from_record).collect();
        let awaited = match &claimed.awaits {
            Some(names) => all
                .iter()
                .filter(|signal| names.contains(&signal.name))
                .cloned()
                .collect(),
            None => Vec::new(),
        };
        Self {
            id: claimed.id,
            fsm,
            fsm_version: claimed.fsm_version,
            step: claimed.step.clone(),
            attempt: claimed.attempt,
            correlation_key: claimed.correlation_key.clone(),
            awaited,
            all,
            children: claimed
                .children
                .iter()
                .map(ChildInfo::from_record)
                .collect(),
            now,
        }
    }

    /// A context for calling a step method directly in a unit test, without an engine or a
    /// store: no signals and no children unless added with
    /// [`with_awaited`](Self::with_awaited), [`with_inbox`](Self::with_inbox) or
    /// [`with_children`](Self::with_children).
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::fsm::{InstanceId, StepContext};
    ///
    /// let ctx = StepContext::for_test(InstanceId::new(1), "order", "start", 2);
    /// assert_eq!((ctx.id(), ctx.step(), ctx.attempt()), (InstanceId::new(1), "start", 2));
    /// assert!(ctx.awaited().is_empty());
    /// ```
    pub fn for_test(id: InstanceId, fsm: &'static str, step: &str, attempt: u32) -> Self {
        Self {
            id,
            fsm,
            fsm_version: 1,
            step: step.to_owned(),
            attempt,
            correlation_key: None,
            awaited: Vec::new(),
            all: Vec::new(),
            children: Vec::new(),
            now: SystemTime::now(),
        }
    }

    /// This context with `signals` as the awaited signals (and in the inbox).
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::fsm::{InstanceId, Signal, StepContext};
    ///
    /// let ctx = StepContext::for_test(InstanceId::new(1), "order", "settle", 0)
    ///     .with_awaited(vec![Signal::for_test(1, "paid", r#"{"cents":100}"#)]);
    /// assert_eq!(ctx.awaited()[0].name(), "paid");
    /// assert_eq!(ctx.all().len(), 1);
    /// ```
    pub fn with_awaited(mut self, signals: Vec<Signal>) -> Self {
        self.all.extend(signals.iter().cloned());
        self.awaited = signals;
        self
    }

    /// This context with `signals` added to the inbox, not awaited.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::fsm::{InstanceId, Signal, StepContext};
    ///
    /// let ctx = StepContext::for_test(InstanceId::new(1), "order", "start", 0)
    ///     .with_inbox(vec![Signal::for_test(1, "note", "{}")]);
    /// assert!(ctx.awaited().is_empty());
    /// assert_eq!(ctx.all().len(), 1);
    /// ```
    pub fn with_inbox(mut self, signals: Vec<Signal>) -> Self {
        self.all.extend(signals);
        self
    }

    /// This context with `children`.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::fsm::{ChildInfo, InstanceId, Status, StepContext};
    ///
    /// let child = ChildInfo::for_test(InstanceId::new(2), "task", Status::Done, Some("7"), None);
    /// let ctx = StepContext::for_test(InstanceId::new(1), "batch", "join", 0)
    ///     .with_children(vec![child]);
    /// assert_eq!(ctx.children()[0].result::<u32>().unwrap(), Some(7));
    /// ```
    pub fn with_children(mut self, children: Vec<ChildInfo>) -> Self {
        self.children = children;
        self
    }

    /// The instance's id.
    pub fn id(&self) -> InstanceId {
        self.id
    }

    /// The FSM's name.
    pub fn fsm(&self) -> &'static str {
        self.fsm
    }

    /// The instance's FSM version.
    pub fn fsm_version(&self) -> i32 {
        self.fsm_version
    }

    /// The step running.
    pub fn step(&self) -> &str {
        &self.step
    }

    /// How many times this step ran before and did not move on: 0 on the first run, then one
    /// more after each `retry`, each crash recovered by the reaper (the lease ended with no
    /// outcome), and each error handler's `retry`. `next` and `schedule_childs` reset it.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The instance's correlation key, if it has one.
    pub fn correlation_key(&self) -> Option<&str> {
        self.correlation_key.as_deref()
    }

    /// The signals of the inbox whose name the instance awaited, oldest first: what woke it
    /// (or, after an await timed out, whatever of those names arrived, maybe nothing).
    ///
    /// A progressing outcome (`next`, `schedule_childs`) consumes exactly these; `retry` and
    /// `await_signal` consume nothing, so a retry sees them again and a re-await can
    /// accumulate a set of signals before moving on.
    pub fn awaited(&self) -> &[Signal] {
        &self.awaited
    }

    /// The whole inbox, oldest first, awaited or not. Terminal outcomes (`done`, `stop`)
    /// delete it.
    pub fn all(&self) -> &[Signal] {
        &self.all
    }

    /// Every child this instance spawned with `schedule_childs` (in every round) that is
    /// still stored, by id. After a barrier is released each of them has ended: `done` with
    /// a result or `failed` with an error.
    pub fn children(&self) -> &[ChildInfo] {
        &self.children
    }

    /// The engine's clock when the step started (virtual time in tests).
    pub fn now(&self) -> SystemTime {
        self.now
    }

    /// The received ids handed to the step as awaited.
    pub(crate) fn awaited_ids(&self) -> Vec<SignalId> {
        self.awaited.iter().map(|signal| signal.id).collect()
    }
}

/// One signal of an inbox.
///
/// # Examples
///
/// ```
/// use durable_runtime::fsm::Signal;
///
/// #[derive(serde::Deserialize)]
/// struct Paid { cents: u64 }
///
/// let signal = Signal::for_test(1, "paid", r#"{"cents":250}"#);
/// assert_eq!(signal.name(), "paid");
/// assert_eq!(signal.payload::<Paid>().unwrap().cents, 250);
/// assert_eq!(signal.raw_payload(), r#"{"cents":250}"#);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signal {
    id: SignalId,
    name: String,
    payload: String,
    dedup_key: Option<String>,
    inserted_at: SystemTime,
}

impl Signal {
    fn from_record(record: &SignalRecord) -> Self {
        Self {
            id: record.id,
            name: record.name.clone(),
            payload: record.payload.clone(),
            dedup_key: record.dedup_key.clone(),
            inserted_at: record.inserted_at,
        }
    }

    /// A signal for [`StepContext::for_test`]: `payload` is JSON text.
    pub fn for_test(id: i64, name: &str, payload: &str) -> Self {
        Self {
            id: SignalId::new(id),
            name: name.to_owned(),
            payload: payload.to_owned(),
            dedup_key: None,
            inserted_at: SystemTime::now(),
        }
    }

    /// Its id.
    pub fn id(&self) -> SignalId {
        self.id
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its payload, decoded.
    ///
    /// # Errors
    ///
    /// When the payload does not decode as a `T`.
    pub fn payload<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(&self.payload)
    }

    /// Its payload as JSON text (as stored: `jsonb` normalizes spacing and key order).
    pub fn raw_payload(&self) -> &str {
        &self.payload
    }

    /// The sender's deduplication key.
    pub fn dedup_key(&self) -> Option<&str> {
        self.dedup_key.as_deref()
    }

    /// When it was delivered.
    pub fn inserted_at(&self) -> SystemTime {
        self.inserted_at
    }
}

/// One child, as its parent's step sees it in [`StepContext::children`].
///
/// # Examples
///
/// ```
/// use durable_runtime::fsm::{ChildInfo, InstanceId, Status};
///
/// let failed = ChildInfo::for_test(InstanceId::new(3), "task", Status::Failed, None, Some("boom"));
/// assert_eq!(failed.status(), Status::Failed);
/// assert_eq!(failed.last_error(), Some("boom"));
/// assert_eq!(failed.result::<u32>().unwrap(), None);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildInfo {
    id: InstanceId,
    fsm: String,
    status: Status,
    state: String,
    result: Option<String>,
    last_error: Option<String>,
}

impl ChildInfo {
    fn from_record(record: &ChildRecord) -> Self {
        Self {
            id: record.id,
            fsm: record.fsm.clone(),
            status: record.status,
            state: record.state.clone(),
            result: record.result.clone(),
            last_error: record.last_error.clone(),
        }
    }

    /// A child for [`StepContext::with_children`]: `result` is JSON text.
    pub fn for_test(
        id: InstanceId,
        fsm: &str,
        status: Status,
        result: Option<&str>,
        last_error: Option<&str>,
    ) -> Self {
        Self {
            id,
            fsm: fsm.to_owned(),
            status,
            state: "{}".to_owned(),
            result: result.map(str::to_owned),
            last_error: last_error.map(str::to_owned),
        }
    }

    /// Its id.
    pub fn id(&self) -> InstanceId {
        self.id
    }

    /// Its FSM's name.
    pub fn fsm(&self) -> &str {
        &self.fsm
    }

    /// Its status.
    pub fn status(&self) -> Status {
        self.status
    }

    /// Its state, decoded.
    ///
    /// # Errors
    ///
    /// When the state does not decode as a `T`.
    pub fn state<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_str(&self.state)
    }

    /// Its result, decoded, once it is done (`None` before, or when it failed).
    ///
    /// # Errors
    ///
    /// When the result does not decode as a `T`.
    pub fn result<T: DeserializeOwned>(&self) -> Result<Option<T>, serde_json::Error> {
        self.result.as_deref().map(serde_json::from_str).transpose()
    }

    /// Its error, once it failed.
    pub fn last_error(&self) -> Option<&str> {
        self.last_error.as_deref()
    }
}
