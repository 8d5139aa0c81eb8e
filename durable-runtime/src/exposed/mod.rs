//! Handlers callable by name: the table `#[durable_object(expose)]` generates for a type
//! ([`Exposed`]), the runtime's registry of exposed types, and the calls by `(type name, id,
//! handler, JSON arguments)` that go through it.
//!
//! A call by name decodes its arguments and then calls the type's typed client, so it has
//! exactly the semantics of a typed call. This layer sits above activation and is imported by
//! nothing below it; the lower layers hold its registry as an opaque value.

use std::fmt;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::activation::call::Access;
use crate::alarms::{Alarm, AlarmTime};
use crate::error::Error;
use crate::object::handle::Runtime;
use crate::object::{BoxFuture, DurableObject, ObjectOptions};
use crate::runtime::{ObjectStatus, RuntimeBuilder};
use crate::storage::{AlarmRecord, IdPage, ObjectKey};

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

/// Why a call by name failed.
///
/// # Examples
///
/// ```
/// use durable_runtime::{CallByNameError, MemoryStorage, Runtime};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let rt = Runtime::new(MemoryStorage::new());
/// let err = rt.call_by_name("Nope", "a", "get", serde_json::json!({})).await.unwrap_err();
/// assert!(matches!(err, CallByNameError::UnknownType { .. }));
/// assert_eq!(err.to_string(), "no exposed object type is named `Nope`");
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CallByNameError {
    /// No type of that name was exposed to this runtime.
    #[error("no exposed object type is named `{type_name}`")]
    UnknownType {
        /// The name asked for.
        type_name: String,
    },

    /// The type has no exposed handler of that name.
    #[error("the object type `{type_name}` has no exposed handler `{handler}`")]
    UnknownHandler {
        /// The type.
        type_name: String,
        /// The handler asked for.
        handler: String,
    },

    /// The type has no alarm of that name.
    #[error("the object type `{type_name}` has no alarm `{alarm}`")]
    UnknownAlarm {
        /// The type.
        type_name: String,
        /// The alarm asked for.
        alarm: String,
    },

    /// The JSON arguments do not fit the handler's: an unknown or missing field, a value of
    /// the wrong type, or not a JSON object.
    #[error("bad arguments for `{handler}` at `{path}`: {message}")]
    BadArguments {
        /// The handler.
        handler: &'static str,
        /// The path of the failing field (`.` for the arguments object itself).
        path: String,
        /// What is wrong, naming the field for an unknown or missing one.
        message: String,
    },

    /// The handler returned its own error, encoded as JSON; its state changes were rolled
    /// back.
    #[error("the handler `{handler}` failed: {error}")]
    Handler {
        /// The handler.
        handler: &'static str,
        /// The handler's error, as JSON.
        error: Value,
    },

    /// The handler's output or error could not be encoded as JSON.
    #[error("the reply of `{handler}` could not be encoded as JSON: {message}")]
    Encode {
        /// The handler.
        handler: &'static str,
        /// Why.
        message: String,
    },

    /// The call could not complete (see [`Error::is_retryable`]).
    #[error(transparent)]
    Runtime(#[from] Error),
}

/// The exposed types of one runtime, filled by the builder.
#[derive(Default)]
pub(crate) struct Registry {
    types: Vec<Entry>,
}

/// A runtime operation on one object, as a boxed future.
type Operation<'a, T> = BoxFuture<'a, Result<T, Error>>;

/// One exposed type: its table, and the runtime's typed operations on it, instantiated for the
/// type so that they can be reached by its name.
struct Entry {
    name: &'static str,
    handlers: &'static [ExposedHandler],
    alarms: &'static [&'static str],
    options: fn(&Runtime) -> ObjectOptions,
    status: for<'a> fn(&'a Runtime, &'a str) -> Operation<'a, ObjectStatus>,
    delete: for<'a> fn(&'a Runtime, &'a str) -> Operation<'a, bool>,
    list_alarms: for<'a> fn(&'a Runtime, &'a str) -> Operation<'a, Vec<AlarmRecord>>,
    list_ids: for<'a> fn(&'a Runtime, Option<&'a str>, usize) -> Operation<'a, IdPage>,
    schedule_alarm: for<'a> fn(&'a Runtime, &'a str, &'static str, AlarmTime) -> Operation<'a, ()>,
    cancel_alarm: for<'a> fn(&'a Runtime, &'a str, &'static str) -> Operation<'a, ()>,
}

impl Entry {
    /// The alarm `alarm` of this type, by its stored name.
    fn alarm(&self, alarm: &str) -> Result<&'static str, CallByNameError> {
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
    fn handler(&self, handler: &str) -> Result<&ExposedHandler, CallByNameError> {
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
            list_alarms: |runtime, id| Box::pin(runtime.list_alarms::<O>(id)),
            list_ids: |runtime, after, limit| Box::pin(runtime.list_ids::<O>(after, limit)),
            schedule_alarm: |runtime, id, alarm, when| {
                Box::pin(runtime.schedule_alarm(id, Alarm::<O>::new(alarm), when))
            },
            cancel_alarm: |runtime, id, alarm| {
                Box::pin(runtime.cancel_alarm(id, Alarm::<O>::new(alarm)))
            },
        }
    }
}

impl Registry {
    fn entry(&self, type_name: &str) -> Result<&Entry, CallByNameError> {
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
    fn registry(&self) -> &Registry {
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

    /// Calls the handler `handler` of the object `(type_name, id)` with arguments given as a
    /// JSON object (field names are argument names; `null` stands for no arguments), and
    /// returns its output as JSON. The call goes through the type's typed client: it queues,
    /// commits and replies exactly as a typed call does.
    ///
    /// # Errors
    ///
    /// See [`CallByNameError`]: an unknown type or handler, arguments that do not fit, the
    /// handler's own error as JSON, or the runtime's [`Error`].
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{durable_object, CallByNameError, MemoryStorage, Runtime};
    /// use serde_json::json;
    ///
    /// #[durable_object]
    /// pub struct Account { balance: u64 }
    ///
    /// #[durable_object(expose)]
    /// impl Account {
    ///     #[handler]
    ///     fn handle_withdraw(&mut self, amount: u64) -> Result<u64, String> {
    ///         self.balance = self.balance.checked_sub(amount).ok_or("insufficient funds")?;
    ///         Ok(self.balance)
    ///     }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::builder(MemoryStorage::new()).expose::<Account>().build();
    /// let err = rt.call_by_name("Account", "a", "withdraw", json!({"amount": 5})).await;
    /// assert!(matches!(err, Err(CallByNameError::Handler { error, .. }) if error == json!("insufficient funds")));
    /// let err = rt.call_by_name("Account", "a", "withdraw", json!({"amout": 5})).await;
    /// assert!(err.unwrap_err().to_string().contains("unknown field `amout`"));
    /// # }
    /// ```
    pub async fn call_by_name(
        &self,
        type_name: &str,
        id: &str,
        handler: &str,
        arguments: Value,
    ) -> Result<Value, CallByNameError> {
        let exposed = self.registry().entry(type_name)?.handler(handler)?;
        (exposed.invoke)(self, id, arguments).await
    }

    /// [`call_by_name`](Runtime::call_by_name) with the arguments as JSON text, as received
    /// from a network request or a command line: text that is not JSON is refused with
    /// [`CallByNameError::BadArguments`], like arguments that do not fit, before anything is
    /// called.
    ///
    /// # Errors
    ///
    /// As `call_by_name`.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{durable_object, CallByNameError, MemoryStorage, Runtime};
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
    /// let reply = rt.call_by_name_json("Counter", "a", "add", br#"{"by": 3}"#).await;
    /// assert_eq!(reply.unwrap(), serde_json::json!(3));
    /// let err = rt.call_by_name_json("Counter", "a", "add", b"{by: 3}").await;
    /// assert!(matches!(err, Err(CallByNameError::BadArguments { .. })));
    /// # }
    /// ```
    pub async fn call_by_name_json(
        &self,
        type_name: &str,
        id: &str,
        handler: &str,
        arguments: &[u8],
    ) -> Result<Value, CallByNameError> {
        let exposed = self.registry().entry(type_name)?.handler(handler)?;
        let arguments =
            serde_json::from_slice(arguments).map_err(|error| CallByNameError::BadArguments {
                handler: exposed.name,
                path: ".".to_owned(),
                message: error.to_string(),
            })?;
        (exposed.invoke)(self, id, arguments).await
    }

    /// The stored state of the object `(type_name, id)` as JSON, or `None` if it was never
    /// stored (or was deleted). Reads storage; does not activate the object.
    ///
    /// # Errors
    ///
    /// [`CallByNameError::UnknownType`] if the type is not exposed;
    /// [`CallByNameError::Runtime`] for an invalid id, a storage failure, or a stored state
    /// that is not JSON.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{durable_object, MemoryStorage, Runtime};
    /// use serde_json::json;
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
    /// assert_eq!(rt.read_state_json("Counter", "a").await.unwrap(), None);
    /// Counter::add(&rt, "a", 4).await.unwrap();
    /// assert_eq!(rt.read_state_json("Counter", "a").await.unwrap(), Some(json!({"count": 4})));
    /// # }
    /// ```
    pub async fn read_state_json(
        &self,
        type_name: &str,
        id: &str,
    ) -> Result<Option<Value>, CallByNameError> {
        let entry = self.registry().entry(type_name)?;
        crate::id::validate_id(id).map_err(Error::from)?;
        let key = ObjectKey::new(entry.name, id);
        Ok(self.read_stored(key).await?)
    }

    /// [`status`](Runtime::status) of the object `(type_name, id)`, the type given by name.
    ///
    /// # Errors
    ///
    /// [`CallByNameError::UnknownType`] if the type is not exposed, else as `status`.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{durable_object, MemoryStorage, ObjectStatus, Runtime};
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
    /// assert_eq!(rt.status_by_name("Counter", "a").await.unwrap(), ObjectStatus::Absent);
    /// Counter::add(&rt, "a", 1).await.unwrap();
    /// assert_eq!(rt.status_by_name("Counter", "a").await.unwrap(), ObjectStatus::Active);
    /// # }
    /// ```
    pub async fn status_by_name(
        &self,
        type_name: &str,
        id: &str,
    ) -> Result<ObjectStatus, CallByNameError> {
        let entry = self.registry().entry(type_name)?;
        Ok((entry.status)(self, id).await?)
    }

    /// [`delete`](Runtime::delete) the object `(type_name, id)`, the type given by name:
    /// through the object, after the calls queued before it. Returns whether a stored state
    /// existed.
    ///
    /// # Errors
    ///
    /// [`CallByNameError::UnknownType`] if the type is not exposed, else as `delete`.
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
    /// Counter::add(&rt, "a", 1).await.unwrap();
    /// assert!(rt.delete_by_name("Counter", "a").await.unwrap());
    /// assert_eq!(rt.read_state_json("Counter", "a").await.unwrap(), None);
    /// # }
    /// ```
    pub async fn delete_by_name(&self, type_name: &str, id: &str) -> Result<bool, CallByNameError> {
        let entry = self.registry().entry(type_name)?;
        Ok((entry.delete)(self, id).await?)
    }

    /// [`list_ids`](Runtime::list_ids) of the stored objects of a type given by name: up to
    /// `limit` ids after `after`, in order, and where the next page starts.
    ///
    /// # Errors
    ///
    /// [`CallByNameError::UnknownType`] if the type is not exposed, else as `list_ids`.
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
    /// for id in ["b", "a", "c"] {
    ///     Counter::add(&rt, id, 1).await.unwrap();
    /// }
    /// let page = rt.list_ids_by_name("Counter", None, 2).await.unwrap();
    /// assert_eq!(page.ids, ["a", "b"]);
    /// let rest = rt.list_ids_by_name("Counter", page.next.as_deref(), 2).await.unwrap();
    /// assert_eq!(rest.ids, ["c"]);
    /// # }
    /// ```
    pub async fn list_ids_by_name(
        &self,
        type_name: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<IdPage, CallByNameError> {
        let entry = self.registry().entry(type_name)?;
        Ok((entry.list_ids)(self, after, limit).await?)
    }

    /// [`list_alarms`](Runtime::list_alarms) of the object `(type_name, id)`, the type given
    /// by name.
    ///
    /// # Errors
    ///
    /// [`CallByNameError::UnknownType`] if the type is not exposed, else as `list_alarms`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::{durable_object, MemoryStorage, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Reminder { fired: u32 }
    ///
    /// #[durable_object(expose)]
    /// impl Reminder {
    ///     #[alarm]
    ///     fn ring(&mut self) { self.fired += 1; }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::builder(MemoryStorage::new()).expose::<Reminder>().build();
    /// rt.schedule_alarm("r", Reminder::RING, Duration::from_secs(60)).await.unwrap();
    /// let alarms = rt.list_alarms_by_name("Reminder", "r").await.unwrap();
    /// assert_eq!(alarms[0].name, "ring");
    /// # }
    /// ```
    pub async fn list_alarms_by_name(
        &self,
        type_name: &str,
        id: &str,
    ) -> Result<Vec<AlarmRecord>, CallByNameError> {
        let entry = self.registry().entry(type_name)?;
        Ok((entry.list_alarms)(self, id).await?)
    }

    /// [`schedule_alarm`](Runtime::schedule_alarm) for the object `(type_name, id)`, the type
    /// and its alarm given by name: through the object, replacing a schedule of the same alarm.
    ///
    /// # Errors
    ///
    /// [`CallByNameError::UnknownType`] or [`CallByNameError::UnknownAlarm`], else as
    /// `schedule_alarm`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::{durable_object, MemoryStorage, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Reminder { fired: u32 }
    ///
    /// #[durable_object(expose)]
    /// impl Reminder {
    ///     #[alarm]
    ///     fn ring(&mut self) { self.fired += 1; }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::builder(MemoryStorage::new()).expose::<Reminder>().build();
    /// let in_an_hour = Duration::from_secs(3600);
    /// rt.schedule_alarm_by_name("Reminder", "r", "ring", in_an_hour).await.unwrap();
    /// assert_eq!(rt.list_alarms::<Reminder>("r").await.unwrap()[0].name, "ring");
    /// rt.cancel_alarm_by_name("Reminder", "r", "ring").await.unwrap();
    /// assert!(rt.list_alarms::<Reminder>("r").await.unwrap().is_empty());
    /// # }
    /// ```
    pub async fn schedule_alarm_by_name(
        &self,
        type_name: &str,
        id: &str,
        alarm: &str,
        when: impl Into<AlarmTime>,
    ) -> Result<(), CallByNameError> {
        let entry = self.registry().entry(type_name)?;
        let alarm = entry.alarm(alarm)?;
        Ok((entry.schedule_alarm)(self, id, alarm, when.into()).await?)
    }

    /// [`cancel_alarm`](Runtime::cancel_alarm) for the object `(type_name, id)`, the type and
    /// its alarm given by name (see [`schedule_alarm_by_name`](Runtime::schedule_alarm_by_name)).
    ///
    /// # Errors
    ///
    /// [`CallByNameError::UnknownType`] or [`CallByNameError::UnknownAlarm`], else as
    /// `cancel_alarm`.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{durable_object, CallByNameError, MemoryStorage, Runtime};
    ///
    /// #[durable_object]
    /// pub struct Reminder { fired: u32 }
    ///
    /// #[durable_object(expose)]
    /// impl Reminder {
    ///     #[alarm]
    ///     fn ring(&mut self) { self.fired += 1; }
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::builder(MemoryStorage::new()).expose::<Reminder>().build();
    /// let err = rt.cancel_alarm_by_name("Reminder", "r", "buzz").await.unwrap_err();
    /// assert!(matches!(err, CallByNameError::UnknownAlarm { .. }));
    /// # }
    /// ```
    pub async fn cancel_alarm_by_name(
        &self,
        type_name: &str,
        id: &str,
        alarm: &str,
    ) -> Result<(), CallByNameError> {
        let entry = self.registry().entry(type_name)?;
        let alarm = entry.alarm(alarm)?;
        Ok((entry.cancel_alarm)(self, id, alarm).await?)
    }
}

/// Decodes the JSON arguments of `handler` into its argument struct; `null` is no arguments.
pub fn arguments<A: DeserializeOwned>(
    handler: &'static str,
    arguments: Value,
) -> Result<A, CallByNameError> {
    let arguments = match arguments {
        Value::Null => Value::Object(serde_json::Map::new()),
        other => other,
    };
    serde_path_to_error::deserialize(arguments).map_err(|error| CallByNameError::BadArguments {
        handler,
        path: error.path().to_string(),
        message: error.inner().to_string(),
    })
}

/// The reply of an infallible handler's client, as JSON.
pub fn reply<T: Serialize>(
    handler: &'static str,
    result: Result<T, Error>,
) -> Result<Value, CallByNameError> {
    encode(handler, &result?)
}

/// An exposed handler's error type must be encodable as JSON, to be sent to callers by name.
#[diagnostic::on_unimplemented(
    message = "the error type `{Self}` of an exposed handler cannot be encoded as JSON",
    label = "`{Self}` must implement `Serialize`",
    note = "derive `serde::Serialize` for `{Self}`, or keep the handler out of the table with `#[handler(internal)]`"
)]
pub trait ExposedError: Serialize {}

impl<T: Serialize> ExposedError for T {}

/// The reply of a fallible handler's client, its own error encoded as JSON. Generated code
/// names it at the error type, where an error that is not `Serialize` is reported.
pub fn fallible_reply<T: Serialize, E: ExposedError>(
    handler: &'static str,
    result: Result<T, Error<E>>,
) -> Result<Value, CallByNameError> {
    match result {
        Ok(output) => encode(handler, &output),
        Err(error) => match error.split() {
            Ok(runtime) => Err(runtime.into()),
            Err(own) => Err(CallByNameError::Handler {
                handler,
                error: encode(handler, &own)?,
            }),
        },
    }
}

fn encode<T: Serialize>(handler: &'static str, value: &T) -> Result<Value, CallByNameError> {
    serde_json::to_value(value).map_err(|error| CallByNameError::Encode {
        handler,
        message: error.to_string(),
    })
}
