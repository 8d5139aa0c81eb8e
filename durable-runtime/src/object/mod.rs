//! The traits `#[durable_object]` implements, and per-type options.

pub(crate) mod chain;
pub(crate) mod context;
pub(crate) mod durability;
pub(crate) mod handle;
pub(crate) mod type_map;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::alarms::Alarm;
use crate::object::context::Context;

/// How an alarm handler started by [`DurableObject::alarm`] runs: a synchronous handler has
/// run to its end, an `async` one is a future to poll. A synchronous handler's firing needs no
/// future (nor its allocation).
///
/// # Examples
///
/// ```
/// use durable_runtime::{AlarmRun, BoxError};
///
/// fn sync_result(run: AlarmRun<'_>) -> Option<Result<(), BoxError>> {
///     match run {
///         AlarmRun::Done(result) => Some(result),
///         AlarmRun::Running(_) => None,
///     }
/// }
///
/// assert!(sync_result(AlarmRun::Done(Ok(()))).is_some_and(|done| done.is_ok()));
/// assert!(sync_result(AlarmRun::Running(Box::pin(async { Ok(()) }))).is_none());
/// ```
pub enum AlarmRun<'a> {
    /// A synchronous handler ran: its result.
    Done(Result<(), BoxError>),
    /// An `async` handler: the future that runs it.
    Running(BoxFuture<'a, Result<(), BoxError>>),
}

impl std::fmt::Debug for AlarmRun<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Done(result) => f.debug_tuple("Done").field(result).finish(),
            Self::Running(_) => f.write_str("Running(..)"),
        }
    }
}

/// A boxed, sendable future, as handlers and hooks return it.
///
/// # Examples
///
/// ```
/// use durable_runtime::BoxFuture;
///
/// fn double(n: i64) -> BoxFuture<'static, i64> {
///     Box::pin(async move { n * 2 })
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// assert_eq!(double(21).await, 42);
/// # }
/// ```
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// An error from a hook, boxed.
///
/// An `#[after_load]` hook or an `#[alarm]` handler may return `Result<(), E>` for any `E`
/// that converts into it: a `String`, an `std::io::Error`, your own error type.
///
/// # Examples
///
/// ```
/// use durable_runtime::BoxError;
///
/// let from_string: BoxError = String::from("disk full").into();
/// assert_eq!(from_string.to_string(), "disk full");
///
/// let from_io: BoxError = std::io::Error::other("connection reset").into();
/// assert_eq!(from_io.to_string(), "connection reset");
/// ```
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The state half of a durable object, implemented by `#[durable_object]` on a struct.
///
/// The macro derives serde's traits with container-level defaults (so a stored state that lacks
/// a field added later takes that field's default, and unknown stored fields are ignored),
/// implements [`Default`] from the `#[field(default = ..)]` expressions and fills in the
/// type name and [options](ObjectOptions).
///
/// # Examples
///
/// ```
/// use durable_runtime::{durable_object, DurableObject};
///
/// #[durable_object(hibernate_after = "10m")]
/// pub struct Counter {
///     #[field(default = 10)]
///     count: i64,
/// }
///
/// #[durable_object]
/// impl Counter {}
///
/// assert_eq!(Counter::TYPE_NAME, "Counter");
/// assert_eq!(Counter::default().count, 10);
/// assert_eq!(
///     Counter::options().hibernate_after,
///     Some(std::time::Duration::from_secs(600))
/// );
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a durable object",
    label = "not a durable object",
    note = "add `#[durable_object]` to the struct `{Self}` (its state) as well as to an `impl {Self}` block (its handlers)"
)]
pub trait DurableObject:
    Serialize + DeserializeOwned + Default + Handlers + Send + Sync + 'static
{
    /// The name this type is stored under (the struct's name unless `name = ".."` is given).
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{durable_object, DurableObject};
    ///
    /// #[durable_object(name = "billing.Invoice")]
    /// pub struct Invoice { total: u64 }
    ///
    /// #[durable_object]
    /// impl Invoice {}
    ///
    /// assert_eq!(Invoice::TYPE_NAME, "billing.Invoice");
    /// ```
    const TYPE_NAME: &'static str;

    /// The options declared on the struct attribute. Options it does not declare are unset
    /// here; [`Runtime::options_of`](crate::Runtime::options_of) gives the ones the type runs
    /// with.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::{durable_object, DurableObject};
    ///
    /// #[durable_object(hibernate_after = "1m", queue_capacity = 64)]
    /// pub struct Session { user: String }
    ///
    /// #[durable_object]
    /// impl Session {}
    ///
    /// let options = Session::options();
    /// assert_eq!(options.hibernate_after, Some(Duration::from_secs(60)));
    /// assert_eq!(options.queue_capacity, Some(64));
    /// assert_eq!(options.call_timeout, None);
    /// ```
    fn options() -> ObjectOptions {
        ObjectOptions::new()
    }

    /// The state's fields as the struct declares them: names and types, in order. Generated
    /// by `#[durable_object]`; see [`describe`](DurableObject::describe).
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{durable_object, DurableObject};
    ///
    /// #[durable_object]
    /// pub struct Session { user: String, expires_at: Option<u64> }
    ///
    /// #[durable_object]
    /// impl Session {}
    ///
    /// let names: Vec<_> = Session::FIELDS.iter().map(|field| field.name).collect();
    /// assert_eq!(names, ["user", "expires_at"]);
    /// ```
    const FIELDS: &'static [crate::describe::FieldSignature] = &[];

    /// The type described: its name, fields (with their defaults as JSON), handlers, alarms
    /// and declared options. See [`TypeDescription`](crate::describe::TypeDescription).
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{durable_object, DurableObject};
    ///
    /// #[durable_object]
    /// pub struct Counter { #[field(default = 1)] step: i64 }
    ///
    /// #[durable_object]
    /// impl Counter {
    ///     #[handler]
    ///     fn handle_step(&self) -> i64 { self.step }
    /// }
    ///
    /// let description = Counter::describe();
    /// assert_eq!(description.fields[0].default, Some(serde_json::json!(1)));
    /// assert_eq!(description.handlers[0].name, "step");
    /// ```
    fn describe() -> crate::describe::TypeDescription {
        crate::describe::describe::<Self>()
    }
}

/// The behaviour half of a durable object, implemented by `#[durable_object]` on an impl
/// block: the after-load hook (and, through the typed clients it generates, the handlers).
///
/// Its methods are called by the runtime, not by users: they run the `#[after_load]` hook and
/// the `#[alarm]` handlers declared in the impl block.
///
/// # Examples
///
/// ```
/// use durable_runtime::{durable_object, MemoryStorage, Runtime};
///
/// #[durable_object]
/// pub struct Visitor { loads: u32 }
///
/// #[durable_object]
/// impl Visitor {
///     #[after_load]
///     fn loaded(&mut self) { self.loads += 1; }
///
///     #[handler]
///     fn handle_loads(&self) -> u32 { self.loads }
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let rt = Runtime::new(MemoryStorage::new());
/// assert_eq!(Visitor::loads(&rt, "a").await.unwrap(), 1);
/// # }
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` has a `#[durable_object]` struct but no `#[durable_object]` impl block",
    label = "no handlers declared for `{Self}`",
    note = "add `#[durable_object] impl {Self} {{ .. }}` holding its `#[handler]` methods (it may be empty)"
)]
pub trait Handlers: Sized {
    /// The handlers as the impl block declares them, in source order. Generated by
    /// `#[durable_object]`; see [`HandlerSignature`](crate::describe::HandlerSignature).
    const HANDLER_SIGNATURES: &'static [crate::describe::HandlerSignature] = &[];

    /// The names of the `#[alarm]` handlers, in source order. Generated by `#[durable_object]`.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{durable_object, Handlers};
    ///
    /// #[durable_object]
    /// pub struct Job { runs: u32 }
    ///
    /// #[durable_object]
    /// impl Job {
    ///     #[alarm]
    ///     fn run(&mut self) { self.runs += 1; }
    /// }
    ///
    /// assert_eq!(Job::ALARM_NAMES, ["run"]);
    /// ```
    const ALARM_NAMES: &'static [&'static str] = &[];

    /// Runs once after the state is loaded (or created) and before the object accepts calls.
    /// If it changes the state, the new state is committed first.
    ///
    /// `#[durable_object]` implements it from the `#[after_load]` method, if any. If the hook
    /// fails, the call that started the object fails with
    /// [`Error::AfterLoad`](crate::Error::AfterLoad).
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{durable_object, Context, Error, MemoryStorage, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Account { balance: i64 }
    ///
    /// #[durable_object]
    /// impl Account {
    ///     #[after_load]
    ///     fn check(&mut self, ctx: &Context) -> Result<(), String> {
    ///         if ctx.id().starts_with("legacy:") {
    ///             return Err("legacy accounts are read-only".to_owned());
    ///         }
    ///         Ok(())
    ///     }
    ///
    ///     #[handler]
    ///     fn handle_balance(&self) -> i64 { self.balance }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::new(MemoryStorage::new());
    /// assert_eq!(Account::balance(&rt, "acct:1").await.unwrap(), 0);
    /// let err = Account::balance(&rt, "legacy:1").await.unwrap_err();
    /// assert!(matches!(err, Error::AfterLoad { .. }));
    /// # }
    /// ```
    fn after_load<'a>(&'a mut self, ctx: &'a Context) -> BoxFuture<'a, Result<(), BoxError>> {
        let _ = ctx;
        Box::pin(std::future::ready(Ok(())))
    }

    /// Runs the `#[alarm]` handler called `name` (`attempt` is 1 on the first try) with the
    /// argument stored with the alarm (`payload`, if it was set with one), or returns `None` if
    /// the type declares no alarm of that name: a synchronous handler runs here, to its end
    /// ([`AlarmRun::Done`]), an `async` one is returned as its future
    /// ([`AlarmRun::Running`]). An argument that does not decode as the handler's argument type
    /// fails the attempt with an [`AlarmArgsError`](crate::AlarmArgsError).
    ///
    /// `#[durable_object]` implements it from the `#[alarm]` methods; the alarm scheduler
    /// calls it when an alarm is due.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::{durable_object, MemoryStorage, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Reminder { attempts: Vec<u32> }
    ///
    /// #[durable_object]
    /// impl Reminder {
    ///     #[alarm]
    ///     fn ring(&mut self, attempt: u32) { self.attempts.push(attempt); }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let rt = Runtime::builder(MemoryStorage::new()).clock_follows_tokio().build();
    /// rt.schedule_alarm("r1", Reminder::RING, Duration::from_secs(60)).await.unwrap();
    /// tokio::time::sleep(Duration::from_secs(120)).await;
    /// let state = rt.read_state::<Reminder>("r1").await.unwrap().unwrap();
    /// assert_eq!(state.attempts, [1]);
    /// # }
    /// ```
    fn alarm<'a>(
        &'a mut self,
        ctx: &'a Context,
        name: &str,
        attempt: u32,
        payload: Option<&[u8]>,
    ) -> Option<AlarmRun<'a>> {
        let _ = (ctx, name, attempt, payload);
        None
    }
}

/// Lifecycle options of one object type.
///
/// Unset options inherit the runtime-wide defaults. The precedence, lowest first, is: the
/// runtime default, the value declared on `#[durable_object(..)]`, an override given when the
/// type is registered with the runtime.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use durable_runtime::ObjectOptions;
///
/// let options = ObjectOptions::new()
///     .with_hibernate_after(Duration::from_secs(60))
///     .with_shutdown_after(Duration::from_secs(3600));
/// assert_eq!(options.shutdown_after, Some(Duration::from_secs(3600)));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ObjectOptions {
    /// Inactivity after which the object drops its decoded state but stays registered.
    pub hibernate_after: Option<Duration>,
    /// Inactivity after which the object leaves memory entirely.
    pub shutdown_after: Option<Duration>,
    /// The longest a handler may run before its call fails with a timeout.
    pub call_timeout: Option<Duration>,
    /// How many calls may wait in the object's queue before new ones are refused.
    pub queue_capacity: Option<usize>,
    /// The most keys in one object's key-value storage
    /// ([`DEFAULT_MAX_KEYS`](crate::DEFAULT_MAX_KEYS) if unset).
    pub kv_max_keys: Option<u64>,
    /// The largest encoded value one key may hold, in bytes
    /// ([`DEFAULT_MAX_VALUE_BYTES`](crate::DEFAULT_MAX_VALUE_BYTES) if unset).
    pub kv_max_value_bytes: Option<u64>,
    /// The most bytes (keys and values) in one object's key-value storage
    /// ([`DEFAULT_MAX_BYTES`](crate::DEFAULT_MAX_BYTES) if unset).
    pub kv_max_bytes: Option<u64>,
    /// The byte budget of a live object's key-value read cache
    /// ([`DEFAULT_CACHE_BYTES`](crate::DEFAULT_CACHE_BYTES) if unset).
    pub kv_cache_bytes: Option<u64>,
    /// The most alarms one object may have
    /// ([`AlarmSettings::max_alarms_per_object`](crate::AlarmSettings::max_alarms_per_object)
    /// if unset).
    pub max_alarms: Option<u64>,
}

impl ObjectOptions {
    /// Options with nothing set.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::ObjectOptions;
    ///
    /// const OPTIONS: ObjectOptions = ObjectOptions::new();
    /// assert_eq!(OPTIONS, ObjectOptions::default());
    /// assert_eq!(OPTIONS.hibernate_after, None);
    /// ```
    pub const fn new() -> Self {
        Self {
            hibernate_after: None,
            shutdown_after: None,
            call_timeout: None,
            queue_capacity: None,
            kv_max_keys: None,
            kv_max_value_bytes: None,
            kv_max_bytes: None,
            kv_cache_bytes: None,
            max_alarms: None,
        }
    }

    /// Sets `max_alarms`: the most alarms per object, however they are set (by the object's
    /// handlers or from outside it). A commit that would leave the object with more fails with
    /// [`Error::TooManyAlarms`](crate::Error::TooManyAlarms) and writes nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::ObjectOptions;
    ///
    /// let options = ObjectOptions::new().with_max_alarms(10);
    /// assert_eq!(options.max_alarms, Some(10));
    /// ```
    pub const fn with_max_alarms(mut self, max: u64) -> Self {
        self.max_alarms = Some(max);
        self
    }

    /// Sets `kv_max_keys`: the most keys per object.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::ObjectOptions;
    ///
    /// let options = ObjectOptions::new().with_kv_max_keys(100);
    /// assert_eq!(options.kv_max_keys, Some(100));
    /// ```
    pub const fn with_kv_max_keys(mut self, value: u64) -> Self {
        self.kv_max_keys = Some(value);
        self
    }

    /// Sets `kv_max_value_bytes`: the largest encoded value, in bytes.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::ObjectOptions;
    ///
    /// let options = ObjectOptions::new().with_kv_max_value_bytes(4096);
    /// assert_eq!(options.kv_max_value_bytes, Some(4096));
    /// ```
    pub const fn with_kv_max_value_bytes(mut self, value: u64) -> Self {
        self.kv_max_value_bytes = Some(value);
        self
    }

    /// Sets `kv_max_bytes`: the most bytes (keys and values) per object.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::ObjectOptions;
    ///
    /// let options = ObjectOptions::new().with_kv_max_bytes(1048576);
    /// assert_eq!(options.kv_max_bytes, Some(1048576));
    /// ```
    pub const fn with_kv_max_bytes(mut self, value: u64) -> Self {
        self.kv_max_bytes = Some(value);
        self
    }

    /// Sets `kv_cache_bytes`.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::ObjectOptions;
    ///
    /// let options = ObjectOptions::new().with_kv_cache_bytes(64 << 10);
    /// assert_eq!(options.kv_cache_bytes, Some(65536));
    /// ```
    pub const fn with_kv_cache_bytes(mut self, bytes: u64) -> Self {
        self.kv_cache_bytes = Some(bytes);
        self
    }

    /// Sets `hibernate_after`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::ObjectOptions;
    ///
    /// let options = ObjectOptions::new().with_hibernate_after(Duration::from_secs(60));
    /// assert_eq!(options.hibernate_after, Some(Duration::from_secs(60)));
    /// ```
    pub const fn with_hibernate_after(mut self, after: Duration) -> Self {
        self.hibernate_after = Some(after);
        self
    }

    /// Sets `shutdown_after`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::ObjectOptions;
    ///
    /// let options = ObjectOptions::new().with_shutdown_after(Duration::from_secs(3600));
    /// assert_eq!(options.shutdown_after, Some(Duration::from_secs(3600)));
    /// ```
    pub const fn with_shutdown_after(mut self, after: Duration) -> Self {
        self.shutdown_after = Some(after);
        self
    }

    /// Sets `call_timeout`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::ObjectOptions;
    ///
    /// let options = ObjectOptions::new().with_call_timeout(Duration::from_secs(5));
    /// assert_eq!(options.call_timeout, Some(Duration::from_secs(5)));
    /// ```
    pub const fn with_call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = Some(timeout);
        self
    }

    /// Sets `queue_capacity`.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::ObjectOptions;
    ///
    /// let options = ObjectOptions::new().with_queue_capacity(64);
    /// assert_eq!(options.queue_capacity, Some(64));
    /// ```
    pub const fn with_queue_capacity(mut self, capacity: usize) -> Self {
        self.queue_capacity = Some(capacity);
        self
    }

    /// These options with every unset value taken from `fallback`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::ObjectOptions;
    ///
    /// let declared = ObjectOptions::new().with_hibernate_after(Duration::from_secs(1));
    /// let defaults = ObjectOptions::new()
    ///     .with_hibernate_after(Duration::from_secs(300))
    ///     .with_queue_capacity(16);
    /// let merged = declared.or(defaults);
    /// assert_eq!(merged.hibernate_after, Some(Duration::from_secs(1)));
    /// assert_eq!(merged.queue_capacity, Some(16));
    /// ```
    pub const fn or(self, fallback: Self) -> Self {
        Self {
            hibernate_after: match self.hibernate_after {
                Some(v) => Some(v),
                None => fallback.hibernate_after,
            },
            shutdown_after: match self.shutdown_after {
                Some(v) => Some(v),
                None => fallback.shutdown_after,
            },
            call_timeout: match self.call_timeout {
                Some(v) => Some(v),
                None => fallback.call_timeout,
            },
            queue_capacity: match self.queue_capacity {
                Some(v) => Some(v),
                None => fallback.queue_capacity,
            },
            kv_max_keys: match self.kv_max_keys {
                Some(v) => Some(v),
                None => fallback.kv_max_keys,
            },
            kv_max_value_bytes: match self.kv_max_value_bytes {
                Some(v) => Some(v),
                None => fallback.kv_max_value_bytes,
            },
            kv_max_bytes: match self.kv_max_bytes {
                Some(v) => Some(v),
                None => fallback.kv_max_bytes,
            },
            kv_cache_bytes: match self.kv_cache_bytes {
                Some(v) => Some(v),
                None => fallback.kv_cache_bytes,
            },
            max_alarms: match self.max_alarms {
                Some(v) => Some(v),
                None => fallback.max_alarms,
            },
        }
    }
}

// Here rather than beside `Alarm`: an alarm names its object type, and alarms sit below objects.
impl<O: DurableObject, A> fmt::Debug for Alarm<O, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Alarm({}::{})", O::TYPE_NAME, self.name())
    }
}
