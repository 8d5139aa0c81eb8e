//! What a handler knows about where it runs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::SystemTime;

use crate::alarms::{Alarm, AlarmTime};
use crate::chain::{Chain, Root};
use crate::object::DurableObject;
use crate::runtime::Runtime;
use crate::storage::{AlarmChange, ObjectKey};

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
    writable: AtomicBool,
}

impl Context {
    #[cfg(feature = "testing")]
    pub(crate) fn new(key: ObjectKey, runtime: Runtime) -> Self {
        Self::with_root(Root::new(key), runtime)
    }

    /// The context of the object whose key `root` holds.
    pub(crate) fn with_root(root: Root, runtime: Runtime) -> Self {
        Self {
            root,
            runtime,
            alarm_changes: Mutex::new(Vec::new()),
            writable: AtomicBool::new(true),
        }
    }

    /// The id of the object handling the call.
    pub fn id(&self) -> &str {
        &self.key().object_id
    }

    /// The type name of the object handling the call.
    pub fn object_type(&self) -> &str {
        &self.key().object_type
    }

    /// The full key of the object handling the call.
    pub fn key(&self) -> &ObjectKey {
        self.root.key()
    }

    /// The chain of a call that came from outside any handler: just this object.
    pub(crate) fn own_chain(&self) -> Chain {
        self.root.chain()
    }

    /// The runtime, for calling other objects.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// The current time as the runtime's clock gives it (UTC).
    pub fn now(&self) -> SystemTime {
        self.runtime.now()
    }

    /// Schedules `alarm` for this object, replacing an alarm of the same name.
    ///
    /// # Panics
    ///
    /// If called from a read-only (`&self`) handler, or with an alarm of another object type.
    /// The panic fails the call like any handler panic: nothing is committed.
    pub fn schedule_alarm<O: DurableObject>(&self, alarm: Alarm<O>, when: impl Into<AlarmTime>) {
        self.check_alarm::<O>();
        let due_at = crate::storage::truncate_to_micros(when.into().resolve(self.now()));
        self.changes().push(AlarmChange::Set {
            name: alarm.name().to_owned(),
            due_at,
        });
    }

    /// Cancels `alarm` for this object, if it is scheduled.
    ///
    /// # Panics
    ///
    /// As [`schedule_alarm`](Context::schedule_alarm).
    pub fn cancel_alarm<O: DurableObject>(&self, alarm: Alarm<O>) {
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
}
