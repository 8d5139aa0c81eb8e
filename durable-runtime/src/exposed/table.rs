//! The table `#[durable_object(expose)]` generates for a type ([`Exposed`]), and the runtime's
//! registry of exposed types: each type's table with the runtime's typed operations on it,
//! instantiated for the type so that they can be reached by its name.

use std::fmt;

use serde_json::Value;

use super::{CallByNameError, HandlerSchemas};
use crate::activation::call::Access;
use crate::alarms::{Alarm, AlarmTime};
use crate::error::Error;
use crate::inventory::{LiveStatus, ObjectView};
use crate::object::handle::Runtime;
use crate::object::{BoxFuture, DurableObject, ObjectOptions};
use crate::runtime::{ObjectStatus, RuntimeBuilder};
use crate::storage::{AlarmKey, AlarmPage, AlarmRecord, IdPage};

/// How an exposed handler is called: the runtime, the object id and the JSON arguments.
pub type Invoke =
    for<'a> fn(&'a Runtime, &'a str, Value) -> BoxFuture<'a, Result<Value, CallByNameError>>;

/// One handler of an exposed type's table: its name, access and argument names, and how to
/// call it with JSON arguments.
///
/// # Examples
///
/// ```
/// use durable_runtime::{durable_object, Access, Exposed};
///
/// #[durable_object]
/// pub struct Counter { count: i64 }
///
/// #[durable_object(expose)]
/// impl Counter {
///     #[handler]
///     fn handle_add(&mut self, by: i64) -> i64 { self.count += by; self.count }
/// }
///
/// let add = &Counter::HANDLERS[0];
/// assert_eq!((add.name, add.access, add.arguments), ("add", Access::Write, &["by"][..]));
/// ```
#[derive(Clone, Copy)]
pub struct ExposedHandler {
    /// The handler's name, as its typed client is named.
    pub name: &'static str,
    /// Whether it reads or writes the state.
    pub access: Access,
    /// The names of its arguments, in order: the fields of its JSON arguments object.
    pub arguments: &'static [&'static str],
    /// Decodes the arguments and calls the typed client.
    pub invoke: Invoke,
    /// The JSON schemas of its arguments object, output and error: generated with the
    /// `schemars` feature, `None` without it (see [`HandlerSchemas`]).
    pub schemas: fn() -> Option<HandlerSchemas>,
}

impl fmt::Debug for ExposedHandler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExposedHandler")
            .field("name", &self.name)
            .field("access", &self.access)
            .field("arguments", &self.arguments)
            .finish_non_exhaustive()
    }
}

/// A durable object whose handlers are callable by name: implemented by
/// `#[durable_object(expose)]` on the impl block.
///
/// # Examples
///
/// ```
/// use durable_runtime::{durable_object, Exposed};
///
/// #[durable_object]
/// pub struct Counter { count: i64 }
///
/// #[durable_object(expose)]
/// impl Counter {
///     #[handler]
///     fn handle_get(&self) -> i64 { self.count }
///
///     #[alarm]
///     fn reset(&mut self) { self.count = 0; }
/// }
///
/// assert_eq!(Counter::HANDLERS[0].name, "get");
/// assert_eq!(Counter::ALARMS, &["reset"]);
/// ```
pub trait Exposed: DurableObject {
    /// The handlers callable by name, in source order.
    const HANDLERS: &'static [ExposedHandler];
    /// The names of the type's alarms.
    const ALARMS: &'static [&'static str];
}

/// An exposed type as the runtime lists it.
///
/// # Examples
///
/// ```
/// use durable_runtime::{durable_object, MemoryStorage, Runtime};
///
/// #[durable_object(queue_capacity = 8)]
/// pub struct Counter { count: i64 }
///
/// #[durable_object(expose)]
/// impl Counter {
///     #[handler]
///     fn handle_get(&self) -> i64 { self.count }
/// }
///
/// let rt = Runtime::builder(MemoryStorage::new()).expose::<Counter>().build();
/// let types = rt.exposed_types();
/// assert_eq!(types[0].name, "Counter");
/// assert_eq!(types[0].handlers[0].name, "get");
/// assert_eq!(types[0].options.queue_capacity, Some(8));
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ExposedType {
    /// The stored type name.
    pub name: &'static str,
    /// Its handlers callable by name.
    pub handlers: &'static [ExposedHandler],
    /// The names of its alarms.
    pub alarms: &'static [&'static str],
    /// Its options in this runtime.
    pub options: ObjectOptions,
}

/// The exposed types of one runtime, filled by the builder.
#[derive(Default)]
pub(crate) struct Registry {
    types: Vec<Entry>,
}

/// A runtime operation on one object, as a boxed future.
pub(super) type Operation<'a, T> = BoxFuture<'a, Result<T, Error>>;

/// An operation that also decodes what it was given by name, as a boxed future.
pub(super) type ByName<'a, T> = BoxFuture<'a, Result<T, CallByNameError>>;

/// One exposed type: its table, and the runtime's typed operations on it, instantiated for the
/// type so that they can be reached by its name.
pub(super) struct Entry {
    pub(super) name: &'static str,
    pub(super) handlers: &'static [ExposedHandler],
    pub(super) alarms: &'static [&'static str],
    pub(super) options: fn(&Runtime) -> ObjectOptions,
    pub(super) status: for<'a> fn(&'a Runtime, &'a str) -> Operation<'a, ObjectStatus>,
    pub(super) delete: for<'a> fn(&'a Runtime, &'a str) -> Operation<'a, bool>,
    pub(super) stop: for<'a> fn(&'a Runtime, &'a str) -> Operation<'a, bool>,
    pub(super) reload: for<'a> fn(&'a Runtime, &'a str) -> Operation<'a, bool>,
    pub(super) replace_state: for<'a> fn(&'a Runtime, &'a str, Value, u64) -> ByName<'a, u64>,
    pub(super) list_alarms: for<'a> fn(&'a Runtime, &'a str) -> Operation<'a, Vec<AlarmRecord>>,
    pub(super) list_ids: for<'a> fn(&'a Runtime, Option<&'a str>, usize) -> Operation<'a, IdPage>,
    pub(super) schedule_alarm:
        for<'a> fn(&'a Runtime, &'a str, &'static str, AlarmTime) -> Operation<'a, ()>,
    pub(super) cancel_alarm: for<'a> fn(&'a Runtime, &'a str, &'static str) -> Operation<'a, ()>,
    pub(super) list_live: fn(&Runtime, LiveStatus, Option<&str>, usize) -> IdPage,
    pub(super) inspect: for<'a> fn(&'a Runtime, &'a str) -> Operation<'a, Option<ObjectView>>,
    pub(super) list_dead_alarms:
        for<'a> fn(&'a Runtime, Option<&'a AlarmKey>, usize) -> Operation<'a, AlarmPage>,
    pub(super) requeue_dead_alarm:
        for<'a> fn(&'a Runtime, &'a str, &'static str) -> Operation<'a, bool>,
}

impl Entry {
    /// The alarm `alarm` of this type, by its stored name.
    pub(super) fn alarm(&self, alarm: &str) -> Result<&'static str, CallByNameError> {
        self.alarms
            .iter()
            .copied()
            .find(|name| *name == alarm)
            .ok_or_else(|| CallByNameError::UnknownAlarm {
                type_name: self.name.to_owned(),
                alarm: alarm.to_owned(),
            })
    }

    /// The exposed handler `handler` of this type.
    pub(super) fn handler(&self, handler: &str) -> Result<&ExposedHandler, CallByNameError> {
        self.handlers
            .iter()
            .find(|exposed| exposed.name == handler)
            .ok_or_else(|| CallByNameError::UnknownHandler {
                type_name: self.name.to_owned(),
                handler: handler.to_owned(),
            })
    }

    fn of<O: Exposed>() -> Self {
        Self {
            name: O::TYPE_NAME,
            handlers: O::HANDLERS,
            alarms: O::ALARMS,
            options: Runtime::options_of::<O>,
            status: |runtime, id| Box::pin(runtime.status::<O>(id)),
            delete: |runtime, id| Box::pin(runtime.delete::<O>(id)),
            stop: |runtime, id| Box::pin(runtime.stop::<O>(id)),
            reload: |runtime, id| Box::pin(runtime.reload::<O>(id)),
            replace_state: |runtime, id, state, expected_version| {
                Box::pin(super::ops::replace_state_json::<O>(
                    runtime,
                    id,
                    state,
                    expected_version,
                ))
            },
            list_alarms: |runtime, id| Box::pin(runtime.list_alarms::<O>(id)),
            list_ids: |runtime, after, limit| Box::pin(runtime.list_ids::<O>(after, limit)),
            schedule_alarm: |runtime, id, alarm, when| {
                Box::pin(runtime.schedule_alarm(id, Alarm::<O>::new(alarm), when))
            },
            cancel_alarm: |runtime, id, alarm| {
                Box::pin(runtime.cancel_alarm(id, Alarm::<O>::new(alarm)))
            },
            list_live: Runtime::list_live::<O>,
            inspect: |runtime, id| Box::pin(runtime.inspect::<O>(id)),
            list_dead_alarms: |runtime, after, limit| {
                Box::pin(runtime.list_dead_alarms::<O>(after, limit))
            },
            requeue_dead_alarm: |runtime, id, alarm| {
                Box::pin(runtime.requeue_dead_alarm(id, Alarm::<O>::new(alarm)))
            },
        }
    }
}

impl Registry {
    /// The exposed types' entries, by name in byte order.
    pub(super) fn by_name(&self) -> Vec<&Entry> {
        let mut entries: Vec<&Entry> = self.types.iter().collect();
        entries.sort_by_key(|entry| entry.name);
        entries
    }

    pub(super) fn entry(&self, type_name: &str) -> Result<&Entry, CallByNameError> {
        self.types
            .iter()
            .find(|entry| entry.name == type_name)
            .ok_or_else(|| CallByNameError::UnknownType {
                type_name: type_name.to_owned(),
            })
    }
}

impl RuntimeBuilder {
    /// Registers an object type (as [`register`](Self::register) does) and makes its
    /// handlers callable by name ([`Runtime::call_by_name`]) and listed
    /// ([`Runtime::exposed_types`]). The type's impl block must carry
    /// `#[durable_object(expose)]`. A type registered only with `register` is not exposed.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{durable_object, MemoryStorage, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Counter { count: i64 }
    ///
    /// #[durable_object(expose)]
    /// impl Counter {
    ///     #[handler]
    ///     fn handle_add(&mut self, by: i64) -> i64 { self.count += by; self.count }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::builder(MemoryStorage::new()).expose::<Counter>().build();
    /// let reply = rt.call_by_name("Counter", "a", "add", serde_json::json!({"by": 2})).await;
    /// assert_eq!(reply.unwrap(), serde_json::json!(2));
    /// assert_eq!(Counter::add(&rt, "a", 1).await.unwrap(), 3);
    /// # }
    /// ```
    pub fn expose<O: Exposed>(mut self) -> Self {
        if self
            .exposed
            .types
            .iter()
            .all(|entry| entry.name != O::TYPE_NAME)
        {
            self.exposed.types.push(Entry::of::<O>());
        }
        self.register::<O>()
    }
}

impl Runtime {
    pub(super) fn registry(&self) -> &Registry {
        self.inner
            .exposed
            .downcast_ref()
            .expect("the builder always stores the registry of exposed types")
    }

    /// The types exposed to this runtime, in the order they were exposed, with their
    /// handlers, alarms and options.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{durable_object, MemoryStorage, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Counter { count: i64 }
    ///
    /// #[durable_object(expose)]
    /// impl Counter {}
    ///
    /// let rt = Runtime::builder(MemoryStorage::new()).register::<Counter>().build();
    /// assert!(rt.exposed_types().is_empty()); // registered, not exposed
    /// ```
    pub fn exposed_types(&self) -> Vec<ExposedType> {
        self.registry()
            .types
            .iter()
            .map(|entry| ExposedType {
                name: entry.name,
                handlers: entry.handlers,
                alarms: entry.alarms,
                options: (entry.options)(self),
            })
            .collect()
    }
}
