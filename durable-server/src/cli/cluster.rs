//! `cluster nodes|shards`: through a gateway (its admin routes), or on the cluster's Postgres
//! database directly (read only: the command line joins no cluster).

use durable_runtime::cluster::ClusterView;

use crate::client::Client;
use crate::model::cluster::{ClusterNodes, ClusterShards};

use super::Store;
use super::args::ClusterCommand;
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
    })
}

/// `cluster ...` on the database of `store`: the same replies as the gateway's, `node`
/// left empty (no node answers).
pub(crate) async fn direct(store: &Store, command: ClusterCommand) -> Result<Reply, Failure> {
    let lease_ttl = match &command {
        ClusterCommand::Nodes { lease_ttl } | ClusterCommand::Shards { lease_ttl, .. } => {
            *lease_ttl
        }
    };
    let view = read(store, lease_ttl).await?;
    Ok(match command {
        ClusterCommand::Nodes { .. } => Reply::ClusterNodes(ClusterNodes::from_view(&view, None)),
        ClusterCommand::Shards { owner, .. } => {
            Reply::ClusterShards(ClusterShards::from_view(&view, owner.as_deref()))
        }
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
