//! The chain of objects a call passes through, to refuse call cycles at once.
//!
//! A handler that calls its own object (directly, or through others: A → B → A) would wait
//! for itself forever, because an object handles one call at a time. Each handler runs with
//! the chain of objects above it in a task-local; a call whose target is already in the chain
//! fails with [`Error::CallCycle`](crate::Error::CallCycle) instead of deadlocking.
//!
//! The chain follows calls made from the handler's own task; a call made from a task the
//! handler spawned is not part of the chain.
//!
//! The innermost link of a handler's chain also carries its object's
//! [`Durability`], which calls leaving the object wait on.

use std::sync::Arc;

use crate::kv::KvLimits;
use crate::kv::view::KvCell;
use crate::object::durability::Durability;
use crate::storage::ObjectKey;

tokio::task_local! {
    static CHAIN: Chain;
}

/// The objects a call passes through, innermost first.
#[derive(Clone, Debug, Default)]
pub(crate) struct Chain(Option<Arc<Link>>);

/// The chain of just one object: where its calls from outside any handler start. It also
/// holds the object's key for the object's context, so the key is kept once per object.
#[derive(Clone, Debug)]
pub(crate) struct Root(Arc<Link>);

impl Root {
    pub(crate) fn new(key: ObjectKey, kv: KvLimits) -> Self {
        Self(Arc::new(Link {
            key,
            parent: Chain::default(),
            durability: Some(Arc::default()),
            kv: KvCell::new(kv),
        }))
    }

    /// The object's key-value storage as its live instance knows it.
    pub(crate) fn kv(&self) -> &KvCell {
        &self.0.kv
    }

    /// The object's key.
    pub(crate) fn key(&self) -> &ObjectKey {
        &self.0.key
    }

    /// Whether the object's state is committed.
    pub(crate) fn durability(&self) -> &Durability {
        match &self.0.durability {
            Some(durability) => durability,
            None => unreachable!("a root carries its object's durability"),
        }
    }

    /// The chain holding only this object.
    pub(crate) fn chain(&self) -> Chain {
        Chain(Some(Arc::clone(&self.0)))
    }
}

#[derive(Debug)]
struct Link {
    key: ObjectKey,
    parent: Chain,
    /// The object's, if its handlers may call out from this link (they are not synchronous).
    durability: Option<Arc<Durability>>,
    /// A root's key-value view (unused in the links of a chain).
    kv: KvCell,
}

impl Chain {
    /// The chain of the handler running on this task, if any.
    pub(crate) fn current() -> Self {
        CHAIN.try_with(Chain::clone).unwrap_or_default()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    /// This chain extended by `key`, for a synchronous handler (which cannot call out).
    pub(crate) fn push(&self, key: ObjectKey) -> Self {
        Self(Some(Arc::new(Link {
            key,
            parent: self.clone(),
            durability: None,
            kv: KvCell::default(),
        })))
    }

    /// The chain of a handler of the object `root` called through this chain: just the
    /// object if this one is empty (a call from outside any handler).
    pub(crate) fn enter(&self, root: &Root) -> Self {
        if self.is_empty() {
            return root.chain();
        }
        Self(Some(Arc::new(Link {
            key: root.key().clone(),
            parent: self.clone(),
            durability: root.0.durability.clone(),
            kv: KvCell::default(),
        })))
    }

    /// The innermost object, whose handler runs on this task, and its durability if known.
    pub(crate) fn innermost(&self) -> Option<(&ObjectKey, Option<&Durability>)> {
        let link = self.0.as_deref()?;
        Some((&link.key, link.durability.as_deref()))
    }

    /// The chain from the outermost object to the innermost, if `object_type`/`id` is in it.
    pub(crate) fn cycle_to(&self, object_type: &str, id: &str) -> Option<Vec<ObjectKey>> {
        let mut keys = Vec::new();
        let mut found = false;
        let mut link = self.0.as_deref();
        while let Some(current) = link {
            found |= current.key.object_type == object_type && current.key.object_id == id;
            keys.push(current.key.clone());
            link = current.parent.0.as_deref();
        }
        found.then(|| {
            keys.reverse();
            keys
        })
    }

    /// Runs `f` with this chain as the task-local chain.
    pub(crate) fn sync_scope<R>(self, f: impl FnOnce() -> R) -> R {
        CHAIN.sync_scope(self, f)
    }

    /// Runs `future` with this chain as the task-local chain.
    pub(crate) async fn scope<F: std::future::Future>(self, future: F) -> F::Output {
        CHAIN.scope(self, future).await
    }
}
