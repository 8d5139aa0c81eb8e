//! Cluster mode: many runtimes (nodes), one Postgres database, each object live on exactly one
//! node.
//!
//! Objects are spread over a fixed number of shards ([`shard_of`]); each shard is leased to
//! one node at a time through the database (table `durable_shards`: owner, epoch, lease end on
//! the database's clock). A node takes the shards that rendezvous hashing over the live nodes
//! gives it ([`preferred_node`]), renews all its leases in one statement, hands off the shards
//! a newly joined node prefers, and stops serving a shard at `renewal sent + ttl − margin` on
//! its own monotonic clock.
//!
//! Safety does not rest on those timings: every object row carries the epoch (fence) of the
//! node that activated it, activation raises it, and every commit is conditional on it. A node
//! that lost a shard (paused, partitioned, slow) cannot commit to it any more: its write
//! matches nothing and the call fails with [`Error::Fenced`](crate::Error::Fenced).
//!
//! Start a node with [`RuntimeBuilder::cluster`](crate::RuntimeBuilder::cluster) and
//! [`RuntimeBuilder::join`](crate::RuntimeBuilder::join); ask where an object lives with
//! [`Runtime::route`](crate::Runtime::route). The guide's chapter "Running many nodes" has the
//! model, the guarantees and the operations.

mod backend;
mod forward;
mod hash;
mod lease;
mod node;
mod table;
pub(crate) mod typed;
mod view;

use std::time::Duration;

pub use backend::{ClusterBackend, ClusterView, NodeRow, ShardRow};
pub(crate) use forward::DEFAULT_WAIT;
pub use forward::{DEFAULT_HOP_LIMIT, ForwardError, ForwardedCall, Forwarder};
pub use hash::{preferred_node, shard_of};
pub(crate) use lease::join;
pub(crate) use node::Node;
pub use table::ShardTable;
pub use view::ClusterViewError;

use crate::storage::StorageError;

/// Shards held by this node now (a gauge, labelled `node` with the node's id).
pub const OWNED_SHARDS: &str = "durable_cluster_owned_shards";
/// Shard leases renewed by this node.
pub const LEASE_RENEWALS: &str = "durable_cluster_lease_renewals_total";
/// Shards this node handed off to the node that prefers them.
pub const HANDOFFS: &str = "durable_cluster_handoffs_total";
/// Shards this node acquired.
pub const ACQUISITIONS: &str = "durable_cluster_acquisitions_total";
/// Shards this node lost without handing them off (lease not renewed in time, or taken over).
pub const LOST_SHARDS: &str = "durable_cluster_lost_shards_total";
/// Writes refused because another node had taken over their object's shard: each is a call
/// that failed with [`Error::Fenced`](crate::Error::Fenced).
pub const FENCED_COMMITS: &str = "durable_fenced_commits_total";
/// Calls (by name and typed) this node forwarded to the node serving their object, by
/// `outcome`: `ok`, `error` (the owner answered with an error), `misdirected` (the node did
/// not serve the object), `hop_limit`, `unauthorized`, `unreachable`, `interrupted` or
/// `timeout`.
pub const FORWARDED_CALLS: &str = "durable_cluster_forwarded_calls_total";

/// The default number of shards of a new cluster.
pub const DEFAULT_SHARDS: u32 = 1024;

/// How a node joins a cluster.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use durable_runtime::cluster::ClusterConfig;
///
/// let config = ClusterConfig {
///     lease_ttl: Duration::from_secs(2),
///     ..ClusterConfig::new("node-1", "10.0.0.1:7100")
/// };
/// assert_eq!(config.shards, 1024);
/// assert_eq!(config.renew_every(), Duration::from_millis(500));
/// assert!(config.validate().is_ok());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterConfig {
    /// The node's id, unique in the cluster and kept across restarts (a host name, a pod
    /// name).
    pub node_id: String,
    /// The address other nodes reach this one at (`host:port` of its internal listener).
    pub advertise: String,
    /// How many shards the cluster has. Fixed when the cluster is created (by its first
    /// node); a node configured with another count refuses to start. Default 1024.
    pub shards: u32,
    /// How long a lease lasts without renewal, on the database's clock: a node that dies is
    /// replaced after at most this long. Default 10 s.
    pub lease_ttl: Duration,
    /// How much earlier than the database a node gives up a lease it could not renew, on its
    /// own clock: covers clock-rate drift and scheduling delays. `None` (the default): a fifth
    /// of the TTL.
    pub margin: Option<Duration>,
    /// How long a hand-off waits for the shard's objects to finish their calls before it
    /// releases the shard anyway (their late commits are then fenced). Default 5 s.
    pub drain_timeout: Duration,
}

impl ClusterConfig {
    /// The defaults for node `node_id` reachable at `advertise`.
    pub fn new(node_id: impl Into<String>, advertise: impl Into<String>) -> Self {
        Self {
            node_id: node_id.into(),
            advertise: advertise.into(),
            shards: DEFAULT_SHARDS,
            lease_ttl: Duration::from_secs(10),
            margin: None,
            drain_timeout: Duration::from_secs(5),
        }
    }

    /// The margin in force: [`margin`](Self::margin), or a fifth of the TTL.
    pub fn margin(&self) -> Duration {
        self.margin.unwrap_or(self.lease_ttl / 5)
    }

    /// How often the node renews its leases and looks at the cluster: a quarter of the TTL.
    pub fn renew_every(&self) -> Duration {
        self.lease_ttl / 4
    }

    /// Checks the settings.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use durable_runtime::cluster::ClusterConfig;
    ///
    /// let config = ClusterConfig { margin: Some(Duration::from_secs(9)), ..ClusterConfig::new("a", "b") };
    /// assert!(config.validate().is_err());
    /// ```
    pub fn validate(&self) -> Result<(), ClusterError> {
        let invalid = |reason: &str| Err(ClusterError::InvalidConfig(reason.to_owned()));
        if self.node_id.is_empty() {
            return invalid("node_id is empty");
        }
        if self.shards == 0 || self.shards > 1 << 20 {
            return invalid("shards must be between 1 and 1048576");
        }
        if self.lease_ttl < Duration::from_millis(200) {
            return invalid("lease_ttl must be at least 200 ms");
        }
        if self.margin().saturating_mul(2) >= self.lease_ttl {
            return invalid("margin must be less than half of lease_ttl");
        }
        Ok(())
    }
}

/// Why a node could not join its cluster.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClusterError {
    /// The runtime's storage cannot arbitrate a cluster: cluster mode needs Postgres.
    #[error(
        "cluster mode needs a Postgres store (durable_sqlx::PostgresStore): this storage keeps \
         its objects in one process; run one node, or move to Postgres"
    )]
    Unsupported,
    /// A setting is out of range.
    #[error("invalid cluster configuration: {0}")]
    InvalidConfig(String),
    /// The database's cluster was created with another number of shards.
    #[error(
        "the cluster in this database has {stored} shards but this node is configured with \
         {configured}; the shard count is fixed when the cluster is created (changing it is an \
         offline migration)"
    )]
    ShardCountMismatch {
        /// The node's setting.
        configured: u32,
        /// The database's.
        stored: u32,
    },
    /// A registered object type is not exposed: in cluster mode every type must be, so that
    /// calls to its objects can be forwarded by name to the node serving them.
    #[error(
        "the object type `{type_name}` is registered but not exposed: in cluster mode every \
         type must be exposed (`RuntimeBuilder::expose`, with `#[durable_object(expose)]` on \
         its impl block) so that its calls can be forwarded to the node serving the object"
    )]
    NotExposed {
        /// The type's name.
        type_name: &'static str,
    },
    /// The store already serves another node.
    #[error("this store already serves a cluster node: open one store per node")]
    AlreadyAttached,
    /// The database failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// Where a call to an object should go, as this node knows now.
///
/// # Examples
///
/// ```
/// use durable_runtime::{MemoryStorage, Runtime, cluster::Route};
///
/// // A runtime without a cluster serves every object itself.
/// let rt = Runtime::new(MemoryStorage::new());
/// assert_eq!(rt.route("Counter", "a"), Route::Local);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// This node serves the object: call it here.
    Local,
    /// Another node holds the object's shard: forward the call to this address.
    Remote(std::sync::Arc<str>),
    /// Nobody serves the shard right now (its owner died and its lease has not ended yet, or
    /// it is being handed off): retry shortly.
    Unavailable,
}
