//! A map from a type to one value of that type, read on every call.
//!
//! Every call finds its object type's entry here, from every worker thread at once. A lock or
//! a reference count taken on each read would be a cache line written by all of them on every
//! call. The map is instead replaced whole when a type is added (once per type, rarely) and
//! read through `arc-swap`, whose reads write only thread-local slots, and values are lent by
//! reference rather than cloned.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::ArcSwap;

type Values = HashMap<TypeId, Arc<dyn Any + Send + Sync>, foldhash::fast::FixedState>;

/// At most one value per type `T`, added once and kept for the map's life.
#[derive(Default)]
pub(crate) struct TypeMap {
    values: ArcSwap<Values>,
    /// Serializes additions, so that a value's `insert` runs once.
    adding: Mutex<()>,
}

impl TypeMap {
    /// Calls `with` on the value of type `T`, first adding it with `insert` if there is none.
    ///
    /// `insert` runs at most once per type, while no other value is being added; `with` runs
    /// without any lock held.
    pub(crate) fn with<T, R>(&self, insert: impl FnOnce() -> T, with: impl FnOnce(&T) -> R) -> R
    where
        T: Any + Send + Sync,
    {
        let key = TypeId::of::<T>();
        if let Some(value) = self.values.load().get(&key) {
            return with(downcast(value));
        }
        let value = {
            let _adding = self.adding.lock().unwrap_or_else(PoisonError::into_inner);
            let current = self.values.load_full();
            match current.get(&key) {
                Some(value) => Arc::clone(value),
                None => {
                    let value: Arc<dyn Any + Send + Sync> = Arc::new(insert());
                    let mut next = Values::clone(&current);
                    next.insert(key, Arc::clone(&value));
                    self.values.store(Arc::new(next));
                    value
                }
            }
        };
        with(downcast(&value))
    }

    /// How many types have a value.
    pub(crate) fn len(&self) -> usize {
        self.values.load().len()
    }
}

fn downcast<T: Any>(value: &Arc<dyn Any + Send + Sync>) -> &T {
    match value.downcast_ref::<T>() {
        Some(value) => value,
        None => unreachable!("values are keyed by their own TypeId"),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::TypeMap;

    #[test]
    fn a_value_is_inserted_once_and_then_lent() {
        let map = TypeMap::default();
        let inserts = AtomicUsize::new(0);
        let insert = |value: u32| {
            inserts.fetch_add(1, Ordering::Relaxed);
            value
        };
        assert_eq!(map.with(|| insert(7), |value: &u32| *value), 7);
        assert_eq!(map.with(|| insert(8), |value: &u32| *value), 7);
        assert_eq!(map.with(|| "text", |value: &&str| *value), "text");
        assert_eq!(inserts.load(Ordering::Relaxed), 1);
        assert_eq!(map.len(), 2);
    }

    #[test]
    fn concurrent_first_uses_insert_once() {
        let map = TypeMap::default();
        let inserts = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| {
                    let value = map.with(
                        || {
                            inserts.fetch_add(1, Ordering::Relaxed);
                            String::from("once")
                        },
                        |value: &String| value.clone(),
                    );
                    assert_eq!(value, "once");
                });
            }
        });
        assert_eq!(inserts.load(Ordering::Relaxed), 1);
    }
}
