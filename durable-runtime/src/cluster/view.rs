//! The cluster as an operator reads it: [`Runtime::cluster_view`], and the counts an
//! operator wants of a [`ClusterView`] (shards per node, shards nobody holds, the highest
//! epoch).

use std::collections::BTreeMap;

use super::{ClusterView, ShardRow};
use crate::Runtime;
use crate::storage::StorageError;

/// Why the cluster could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterViewError {
    /// The runtime does not run in cluster mode: it has no cluster to read.
    #[error("this runtime does not run in cluster mode")]
    NotEnabled,
    /// The database failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

impl ShardRow {
    /// The node holding a current lease on the shard: its owner, unless the lease ended (then
    /// the shard is free for any node to take and nobody serves it).
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::cluster::ShardRow;
    ///
    /// let row = ShardRow { shard: 0, owner: Some("a".into()), epoch: 3, free: false, orphaned: false };
    /// assert_eq!(row.holder(), Some("a"));
    /// let lapsed = ShardRow { free: true, ..row };
    /// assert_eq!(lapsed.holder(), None);
    /// ```
    pub fn holder(&self) -> Option<&str> {
        self.owner.as_deref().filter(|_| !self.free)
    }
}

impl ClusterView {
    /// How many shards each node holds a current lease on, by node id. Every registered node
    /// that has not left is listed, with 0 if it holds none; a node that left (or was never
    /// registered) but still names a current lease is listed too.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::cluster::{ClusterView, NodeRow, ShardRow};
    ///
    /// let node = |id: &str| NodeRow {
    ///     node_id: id.into(), address: format!("{id}:7100"), generation: 1, live: true,
    ///     status: "up".into(),
    /// };
    /// let shard = |shard, owner: Option<&str>| ShardRow {
    ///     shard, owner: owner.map(Into::into), epoch: 1, free: owner.is_none(), orphaned: false,
    /// };
    /// let view = ClusterView {
    ///     nodes: vec![node("a"), node("b"), node("c")],
    ///     shards: vec![shard(0, Some("a")), shard(1, Some("b")), shard(2, Some("a")), shard(3, None)],
    /// };
    /// let counts = view.shards_per_node();
    /// assert_eq!(counts["a"], 2);
    /// assert_eq!(counts["b"], 1);
    /// assert_eq!(counts["c"], 0);
    /// assert_eq!(view.unowned(), 1);
    /// ```
    pub fn shards_per_node(&self) -> BTreeMap<String, u32> {
        let mut counts: BTreeMap<String, u32> = self
            .nodes
            .iter()
            .map(|node| (node.node_id.clone(), 0))
            .collect();
        for holder in self.shards.iter().filter_map(ShardRow::holder) {
            *counts.entry(holder.to_owned()).or_default() += 1;
        }
        counts
    }

    /// How many shards no node holds a current lease on: nobody serves their objects until a
    /// node takes them.
    pub fn unowned(&self) -> u32 {
        let count = self
            .shards
            .iter()
            .filter(|row| row.holder().is_none())
            .count();
        u32::try_from(count).unwrap_or(u32::MAX)
    }

    /// The highest epoch of any shard: every acquisition raises its shard's epoch by one, so
    /// this grows with every move of a shard (0 for a cluster whose shards were never taken).
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::cluster::ClusterView;
    ///
    /// assert_eq!(ClusterView::default().max_epoch(), 0);
    /// ```
    pub fn max_epoch(&self) -> u64 {
        self.shards.iter().map(|row| row.epoch).max().unwrap_or(0)
    }
}

impl Runtime {
    /// Reads the cluster from the database, through the node's
    /// [`ClusterBackend`](super::ClusterBackend): its nodes (those that have not left; `live`
    /// when their heartbeat is younger than the lease TTL) and every shard with its owner and
    /// epoch, judged on the database's clock. This is the database's word, not this node's
    /// shard table: a shard this node serves is listed as its own, and a shard whose lease
    /// ended as free, whatever any node still believes.
    ///
    /// # Errors
    ///
    /// [`ClusterViewError::NotEnabled`] for a runtime not in cluster mode;
    /// [`ClusterViewError::Storage`] if the database fails.
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::{MemoryStorage, Runtime, cluster::ClusterViewError};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let rt = Runtime::new(MemoryStorage::new());
    /// assert!(matches!(rt.cluster_view().await, Err(ClusterViewError::NotEnabled)));
    /// # }
    /// ```
    pub async fn cluster_view(&self) -> Result<ClusterView, ClusterViewError> {
        let node = self.cluster_node().ok_or(ClusterViewError::NotEnabled)?;
        Ok(node.backend.view(node.config.lease_ttl).await?)
    }
}
