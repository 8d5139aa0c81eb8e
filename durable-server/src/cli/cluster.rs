//! `cluster nodes|shards`: through a gateway (its admin routes), or on the cluster's Postgres
//! database directly (read only: the command line joins no cluster).

use durable_runtime::cluster::ClusterView;
use durable_sqlx::{PostgresStore, ReshardError};
use serde::Serialize;

use crate::client::Client;
use crate::model::cluster::{ClusterNodes, ClusterShards};

use super::Store;
use super::args::{ClusterCommand, Operation};
use super::database::Tables;
use super::failure::Failure;
use super::render::Reply;

/// `cluster ...` through the gateway at `client`.
pub(crate) async fn gateway(client: &Client, command: ClusterCommand) -> Result<Reply, Failure> {
    let cluster = client.cluster();
    Ok(match command {
        ClusterCommand::Nodes { .. } => Reply::ClusterNodes(cluster.nodes().await?),
        ClusterCommand::Shards { owner, .. } => {
            Reply::ClusterShards(cluster.shards(owner.as_deref()).await?)
        }
        ClusterCommand::Reshard { .. } => return Err(reshard_needs_the_database()),
    })
}

/// `cluster ...` on the database of `store`: the same replies as the gateway's, `node`
/// left empty (no node answers).
pub(crate) async fn direct(store: &Store, command: ClusterCommand) -> Result<Reply, Failure> {
    let lease_ttl = match &command {
        ClusterCommand::Nodes { lease_ttl } | ClusterCommand::Shards { lease_ttl, .. } => {
            *lease_ttl
        }
        // Run before a store is opened (see `cli::execute`).
        ClusterCommand::Reshard { .. } => return Err(reshard_needs_the_database()),
    };
    let view = read(store, lease_ttl).await?;
    Ok(match command {
        ClusterCommand::Nodes { .. } => Reply::ClusterNodes(ClusterNodes::from_view(&view, None)),
        ClusterCommand::Shards { owner, .. } => {
            Reply::ClusterShards(ClusterShards::from_view(&view, owner.as_deref()))
        }
        ClusterCommand::Reshard { .. } => return Err(reshard_needs_the_database()),
    })
}

/// The cluster in `store`'s database, nodes judged live against `lease_ttl`.
async fn read(store: &Store, lease_ttl: std::time::Duration) -> Result<ClusterView, Failure> {
    let backend = store.cluster_backend().ok_or_else(|| {
        not_enabled("this database holds no cluster: cluster mode needs a Postgres database")
    })?;
    let view = backend.view(lease_ttl).await.map_err(|error| {
        Failure::local(
            "database_unavailable",
            format!("cannot read the cluster: {error}"),
        )
    })?;
    if view.shards.is_empty() {
        return Err(not_enabled(
            "this database holds no cluster: no node has joined one on it",
        ));
    }
    Ok(view)
}

/// The gateway's `404 cluster_not_enabled`, for the direct target.
fn not_enabled(message: &str) -> Failure {
    Failure::new(Some(404), "cluster_not_enabled", message)
}

/// `cluster reshard`: what changed.
#[derive(Debug, Serialize)]
pub(crate) struct ReshardReport {
    /// The shard count before.
    pub(crate) from: u32,
    /// The shard count now.
    pub(crate) to: u32,
    /// The object rows whose shard was computed again.
    pub(crate) objects: u64,
    /// The epoch the new shards start at.
    pub(crate) epoch: u64,
}

/// Whether `operation` is `cluster reshard`, which runs on a Postgres database only.
pub(crate) fn is_reshard(operation: &Operation) -> bool {
    matches!(
        operation,
        Operation::Cluster(ClusterCommand::Reshard { .. })
    )
}

/// `cluster reshard` on the database at `url`: refused without `offline`, on anything but
/// Postgres, and while the cluster runs.
pub(crate) async fn reshard(
    url: &str,
    tables: &Tables,
    operation: Operation,
    offline: bool,
) -> Result<Reply, Failure> {
    let Operation::Cluster(ClusterCommand::Reshard { shards, lease_ttl }) = operation else {
        return Err(Failure::local("usage", "not a reshard command"));
    };
    if !offline {
        return Err(Failure::local(
            "offline_required",
            "resharding moves every object to another shard: stop every node, then pass \
             --offline",
        ));
    }
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(not_enabled(
            "this database holds no cluster: cluster mode needs a Postgres database",
        ));
    }
    let mut builder = PostgresStore::builder(url).table_prefix(tables.prefix.as_str());
    if let Some(schema) = &tables.schema {
        builder = builder.schema(schema.as_str());
    }
    let store = builder.connect().await.map_err(|error| {
        Failure::local(
            "database_unavailable",
            format!("cannot open the database: {error}"),
        )
    })?;
    let done = store
        .reshard(shards, lease_ttl)
        .await
        .map_err(|error| match error {
            ReshardError::NoCluster => not_enabled(&error.to_string()),
            ReshardError::InvalidCount(_) => Failure::local("usage", error.to_string()),
            ReshardError::Running { .. } => Failure::local("cluster_running", error.to_string()),
            other => Failure::local("database_unavailable", other.to_string()),
        })?;
    Ok(Reply::Resharded(ReshardReport {
        from: done.from,
        to: done.to,
        objects: done.objects,
        epoch: done.epoch,
    }))
}

/// Resharding runs on the database itself, not through a gateway.
fn reshard_needs_the_database() -> Failure {
    Failure::local(
        "usage",
        "cluster reshard runs on the cluster's database directly, every node stopped: pass \
         --database-url and --offline, not --gateway",
    )
}
