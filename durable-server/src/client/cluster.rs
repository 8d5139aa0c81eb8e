//! The cluster's nodes and shards through the gateway.

use reqwest::Method;

use super::{Client, ClientError};
use crate::model::cluster::{ClusterNodes, ClusterShards};

/// The cluster's admin routes: its nodes and its shards.
#[derive(Clone, Copy, Debug)]
pub struct Cluster<'a> {
    client: &'a Client,
}

impl Client {
    /// The cluster's admin routes: its nodes and its shards.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_server::client::ClientError> {
    /// let client = durable_server::client::Client::new("http://127.0.0.1:8080").with_token("t");
    /// for node in client.cluster().nodes().await?.nodes {
    ///     println!("{} at {}: {} shards", node.node_id, node.address, node.shards);
    /// }
    /// # Ok(()) }
    /// ```
    pub fn cluster(&self) -> Cluster<'_> {
        Cluster { client: self }
    }
}

impl Cluster<'_> {
    /// The nodes that have not left, with how many shards each holds.
    ///
    /// # Errors
    ///
    /// [`ClientError::Api`]: `cluster_not_enabled` from a server not in cluster mode,
    /// `forbidden` without `admin` on the server...
    pub async fn nodes(&self) -> Result<ClusterNodes, ClientError> {
        let request = self
            .client
            .request(Method::GET, &["v1", "cluster", "nodes"])?;
        self.client.send(request).await
    }

    /// Every shard, or only those `owner` holds, with a summary of the whole cluster.
    ///
    /// # Errors
    ///
    /// [`ClientError::Api`]: `cluster_not_enabled` from a server not in cluster mode,
    /// `forbidden` without `admin` on the server...
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), durable_server::client::ClientError> {
    /// let client = durable_server::client::Client::new("http://127.0.0.1:8080").with_token("t");
    /// let shards = client.cluster().shards(Some("node-1")).await?;
    /// println!("node-1 holds {} of {} shards", shards.shards.len(), shards.summary.total);
    /// # Ok(()) }
    /// ```
    pub async fn shards(&self, owner: Option<&str>) -> Result<ClusterShards, ClientError> {
        let mut request = self
            .client
            .request(Method::GET, &["v1", "cluster", "shards"])?;
        if let Some(owner) = owner {
            request = request.query(&[("owner", owner)]);
        }
        self.client.send(request).await
    }
}
