//! [`Node`]: a runtime's membership of its cluster: its configuration, its shard table and its
//! backend; how calls are routed and admitted; how a shard's objects are closed.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use super::{ClusterBackend, ClusterConfig, Forwarder, Route, ShardTable};
use crate::Runtime;
use crate::error::Error;
use crate::object::handle::Objects;
use crate::storage::ObjectKey;

/// A runtime's place in its cluster.
pub(crate) struct Node {
    pub(crate) config: ClusterConfig,
    pub(crate) table: Arc<ShardTable>,
    pub(crate) backend: Arc<dyn ClusterBackend>,
    pub(crate) generation: u64,
    /// Shards whose hand-off is under way.
    pub(crate) handing_off: Mutex<HashSet<u32>>,
    /// How calls by name to objects other nodes serve reach them, if set.
    pub(crate) forwarder: Option<Arc<dyn Forwarder>>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("node_id", &self.config.node_id)
            .field("generation", &self.generation)
            .finish_non_exhaustive()
    }
}

impl Node {
    /// Where a call to `object_type`/`id` goes.
    pub(crate) fn route(&self, object_type: &str, id: &str) -> Route {
        let shard = self.table.shard_of(object_type, id);
        if self.table.serving(shard) {
            return Route::Local;
        }
        if self.table.epoch(shard).is_some() {
            // Held but being handed off.
            return Route::Unavailable;
        }
        match self.table.owner_address(shard) {
            Some(address) if *address != *self.config.advertise => Route::Remote(address),
            _ => Route::Unavailable,
        }
    }

    /// Admits a call here, or says where it belongs.
    pub(crate) fn admit(&self, object_type: &str, id: &str) -> Result<(), Error> {
        let owner = match self.route(object_type, id) {
            Route::Local => return Ok(()),
            Route::Remote(address) => Some(address.to_string()),
            Route::Unavailable => None,
        };
        Err(Error::NotOwner {
            key: ObjectKey::new(object_type, id),
            owner,
        })
    }
}

// The runtime's objects as the cluster sees them: by shard.
impl Runtime {
    /// The runtime's cluster membership, if it runs in cluster mode.
    pub(crate) fn cluster_node(&self) -> Option<&Arc<Node>> {
        self.inner.cluster.get()
    }

    fn every_type(&self) -> Vec<Arc<dyn Objects>> {
        self.inner
            .objects
            .iter()
            .map(|entry| Arc::clone(entry.value()))
            .collect()
    }

    /// Closes the objects of `shards`: live ones finish what they queued and end, dormant
    /// ones are dropped. Their next call (once the shard is held again) reloads them.
    pub(crate) fn close_shards(&self, table: &ShardTable, shards: &HashSet<u32>) {
        if shards.is_empty() {
            return;
        }
        let matches =
            |object_type: &str, id: &str| shards.contains(&table.shard_of(object_type, id));
        for objects in self.every_type() {
            objects.close_matching(self, &matches);
        }
    }

    /// How many objects of `shards` (of every shard if `None`) are live here.
    pub(crate) fn live_in_shards(
        &self,
        table: &ShardTable,
        shards: Option<&HashSet<u32>>,
    ) -> usize {
        let matches = |object_type: &str, id: &str| {
            shards.is_none_or(|shards| shards.contains(&table.shard_of(object_type, id)))
        };
        self.every_type()
            .iter()
            .map(|objects| objects.live_matching(&matches))
            .sum()
    }
}

impl Runtime {
    /// Where a call to the object `id` of type `object_type` should go, as this node knows
    /// now: [`Route::Local`] always for a runtime without a cluster (one branch, no cost);
    /// in cluster mode, local if this node serves the object's shard, else the owner's
    /// address, or unavailable while the shard is between owners. A call made here to an
    /// object this node does not serve fails with [`Error::NotOwner`] at once.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{MemoryStorage, Runtime, cluster::Route};
    ///
    /// let rt = Runtime::new(MemoryStorage::new());
    /// assert_eq!(rt.route("Counter", "a"), Route::Local);
    /// ```
    pub fn route(&self, object_type: &str, id: &str) -> Route {
        match self.inner.cluster.get() {
            None => Route::Local,
            // Leaving: its shards are about to move.
            Some(_) if self.is_closing() => Route::Unavailable,
            Some(node) => node.route(object_type, id),
        }
    }

    /// The error of a call refused because the runtime is shutting down: in cluster mode the
    /// call belongs to the node that takes the shard over (retryable), otherwise
    /// [`Error::ShuttingDown`].
    pub(crate) fn shutting_down(&self, object_type: &str, id: &str) -> Error {
        match self.inner.cluster.get() {
            None => Error::ShuttingDown,
            Some(_) => Error::NotOwner {
                key: ObjectKey::new(object_type, id),
                owner: None,
            },
        }
    }

    /// In cluster mode, the shards this node serves now, in order; `None` without a cluster.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{MemoryStorage, Runtime};
    ///
    /// assert_eq!(Runtime::new(MemoryStorage::new()).serving_shards(), None);
    /// ```
    pub fn serving_shards(&self) -> Option<Vec<u32>> {
        self.inner
            .cluster
            .get()
            .map(|node| node.table.serving_shards())
    }
}

impl Runtime {
    /// In cluster mode, reads the shards' owners from the database now, rather than at the
    /// next renewal: what a node does when a peer answered that it does not serve a shard
    /// this node believed it did. Without a cluster it does nothing.
    ///
    /// # Errors
    ///
    /// The database could not be read; the map is left as it was.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{MemoryStorage, Runtime};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// assert!(Runtime::new(MemoryStorage::new()).refresh_shard_map().await.is_ok());
    /// # }
    /// ```
    pub async fn refresh_shard_map(&self) -> Result<(), crate::storage::StorageError> {
        let Some(node) = self.inner.cluster.get() else {
            return Ok(());
        };
        let view = node.backend.view(node.config.lease_ttl).await?;
        node.table.set_owners(super::lease::owners_of(&view));
        Ok(())
    }

    /// In cluster mode, this node's id ([`ClusterConfig::node_id`]); `None` without a cluster.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{MemoryStorage, Runtime};
    ///
    /// assert_eq!(Runtime::new(MemoryStorage::new()).node_id(), None);
    /// ```
    pub fn node_id(&self) -> Option<&str> {
        self.inner
            .cluster
            .get()
            .map(|node| node.config.node_id.as_str())
    }
}
