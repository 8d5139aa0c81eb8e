//! What a handler knows about where it runs.

use std::sync::{Mutex, MutexGuard};

use crate::runtime::Runtime;
use crate::storage::{AlarmChange, ObjectKey};

/// Passed to handlers and hooks that ask for it (an argument of type `&Context`): the object's
/// id and the runtime, for calling other objects.
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
    key: ObjectKey,
    runtime: Runtime,
    alarm_changes: Mutex<Vec<AlarmChange>>,
}

impl Context {
    pub(crate) fn new(key: ObjectKey, runtime: Runtime) -> Self {
        Self {
            key,
            runtime,
            alarm_changes: Mutex::new(Vec::new()),
        }
    }

    /// The id of the object handling the call.
    pub fn id(&self) -> &str {
        &self.key.object_id
    }

    /// The type name of the object handling the call.
    pub fn object_type(&self) -> &str {
        &self.key.object_type
    }

    /// The full key of the object handling the call.
    pub fn key(&self) -> &ObjectKey {
        &self.key
    }

    /// The runtime, for calling other objects.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
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
