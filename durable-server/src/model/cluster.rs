//! The JSON bodies of the cluster's admin routes: the nodes with their shard counts, and the
//! shards with a summary.

use std::collections::BTreeMap;

use durable_runtime::cluster::{ClusterView, NodeRow, ShardRow};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The reply to `GET /v1/cluster/nodes`: the cluster's nodes as the database records them.
///
/// # Examples
///
/// ```
/// let reply: durable_server::model::cluster::ClusterNodes = serde_json::from_str(
///     r#"{"node": "a", "shard_count": 2, "unowned": 0, "nodes": [
///         {"node_id": "a", "address": "10.0.0.1:7100", "generation": 1, "live": true,
///          "status": "up", "shards": 2}]}"#,
/// )
/// .unwrap();
/// assert_eq!(reply.nodes[0].shards, 2);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ClusterNodes {
    /// The node that answered (`null` when read from the database directly).
    pub node: Option<String>,
    /// How many shards the cluster has.
    pub shard_count: u32,
    /// How many shards no node holds a current lease on.
    pub unowned: u32,
    /// The nodes that have not left, by id.
    pub nodes: Vec<ClusterNode>,
}

/// One node of the cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ClusterNode {
    /// The node's id.
    pub node_id: String,
    /// The address other nodes reach it at.
    pub address: String,
    /// How many times a process registered under this id.
    pub generation: u64,
    /// Whether its heartbeat is younger than the lease TTL (the database's clock).
    pub live: bool,
    /// `up` (nodes that left are not listed).
    pub status: String,
    /// How many shards it holds a current lease on.
    pub shards: u32,
}

/// The reply to `GET /v1/cluster/shards`: the shards (all, or one node's), and a summary of
/// the whole cluster.
///
/// # Examples
///
/// ```
/// let reply: durable_server::model::cluster::ClusterShards = serde_json::from_str(
///     r#"{"summary": {"total": 1, "per_node": {"a": 1}, "unowned": 0, "max_epoch": 4},
///         "shards": [{"shard": 0, "owner": "a", "epoch": 4, "free": false, "orphaned": false}]}"#,
/// )
/// .unwrap();
/// assert_eq!(reply.summary.per_node["a"], 1);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ClusterShards {
    /// Counts over every shard, whatever the filter.
    pub summary: ShardSummary,
    /// The shards asked for, in order.
    pub shards: Vec<ClusterShard>,
}

/// Counts over every shard of the cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ShardSummary {
    /// How many shards the cluster has.
    pub total: u32,
    /// How many shards each node holds a current lease on, by node id (0 for a node that
    /// holds none).
    pub per_node: BTreeMap<String, u32>,
    /// How many shards no node holds a current lease on.
    pub unowned: u32,
    /// The highest epoch of any shard: it grows by one with every acquisition.
    pub max_epoch: u64,
}

/// One shard.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ClusterShard {
    /// The shard's number, from 0.
    pub shard: u32,
    /// The node holding a current lease on it, `null` if none.
    pub owner: Option<String>,
    /// The epoch of the last lease taken on it: the fence its objects' writes carry.
    pub epoch: u64,
    /// Whether any node may take it now (no owner, or the lease ended).
    pub free: bool,
    /// Whether it has been free for longer than a lease TTL.
    pub orphaned: bool,
}

impl ClusterNodes {
    /// The nodes of `view`, as node `answering` (if any) read it.
    pub(crate) fn from_view(view: &ClusterView, answering: Option<&str>) -> Self {
        let counts = view.shards_per_node();
        let count = |node: &NodeRow| counts.get(&node.node_id).copied().unwrap_or(0);
        Self {
            node: answering.map(str::to_owned),
            shard_count: shard_count(view),
            unowned: view.unowned(),
            nodes: view
                .nodes
                .iter()
                .map(|node| ClusterNode {
                    node_id: node.node_id.clone(),
                    address: node.address.clone(),
                    generation: node.generation,
                    live: node.live,
                    status: node.status.clone(),
                    shards: count(node),
                })
                .collect(),
        }
    }
}

impl ClusterShards {
    /// The shards of `view` (those `owner` holds a current lease on, if given), with the
    /// summary of all of them.
    pub(crate) fn from_view(view: &ClusterView, owner: Option<&str>) -> Self {
        let shards = view
            .shards
            .iter()
            .filter(|row| owner.is_none_or(|owner| row.holder() == Some(owner)))
            .map(ClusterShard::from)
            .collect();
        Self {
            summary: ShardSummary {
                total: shard_count(view),
                per_node: view.shards_per_node(),
                unowned: view.unowned(),
                max_epoch: view.max_epoch(),
            },
            shards,
        }
    }
}

impl From<&ShardRow> for ClusterShard {
    fn from(row: &ShardRow) -> Self {
        Self {
            shard: row.shard,
            owner: row.holder().map(str::to_owned),
            epoch: row.epoch,
            free: row.free,
            orphaned: row.orphaned,
        }
    }
}

fn shard_count(view: &ClusterView) -> u32 {
    u32::try_from(view.shards.len()).unwrap_or(u32::MAX)
}
