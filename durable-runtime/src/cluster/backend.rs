//! [`ClusterBackend`]: what a database must do for cluster mode: node membership, shard
//! leases with epochs, and fencing of the loads, commits and alarm claims of its store.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::{ClusterError, ShardTable};
use crate::storage::StorageError;

/// A node as registered in the database.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeRow {
    /// The node's id ([`ClusterConfig::node_id`](super::ClusterConfig::node_id)).
    pub node_id: String,
    /// The address other nodes reach it at.
    pub address: String,
    /// How many times a process registered under this id (grows at each start).
    pub generation: u64,
    /// Whether its last heartbeat is fresh (younger than the lease TTL), on the database's
    /// clock.
    pub live: bool,
    /// `up`, or `left` once it shut down gracefully.
    pub status: String,
}

/// A shard as recorded in the database.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardRow {
    /// The shard's number, from 0.
    pub shard: u32,
    /// The node holding its lease, if any (possibly expired: see `free`).
    pub owner: Option<String>,
    /// The epoch of the last lease taken on it; each acquisition adds one.
    pub epoch: u64,
    /// Whether a node may acquire it now: no owner, or its lease ended (database clock).
    pub free: bool,
    /// Whether it has been free for longer than a lease TTL: its preferred node did not take
    /// it, so any node may.
    pub orphaned: bool,
}

/// The cluster as read from the database at one instant.
#[derive(Clone, Debug, Default)]
pub struct ClusterView {
    /// The registered nodes that have not left.
    pub nodes: Vec<NodeRow>,
    /// Every shard, in order.
    pub shards: Vec<ShardRow>,
}

/// A database that can arbitrate a cluster: membership, shard leases, and fenced writes.
///
/// Every safety property is a transaction of this database: a lease is taken by a conditional
/// update that bumps the shard's epoch, expires on the database's clock, and the store fences
/// every object it loads and writes with the epoch of its shard as held in the attached
/// [`ShardTable`]. A store returns it from
/// [`Storage::cluster_backend`](crate::storage::Storage::cluster_backend); only
/// `durable_sqlx::PostgresStore` does.
#[async_trait]
pub trait ClusterBackend: Send + Sync + 'static {
    /// Makes the store fence with `table`: from now on it loads objects by raising their fence
    /// to their shard's epoch, writes them only with that fence, and claims only the alarms of
    /// the shards `table` serves. A store is attached to one node only.
    fn attach(&self, table: Arc<ShardTable>) -> Result<(), ClusterError>;

    /// Creates the cluster's `shards` shards if the database has none yet, or checks that
    /// their count is `shards`.
    async fn prepare(&self, shards: u32) -> Result<(), ClusterError>;

    /// Registers the node (or registers it again after a restart) with a fresh heartbeat, and
    /// returns its generation.
    async fn register(&self, node_id: &str, address: &str) -> Result<u64, StorageError>;

    /// Refreshes the node's heartbeat and renews, in one statement, the leases of `held`
    /// (shard, epoch) for `ttl` on the database's clock. Returns the shards renewed: a shard
    /// missing from it was taken over (its epoch grew) and is lost.
    async fn renew(
        &self,
        node_id: &str,
        generation: u64,
        held: &[(u32, u64)],
        ttl: Duration,
    ) -> Result<Vec<u32>, StorageError>;

    /// The nodes and shards, judged live and free on the database's clock against `ttl`.
    async fn view(&self, ttl: Duration) -> Result<ClusterView, StorageError>;

    /// Acquires those of `shards` that are free (no owner, or an ended lease), each by a
    /// conditional update bumping its epoch, with a lease of `ttl`. Returns the shards
    /// acquired with their new epochs.
    async fn acquire(
        &self,
        node_id: &str,
        shards: &[u32],
        ttl: Duration,
    ) -> Result<Vec<(u32, u64)>, StorageError>;

    /// Gives up the leases of `shards` (shard, epoch) still held by the node.
    async fn release(&self, node_id: &str, shards: &[(u32, u64)]) -> Result<(), StorageError>;

    /// Marks the node as left (after releasing its shards).
    async fn leave(&self, node_id: &str, generation: u64) -> Result<(), StorageError>;
}
