//! What a handler knows about where it runs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::SystemTime;

use crate::alarms::args::AlarmArgsError;
use crate::alarms::{Alarm, AlarmTime};
use crate::error::Error;
use crate::kv::KvStorage;
use crate::kv::staged::Staged;
use crate::kv::view::KvCell;
use crate::object::DurableObject;
use crate::object::chain::{Chain, Root};
use crate::object::handle::Runtime;
use crate::storage::{AlarmChange, FsmChanges, ObjectKey};

/// Passed to handlers and hooks that ask for it (an argument of type `&Context`): the object's
/// id, the runtime (for calling other objects) and the object's alarms.
///
/// Alarm changes made through the context are committed in the same transaction as the
/// call's state: if the handler fails or the commit fails, they never happen.
///
/// # Examples
///
/// ```
/// use durable_runtime::{durable_object, Context, MemoryStorage, Runtime};
///
/// #[durable_object]
/// pub struct Greeter {
///     greeted: u32,
/// }
///
/// #[durable_object]
/// impl Greeter {
///     #[handler]
///     fn handle_greet(&mut self, ctx: &Context) -> String {
///         self.greeted += 1;
///         format!("hello from {}", ctx.id())
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let rt = Runtime::new(MemoryStorage::new());
/// assert_eq!(Greeter::greet(&rt, "eu-1").await.unwrap(), "hello from eu-1");
/// # }
/// ```
#[derive(Debug)]
pub struct Context {
    root: Root,
    runtime: Runtime,
    alarm_changes: Mutex<Vec<AlarmChange>>,
    /// The call's key-value changes (allocated only once it makes one).
    kv: Mutex<Staged>,
    /// The call's FSM inserts and signals ([`fsm`](Self::fsm)).
    fsm: Mutex<FsmChanges>,
    writable: AtomicBool,
}

impl Context {
    #[cfg(feature = "testing")]
    pub(crate) fn new(key: ObjectKey, runtime: Runtime) -> Self {
        Self::with_root(Root::new(key, crate::kv::KvLimits::default()), runtime)
    }

    /// The context of the object whose key `root` holds.
    pub(crate) fn with_root(root: Root, runtime: Runtime) -> Self {
        Self {
            root,
            runtime,
            alarm_changes: Mutex::new(Vec::new()),
            kv: Mutex::new(Staged::default()),
            fsm: Mutex::new(FsmChanges::default()),
            writable: AtomicBool::new(true),
        }
    }

    /// A context for one run of an `async` handler: the same object and runtime, with alarm
    /// changes of its own that [`absorb`](Self::absorb) takes back. The object's task keeps
    /// committing its earlier writes while the handler runs, which it could not do while the
    /// handler borrowed the task's own context.
    pub(crate) fn fork(&self) -> Self {
        let fork = Self::with_root(self.root.clone(), self.runtime.clone());
        fork.set_writable(self.writable.load(Ordering::Relaxed));
        fork
    }

    /// Takes back the alarm changes recorded in `fork`.
    pub(crate) fn absorb(&self, fork: Self) {
        let changes = fork.take_alarm_changes();
        if !changes.is_empty() {
            let mut mine = self.changes();
            if mine.is_empty() {
                // The common case (an alarm handler removing its alarm): moved, not copied.
                *mine = changes;
            } else {
                mine.extend(changes);
            }
        }
        let kv = fork.take_kv();
        if !kv.is_empty() {
            self.staged_kv().absorb(kv);
        }
        let fsm = fork.take_fsm();
        if !fsm.is_empty() {
            self.staged_fsm().append(fsm);
        }
    }

    /// The id of the object handling the call.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{durable_object, Context, MemoryStorage, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Cart { items: u32 }
    ///
    /// #[durable_object]
    /// impl Cart {
    ///     #[handler]
    ///     fn handle_owner(&self, ctx: &Context) -> String { ctx.id().to_owned() }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::new(MemoryStorage::new());
    /// assert_eq!(Cart::owner(&rt, "user:42").await.unwrap(), "user:42");
    /// # }
    /// ```
    pub fn id(&self) -> &str {
        &self.key().object_id
    }

    /// The type name of the object handling the call (its
    /// [`TYPE_NAME`](crate::DurableObject::TYPE_NAME)).
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{durable_object, Context, MemoryStorage, Runtime};
    ///
    /// #[durable_object(name = "shop.Cart")]
    /// pub struct Cart { items: u32 }
    ///
    /// #[durable_object]
    /// impl Cart {
    ///     #[handler]
    ///     fn handle_kind(&self, ctx: &Context) -> String { ctx.object_type().to_owned() }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::new(MemoryStorage::new());
    /// assert_eq!(Cart::kind(&rt, "c1").await.unwrap(), "shop.Cart");
    /// # }
    /// ```
    pub fn object_type(&self) -> &str {
        &self.key().object_type
    }

    /// The full key of the object handling the call.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{durable_object, Context, MemoryStorage, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Cart { items: u32 }
    ///
    /// #[durable_object]
    /// impl Cart {
    ///     #[handler]
    ///     fn handle_describe(&self, ctx: &Context) -> String { ctx.key().to_string() }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::new(MemoryStorage::new());
    /// assert_eq!(Cart::describe(&rt, "c1").await.unwrap(), "Cart/c1");
    /// # }
    /// ```
    pub fn key(&self) -> &ObjectKey {
        self.root.key()
    }

    /// The chain of a call that came from outside any handler: just this object.
    pub(crate) fn own_chain(&self) -> Chain {
        self.root.chain()
    }

    /// The runtime, for calling other objects. The handler must be `async` to await the call.
    /// A call made through it from the handler waits until the state the handler started from
    /// is committed (see [`wait_committed`](Self::wait_committed)); a call to a synchronous
    /// `&self` handler goes at once.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{durable_object, Context, Error, MemoryStorage, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Order { total: u64 }
    ///
    /// #[durable_object]
    /// impl Order {
    ///     #[handler]
    ///     async fn handle_pay(&mut self, ctx: &Context, amount: u64) -> Result<u64, Error> {
    ///         self.total += amount;
    ///         Ledger::record(ctx.runtime(), "global", amount).await
    ///     }
    /// }
    /// # #[durable_object] pub struct Ledger { sum: u64 }
    /// # #[durable_object] impl Ledger {
    /// #     #[handler]
    /// #     fn handle_record(&mut self, amount: u64) -> u64 { self.sum += amount; self.sum }
    /// # }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::new(MemoryStorage::new());
    /// Order::pay(&rt, "o1", 5).await.unwrap();
    /// assert_eq!(Order::pay(&rt, "o2", 7).await.unwrap(), 12); // the ledger's sum
    /// # }
    /// ```
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// Waits until the state this handler started from is committed: the writes of the calls
    /// before it, which may still be in flight while it runs. Fails, with the error of that
    /// write, if one of them fails (the call then fails with it too).
    ///
    /// Calls to other objects made through [`runtime`](Self::runtime) from the handler's own
    /// task wait for this by themselves (all but calls of synchronous `&self` handlers, which
    /// can pass nothing on). Wait for it before anything else that leaves the object built on
    /// its state: a message sent on a channel, an HTTP request, a task spawned with the
    /// state's data. The handler's own changes are committed only after it returns.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{durable_object, Context, Error, MemoryStorage, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Order { paid: bool }
    ///
    /// #[durable_object]
    /// impl Order {
    ///     #[handler]
    ///     fn handle_pay(&mut self) { self.paid = true; }
    ///
    ///     /// Tells the outside world (an email, a queue) only what storage holds.
    ///     #[handler]
    ///     async fn handle_announce(&self, ctx: &Context) -> Result<String, Error> {
    ///         ctx.wait_committed().await?;
    ///         Ok(format!("{} paid: {}", ctx.id(), self.paid))
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::new(MemoryStorage::new());
    /// let (paid, announced) = tokio::join!(Order::pay(&rt, "o1"), Order::announce(&rt, "o1"));
    /// paid.unwrap();
    /// assert_eq!(announced.unwrap(), "o1 paid: true");
    /// # }
    /// ```
    pub async fn wait_committed(&self) -> Result<(), Error> {
        self.root.durability().wait(self.key()).await
    }

    /// The current time as the runtime's clock gives it (UTC), as
    /// [`Runtime::now`](crate::Runtime::now).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::SystemTime;
    /// use durable_runtime::{durable_object, Context, MemoryStorage, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Session { last_seen: Option<SystemTime> }
    ///
    /// #[durable_object]
    /// impl Session {
    ///     #[handler]
    ///     fn handle_touch(&mut self, ctx: &Context) -> SystemTime {
    ///         *self.last_seen.insert(ctx.now())
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::new(MemoryStorage::new());
    /// let before = rt.now();
    /// let seen = Session::touch(&rt, "s1").await.unwrap();
    /// assert!(before <= seen && seen <= rt.now());
    /// # }
    /// ```
    pub fn now(&self) -> SystemTime {
        self.runtime.now()
    }

    /// Schedules `alarm` for this object, replacing an alarm of the same name.
    ///
    /// # Panics
    ///
    /// If called from a read-only (`&self`) handler, or with an alarm of another object type.
    /// The panic fails the call like any handler panic: nothing is committed.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::{durable_object, Context, MemoryStorage, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Session { expired: bool }
    ///
    /// #[durable_object]
    /// impl Session {
    ///     #[handler]
    ///     fn handle_login(&mut self, ctx: &Context) {
    ///         ctx.schedule_alarm(Session::EXPIRE, Duration::from_secs(30 * 60));
    ///     }
    ///
    ///     #[alarm]
    ///     fn expire(&mut self) { self.expired = true; }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::new(MemoryStorage::new());
    /// Session::login(&rt, "s1").await.unwrap();
    /// Session::login(&rt, "s1").await.unwrap(); // replaces the first schedule
    /// let alarms = rt.list_alarms::<Session>("s1").await.unwrap();
    /// assert_eq!(alarms.len(), 1);
    /// assert_eq!(alarms[0].name, "expire");
    /// # }
    /// ```
    pub fn schedule_alarm<O: DurableObject>(&self, alarm: Alarm<O>, when: impl Into<AlarmTime>) {
        self.check_alarm::<O>();
        self.set_alarm(alarm.name(), when.into(), None);
    }

    /// Schedules `alarm`, whose handler takes an argument, for this object with `args`,
    /// replacing an alarm of the same name (and its argument). The argument is stored with the
    /// alarm (encoded as JSON) and handed to the handler when the alarm fires; the constant's
    /// type names the argument type, so a wrong one does not compile.
    ///
    /// # Errors
    ///
    /// [`AlarmArgsError::Encode`](crate::AlarmArgsError::Encode) if `args` cannot be encoded
    /// (a map with non-string keys, say); nothing is scheduled then.
    ///
    /// # Panics
    ///
    /// As [`schedule_alarm`](Context::schedule_alarm).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::{durable_object, AlarmArgsError, Context, MemoryStorage, Runtime};
    /// use serde::{Deserialize, Serialize};
    ///
    /// #[derive(Serialize, Deserialize)]
    /// pub struct Reminder { text: String }
    ///
    /// #[durable_object]
    /// pub struct Calendar { said: Vec<String> }
    ///
    /// #[durable_object]
    /// impl Calendar {
    ///     #[handler]
    ///     fn handle_plan(&mut self, ctx: &Context, text: String) -> Result<(), AlarmArgsError> {
    ///         ctx.schedule_alarm_with(Calendar::REMIND, &Reminder { text }, Duration::from_secs(60))
    ///     }
    ///
    ///     #[alarm]
    ///     fn remind(&mut self, reminder: Reminder) { self.said.push(reminder.text); }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::new(MemoryStorage::new());
    /// Calendar::plan(&rt, "c1", "stand-up".into()).await.unwrap();
    /// let alarms = rt.list_alarms::<Calendar>("c1").await.unwrap();
    /// assert_eq!(alarms[0].payload.as_deref(), Some(&br#"{"text":"stand-up"}"#[..]));
    /// # }
    /// ```
    pub fn schedule_alarm_with<O: DurableObject, A: serde::Serialize>(
        &self,
        alarm: Alarm<O, A>,
        args: &A,
        when: impl Into<AlarmTime>,
    ) -> Result<(), AlarmArgsError> {
        self.check_alarm::<O>();
        let payload = crate::alarms::args::encode(alarm.name(), args)?;
        self.set_alarm(alarm.name(), when.into(), Some(payload));
        Ok(())
    }

    /// Stages `change`, made from outside the object through one of its calls.
    pub(crate) fn push_alarm_change(&self, change: AlarmChange) {
        self.check_writable();
        self.changes().push(change);
    }

    /// Stages the alarm `name` due `when`, with `payload` as its stored argument.
    pub(crate) fn set_alarm(&self, name: &str, when: AlarmTime, payload: Option<Vec<u8>>) {
        let due_at = crate::storage::truncate_to_micros(when.resolve(self.now()));
        self.changes().push(AlarmChange::Set {
            name: name.to_owned(),
            due_at,
            payload,
        });
    }

    /// Cancels `alarm` for this object, if it is scheduled.
    ///
    /// # Panics
    ///
    /// As [`schedule_alarm`](Context::schedule_alarm).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::{durable_object, Context, MemoryStorage, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Session { expired: bool }
    ///
    /// #[durable_object]
    /// impl Session {
    ///     #[handler]
    ///     fn handle_login(&mut self, ctx: &Context) {
    ///         ctx.schedule_alarm(Session::EXPIRE, Duration::from_secs(30 * 60));
    ///     }
    ///
    ///     #[handler]
    ///     fn handle_logout(&mut self, ctx: &Context) { ctx.cancel_alarm(Session::EXPIRE); }
    ///
    ///     #[alarm]
    ///     fn expire(&mut self) { self.expired = true; }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::new(MemoryStorage::new());
    /// Session::login(&rt, "s1").await.unwrap();
    /// Session::logout(&rt, "s1").await.unwrap();
    /// assert!(rt.list_alarms::<Session>("s1").await.unwrap().is_empty());
    /// # }
    /// ```
    pub fn cancel_alarm<O: DurableObject, A>(&self, alarm: Alarm<O, A>) {
        self.check_alarm::<O>();
        self.changes().push(AlarmChange::Cancel {
            name: alarm.name().to_owned(),
        });
    }

    /// Cancels every alarm of this object.
    ///
    /// # Panics
    ///
    /// If called from a read-only (`&self`) handler.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::{durable_object, Context, MemoryStorage, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Job { runs: u32 }
    ///
    /// #[durable_object]
    /// impl Job {
    ///     #[handler]
    ///     fn handle_start(&mut self, ctx: &Context) {
    ///         ctx.schedule_alarm(Job::RUN, Duration::from_secs(60));
    ///         ctx.schedule_alarm(Job::REPORT, Duration::from_secs(3600));
    ///     }
    ///
    ///     #[handler]
    ///     fn handle_stop(&mut self, ctx: &Context) { ctx.cancel_all_alarms(); }
    ///
    ///     #[alarm]
    ///     fn run(&mut self) { self.runs += 1; }
    ///
    ///     #[alarm]
    ///     fn report(&mut self) {}
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::new(MemoryStorage::new());
    /// Job::start(&rt, "j1").await.unwrap();
    /// assert_eq!(rt.list_alarms::<Job>("j1").await.unwrap().len(), 2);
    /// Job::stop(&rt, "j1").await.unwrap();
    /// assert!(rt.list_alarms::<Job>("j1").await.unwrap().is_empty());
    /// # }
    /// ```
    pub fn cancel_all_alarms(&self) {
        self.check_writable();
        self.changes().push(AlarmChange::CancelAll);
    }

    /// Removes the fired alarm `name` in the call's commit, if it is still claimed.
    pub(crate) fn finish_alarm(&self, name: String, claimed_at: SystemTime) {
        self.changes()
            .push(AlarmChange::Finish { name, claimed_at });
    }

    /// Removes the alarm `name` in the call's commit (a schedule made later in the same call
    /// still applies).
    pub(crate) fn remove_alarm(&self, name: String) {
        self.changes().push(AlarmChange::Cancel { name });
    }

    fn check_alarm<O: DurableObject>(&self) {
        self.check_writable();
        assert!(
            O::TYPE_NAME == self.key().object_type,
            "alarm of `{}` used by an object of type `{}`",
            O::TYPE_NAME,
            self.key().object_type
        );
    }

    fn check_writable(&self) {
        assert!(
            self.writable.load(Ordering::Relaxed),
            "alarms can only be changed by `&mut self` handlers, hooks and alarms"
        );
    }

    /// Marks whether the running call may change alarms.
    pub(crate) fn set_writable(&self, writable: bool) {
        self.writable.store(writable, Ordering::Relaxed);
    }

    fn changes(&self) -> MutexGuard<'_, Vec<AlarmChange>> {
        self.alarm_changes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Alarm changes recorded during the current call, to be committed with its state.
    pub(crate) fn take_alarm_changes(&self) -> Vec<AlarmChange> {
        std::mem::take(&mut *self.changes())
    }

    /// The object's key-value storage: typed reads, and changes committed with the call's
    /// state (see [`KvStorage`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{Context, KvError, MemoryStorage, Runtime, durable_object};
    ///
    /// #[durable_object]
    /// pub struct Cache {
    ///     hits: u64,
    /// }
    ///
    /// #[durable_object]
    /// impl Cache {
    ///     #[handler]
    ///     async fn handle_remember(&mut self, ctx: &Context, key: String, value: u32) -> Result<(), KvError> {
    ///         ctx.storage().put(&key, &value)
    ///     }
    ///
    ///     #[handler]
    ///     async fn handle_recall(&self, ctx: &Context, key: String) -> Result<Option<u32>, KvError> {
    ///         ctx.storage().get(&key).await
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let rt = Runtime::builder(MemoryStorage::new()).register::<Cache>().build();
    /// Cache::remember(&rt, "c", "answer".into(), 42).await?;
    /// assert_eq!(Cache::recall(&rt, "c", "answer".into()).await?, Some(42));
    /// assert_eq!(Cache::recall(&rt, "c", "question".into()).await?, None);
    /// # Ok(()) }
    /// ```
    pub fn storage(&self) -> KvStorage<'_> {
        KvStorage::new(self)
    }

    pub(crate) fn staged_kv(&self) -> MutexGuard<'_, Staged> {
        self.kv
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn kv_cell(&self) -> &KvCell {
        self.root.kv()
    }

    pub(crate) fn is_writable(&self) -> bool {
        self.writable.load(Ordering::Relaxed)
    }

    /// Takes the call's key-value changes.
    pub(crate) fn take_kv(&self) -> Staged {
        let mut staged = self.staged_kv();
        if staged.is_empty() {
            return Staged::default();
        }
        std::mem::take(&mut *staged)
    }

    pub(crate) fn staged_fsm(&self) -> MutexGuard<'_, FsmChanges> {
        self.fsm
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes the call's FSM changes.
    pub(crate) fn take_fsm(&self) -> FsmChanges {
        std::mem::take(&mut *self.staged_fsm())
    }

    /// Drops every change the call staged (alarms, key-value storage and FSM changes).
    pub(crate) fn discard_changes(&self) {
        self.take_alarm_changes();
        self.take_kv();
        self.take_fsm();
    }
}
