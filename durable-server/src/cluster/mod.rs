//! Cluster mode of the gateway: the **internal listener** other nodes forward calls to, and
//! the HTTP/2 client ([`HttpForwarder`]) this node forwards its own with.
//!
//! In a cluster (see [`durable_runtime::cluster`]) each object is served by one node. A call
//! made on the public route of any node is forwarded, if another node serves the object, to
//! that node's internal listener: `POST` [`INTERNAL_CALL_PATH`] over HTTP/2 with the cluster's
//! shared secret, the time left to the caller's deadline and the hop count in
//! [headers](SECRET_HEADER). The owner runs it and answers as the public route would; a node
//! that does not serve the object answers `421 Misdirected Request` without running it, and
//! the sender refreshes its shard map and tries once more. A call past the hop limit is
//! refused with `508 hop_limit_exceeded`.
//!
//! [`ServerConfig::cluster`](crate::ServerConfig::cluster) holds the settings;
//! [`join`] starts a runtime as a node with them; [`serve`](crate::serve) starts the internal
//! listener when they are set.

mod forwarder;
mod headers;
mod internal;
mod settings;

pub use forwarder::{ForwarderError, HttpForwarder};
pub use headers::{DEADLINE_MS as DEADLINE_HEADER, HOPS as HOPS_HEADER, SECRET as SECRET_HEADER};
pub use internal::internal_router;
pub use settings::{ClusterSecret, ClusterSettings};

use durable_runtime::cluster::ClusterError;
use durable_runtime::{Runtime, RuntimeBuilder};

/// The internal route forwarded calls are sent to.
pub const INTERNAL_CALL_PATH: &str = "/internal/v1/call";

/// Why a node could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JoinError {
    /// The HTTP client could not be built.
    #[error(transparent)]
    Forwarder(#[from] ForwarderError),
    /// The runtime could not join its cluster.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
}

/// Starts `builder`'s runtime as a node of the cluster `settings` describe, forwarding the
/// calls to objects other nodes serve over HTTP/2 ([`HttpForwarder`]). Serve its internal
/// listener ([`internal_router`], or [`serve`](crate::serve) with
/// [`ServerConfig::cluster`](crate::ServerConfig::cluster) set) at `settings.node.advertise`.
///
/// # Errors
///
/// [`JoinError`]: the client could not be built, or the runtime could not join (a storage
/// other than Postgres, a registered type that is not exposed, a shard count mismatch...).
///
/// # Examples
///
/// ```no_run
/// use durable_runtime::Runtime;
/// use durable_server::cluster::{ClusterSecret, ClusterSettings};
/// use durable_sqlx::PostgresStore;
///
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let settings = ClusterSettings::new(
///     "node-1",
///     "10.0.0.1:7100".parse()?,
///     ClusterSecret::new("a long random secret"),
/// );
/// let store = PostgresStore::connect("postgres://app@db/app").await?;
/// let runtime = durable_server::cluster::join(Runtime::builder(store), &settings).await?;
/// # drop(runtime); Ok(()) }
/// ```
pub async fn join(
    builder: RuntimeBuilder,
    settings: &ClusterSettings,
) -> Result<Runtime, JoinError> {
    let forwarder = HttpForwarder::new(settings.secret.clone())?;
    Ok(builder
        .forwarder(forwarder)
        .cluster(settings.node.clone())
        .join()
        .await?)
}
