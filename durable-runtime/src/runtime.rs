//! The runtime: owns the storage and the registry of live objects.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;

use crate::call::Invocation;
use crate::instance::Settings;
use crate::object::{DurableObject, ObjectOptions};
use crate::registry::TypeEntry;
use crate::storage::Storage;

/// Runtime-wide defaults, used where neither the type nor its registration sets a value.
const DEFAULT_OPTIONS: ObjectOptions = ObjectOptions::new()
    .with_hibernate_after(Duration::from_secs(5 * 60))
    .with_call_timeout(Duration::from_secs(30))
    .with_queue_capacity(1024);

/// A durable objects runtime: a storage backend plus the objects live in this process.
///
/// Cloning is cheap and every clone is the same runtime. Two runtimes built separately are
/// fully independent (each has its own registry), even in one process. Objects run on the
/// ambient tokio runtime, so calls must be made from within one.
///
/// # Examples
///
/// ```
/// use durable_runtime::{durable_object, MemoryStorage, Runtime};
///
/// #[durable_object]
/// pub struct Counter {
///     count: i64,
/// }
///
/// #[durable_object]
/// impl Counter {
///     #[handler]
///     fn handle_increment(&mut self, by: i64) -> i64 {
///         self.count += by;
///         self.count
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let rt = Runtime::new(MemoryStorage::new());
/// assert_eq!(Counter::increment(&rt, "user:123", 2).await.unwrap(), 2);
/// assert_eq!(Counter::increment(&rt, "user:123", 3).await.unwrap(), 5);
/// # }
/// ```
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Shared>,
}

struct Shared {
    storage: Arc<dyn Storage>,
    defaults: ObjectOptions,
    overrides: HashMap<TypeId, ObjectOptions>,
    /// `TypeId::of::<O>()` → `Arc<TypeEntry<O>>`.
    types: DashMap<TypeId, Arc<dyn Any + Send + Sync>>,
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runtime")
            .field("types", &self.inner.types.len())
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// A runtime over `storage` with default settings.
    ///
    /// # Examples
    ///
    /// ```
    /// let rt = durable_runtime::Runtime::new(durable_runtime::MemoryStorage::new());
    /// # drop(rt);
    /// ```
    pub fn new(storage: impl Storage) -> Self {
        Self::builder(storage).build()
    }

    /// A builder for a runtime over `storage`, to set defaults and register types.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::{MemoryStorage, ObjectOptions, Runtime};
    ///
    /// let rt = Runtime::builder(MemoryStorage::new())
    ///     .default_options(ObjectOptions::new().with_call_timeout(Duration::from_secs(5)))
    ///     .build();
    /// # drop(rt);
    /// ```
    pub fn builder(storage: impl Storage) -> RuntimeBuilder {
        RuntimeBuilder {
            storage: Arc::new(storage),
            defaults: ObjectOptions::new(),
            overrides: HashMap::new(),
        }
    }

    /// The storage backend.
    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.inner.storage
    }

    /// The options objects of type `O` run with, after applying the precedence runtime default
    /// < declared on the type < registration override.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::{durable_object, MemoryStorage, ObjectOptions, Runtime};
    ///
    /// #[durable_object(hibernate_after = "1m", shutdown_after = "1h")]
    /// pub struct Session {}
    ///
    /// #[durable_object]
    /// impl Session {}
    ///
    /// let rt = Runtime::builder(MemoryStorage::new())
    ///     .register_with::<Session>(ObjectOptions::new().with_shutdown_after(Duration::from_secs(60)))
    ///     .build();
    /// let options = rt.options_of::<Session>();
    /// assert_eq!(options.hibernate_after, Some(Duration::from_secs(60)));
    /// assert_eq!(options.shutdown_after, Some(Duration::from_secs(60)));
    /// assert_eq!(options.call_timeout, Some(Duration::from_secs(30)));
    /// ```
    pub fn options_of<O: DurableObject>(&self) -> ObjectOptions {
        self.inner
            .overrides
            .get(&TypeId::of::<O>())
            .copied()
            .unwrap_or_default()
            .or(O::options())
            .or(self.inner.defaults)
            .or(DEFAULT_OPTIONS)
    }

    /// How many objects of type `O` are live (active or hibernated) in this runtime.
    ///
    /// # Examples
    ///
    /// ```
    /// # use durable_runtime::{durable_object, MemoryStorage, Runtime};
    /// # #[durable_object] pub struct Counter { count: i64 }
    /// # #[durable_object] impl Counter {
    /// #     #[handler] fn handle_get(&self) -> i64 { self.count }
    /// # }
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::new(MemoryStorage::new());
    /// assert_eq!(rt.live_objects::<Counter>(), 0);
    /// Counter::get(&rt, "a").await.unwrap();
    /// assert_eq!(rt.live_objects::<Counter>(), 1);
    /// # }
    /// ```
    pub fn live_objects<O: DurableObject>(&self) -> usize {
        self.type_entry::<O>().live_count()
    }

    pub(crate) fn dispatch<O: DurableObject>(&self, id: &str, call: Box<dyn Invocation<O>>) {
        self.type_entry::<O>().dispatch(self, id, call);
    }

    pub(crate) fn spawn_instance(&self, instance: impl Future<Output = ()> + Send + 'static) {
        tokio::spawn(instance);
    }

    fn type_entry<O: DurableObject>(&self) -> Arc<TypeEntry<O>> {
        let key = TypeId::of::<O>();
        let erased = match self.inner.types.get(&key) {
            Some(entry) => Arc::clone(entry.value()),
            None => Arc::clone(
                self.inner
                    .types
                    .entry(key)
                    .or_insert_with(|| Arc::new(TypeEntry::<O>::new(self.settings_of::<O>())))
                    .value(),
            ),
        };
        match erased.downcast::<TypeEntry<O>>() {
            Ok(entry) => entry,
            Err(_) => unreachable!("the registry is keyed by TypeId"),
        }
    }

    fn settings_of<O: DurableObject>(&self) -> Settings {
        Settings::from_options(self.options_of::<O>())
    }
}

/// Configures and builds a [`Runtime`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use durable_runtime::{durable_object, MemoryStorage, ObjectOptions, Runtime};
///
/// #[durable_object]
/// pub struct Counter {
///     count: i64,
/// }
///
/// #[durable_object]
/// impl Counter {}
///
/// let rt = Runtime::builder(MemoryStorage::new())
///     .default_options(ObjectOptions::new().with_hibernate_after(Duration::from_secs(30)))
///     .register::<Counter>()
///     .build();
/// assert_eq!(rt.options_of::<Counter>().hibernate_after, Some(Duration::from_secs(30)));
/// ```
#[must_use = "a builder does nothing until `build` is called"]
pub struct RuntimeBuilder {
    storage: Arc<dyn Storage>,
    defaults: ObjectOptions,
    overrides: HashMap<TypeId, ObjectOptions>,
}

impl fmt::Debug for RuntimeBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RuntimeBuilder")
            .field("defaults", &self.defaults)
            .finish_non_exhaustive()
    }
}

impl RuntimeBuilder {
    /// Runtime-wide defaults for options that a type leaves unset. Built-in defaults:
    /// `hibernate_after` 5 minutes, `shutdown_after` never, `call_timeout` 30 seconds,
    /// `queue_capacity` 1024.
    pub fn default_options(mut self, defaults: ObjectOptions) -> Self {
        self.defaults = defaults;
        self
    }

    /// Registers an object type with the options it declares.
    pub fn register<O: DurableObject>(self) -> Self {
        self.register_with::<O>(ObjectOptions::new())
    }

    /// Registers an object type, overriding the options it declares with those set in
    /// `overrides`.
    pub fn register_with<O: DurableObject>(mut self, overrides: ObjectOptions) -> Self {
        self.overrides.insert(TypeId::of::<O>(), overrides);
        self
    }

    /// Builds the runtime.
    pub fn build(self) -> Runtime {
        Runtime {
            inner: Arc::new(Shared {
                storage: self.storage,
                defaults: self.defaults,
                overrides: self.overrides,
                types: DashMap::new(),
            }),
        }
    }
}
