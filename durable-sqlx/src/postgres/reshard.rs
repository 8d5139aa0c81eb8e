//! Changing a stopped cluster's shard count: [`PostgresStore::reshard`].
//!
//! One transaction: the cluster row takes the new count, the shard rows are made again (free,
//! each at an epoch no lower than any fence already written, so that the first activation of
//! every object by a new owner raises its fence as usual), and every object's shard is
//! computed again. It refuses while any node is live or any lease is current: a running node
//! computes shards with the count it started with.

use std::time::Duration;

use durable_runtime::cluster::shard_of;
use durable_runtime::storage::StorageError;
use sqlx::{Postgres, Transaction};

use super::{PostgresStore, db_err};
use crate::schema::statement;

/// Objects whose shard is computed again per statement.
const BATCH: i64 = 5000;

/// What [`PostgresStore::reshard`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Resharded {
    /// The shard count before.
    pub from: u32,
    /// The shard count now.
    pub to: u32,
    /// How many object rows had their shard computed again.
    pub objects: u64,
    /// The epoch every new shard starts at: the highest epoch or fence found. A node's first
    /// acquisition of a shard goes one above it.
    pub epoch: u64,
}

/// Why [`PostgresStore::reshard`] refused or failed; nothing was changed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReshardError {
    /// The count is 0 or above 1,048,576 (the limit of
    /// [`ClusterConfig::validate`](durable_runtime::cluster::ClusterConfig::validate)).
    #[error("a cluster has between 1 and 1048576 shards, not {0}")]
    InvalidCount(u32),
    /// No node ever created a cluster in this database.
    #[error("this database holds no cluster: no node has joined one on it")]
    NoCluster,
    /// Nodes are running: the cluster must be stopped first.
    #[error(
        "the cluster is running: {} (stop every node, wait for its leases to end, and try \
         again)",
        running.join(", ")
    )]
    Running {
        /// What shows it: live nodes, and how many leases are current.
        running: Vec<String>,
    },
    /// The database failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

impl PostgresStore {
    /// Changes the cluster's shard count to `shards`, offline: every node must be stopped.
    /// Refuses (and changes nothing) while a node is live (its heartbeat younger than
    /// `lease_ttl`, the cluster's TTL) or a shard lease is current. Otherwise, in one
    /// transaction: sets the count, makes the shard rows again (free, at an epoch above every
    /// fence already written), marks every node as left, and computes every object's shard
    /// with the new count. Nodes then start with [`ClusterConfig::shards`] set to `shards`;
    /// one still configured with the old count refuses to start.
    ///
    /// [`ClusterConfig::shards`]: durable_runtime::cluster::ClusterConfig::shards
    ///
    /// # Errors
    ///
    /// [`ReshardError`]: a count out of range, no cluster, a running cluster, or the database.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use durable_sqlx::PostgresStore;
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let store = PostgresStore::connect("postgres://app@db/app").await?;
    /// // Every node stopped:
    /// let done = store.reshard(4096, Duration::from_secs(10)).await?;
    /// println!("{} -> {} shards, {} objects moved", done.from, done.to, done.objects);
    /// # Ok(()) }
    /// ```
    pub async fn reshard(
        &self,
        shards: u32,
        lease_ttl: Duration,
    ) -> Result<Resharded, ReshardError> {
        let count = i32::try_from(shards)
            .ok()
            .filter(|&count| (1..=1 << 20).contains(&count))
            .ok_or(ReshardError::InvalidCount(shards))?;
        let mut tx = self.pool.begin().await.map_err(db_err)?;
        let done = self.reshard_in(&mut tx, shards, count, lease_ttl).await?;
        tx.commit().await.map_err(db_err)?;
        tracing::info!(
            from = done.from,
            to = done.to,
            objects = done.objects,
            "cluster resharded"
        );
        Ok(done)
    }

    async fn reshard_in(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        shards: u32,
        count: i32,
        lease_ttl: Duration,
    ) -> Result<Resharded, ReshardError> {
        let q = &self.names.qualifier;
        let objects = &self.names.objects;
        let (cluster, nodes, shard_table) = (
            format!("{q}durable_cluster"),
            format!("{q}durable_nodes"),
            format!("{q}durable_shards"),
        );
        // Locks the cluster row: a node starting now waits, then sees the new count.
        let from: Option<i32> = sqlx::query_scalar(statement(format!(
            "SELECT shards FROM {cluster} WHERE id = 1 FOR UPDATE"
        )))
        .fetch_optional(&mut **tx)
        .await
        .map_err(db_err)?;
        let from = from.ok_or(ReshardError::NoCluster)?;
        // Leases are taken and renewed under row locks of the shard table: lock it whole.
        sqlx::query(statement(format!(
            "LOCK TABLE {shard_table} IN EXCLUSIVE MODE"
        )))
        .execute(&mut **tx)
        .await
        .map_err(db_err)?;
        let ttl_ms = i64::try_from(lease_ttl.as_millis()).unwrap_or(i64::MAX);
        let live: Vec<String> = sqlx::query_scalar(statement(format!(
            "SELECT node_id FROM {nodes} WHERE status = 'up'
                 AND heartbeat_at > now() - $1::int8 * interval '1 millisecond'
             ORDER BY node_id"
        )))
        .bind(ttl_ms)
        .fetch_all(&mut **tx)
        .await
        .map_err(db_err)?;
        let leased: i64 = sqlx::query_scalar(statement(format!(
            "SELECT count(*) FROM {shard_table}
             WHERE owner IS NOT NULL AND lease_expires_at > now()"
        )))
        .fetch_one(&mut **tx)
        .await
        .map_err(db_err)?;
        if !live.is_empty() || leased > 0 {
            let mut running: Vec<String> = live
                .into_iter()
                .map(|node| format!("node {node} is live"))
                .collect();
            if leased > 0 {
                running.push(format!("{leased} shard leases are current"));
            }
            return Err(ReshardError::Running { running });
        }
        // Epochs only grow: every new shard starts at or above every epoch and fence so far.
        let epoch: i64 = sqlx::query_scalar(statement(format!(
            "SELECT greatest(
                 (SELECT coalesce(max(epoch), 0) FROM {shard_table}),
                 (SELECT coalesce(max(fence), 0) FROM {objects}))"
        )))
        .fetch_one(&mut **tx)
        .await
        .map_err(db_err)?;
        let run = |text: String| sqlx::query(statement(text));
        run(format!("UPDATE {cluster} SET shards = $1 WHERE id = 1"))
            .bind(count)
            .execute(&mut **tx)
            .await
            .map_err(db_err)?;
        run(format!("DELETE FROM {shard_table}"))
            .execute(&mut **tx)
            .await
            .map_err(db_err)?;
        run(format!(
            "INSERT INTO {shard_table} (shard, epoch)
             SELECT s, $2 FROM generate_series(0, $1 - 1) AS s"
        ))
        .bind(count)
        .bind(epoch)
        .execute(&mut **tx)
        .await
        .map_err(db_err)?;
        // A process paused through all this cannot renew any more: its node has left.
        run(format!("UPDATE {nodes} SET status = 'left'"))
            .execute(&mut **tx)
            .await
            .map_err(db_err)?;
        let moved = self.recompute_shards(tx, shards).await?;
        Ok(Resharded {
            from: u32::try_from(from).unwrap_or(0),
            to: shards,
            objects: moved,
            epoch: u64::try_from(epoch).unwrap_or(0),
        })
    }

    /// Computes the shard of every object row again, a batch at a time in key order.
    async fn recompute_shards(
        &self,
        tx: &mut Transaction<'_, Postgres>,
        shards: u32,
    ) -> Result<u64, StorageError> {
        let objects = &self.names.objects;
        let select = statement(format!(
            "SELECT object_type, object_id FROM {objects}
             WHERE (object_type, object_id) > ($1, $2)
             ORDER BY object_type, object_id LIMIT $3"
        ));
        let update = statement(format!(
            "UPDATE {objects} o SET shard = v.s
             FROM unnest($1::text[], $2::text[], $3::int4[]) AS v(t, i, s)
             WHERE o.object_type = v.t AND o.object_id = v.i"
        ));
        let mut after = (String::new(), String::new());
        let mut total = 0u64;
        loop {
            let rows: Vec<(String, String)> = sqlx::query_as(select.clone())
                .bind(&after.0)
                .bind(&after.1)
                .bind(BATCH)
                .fetch_all(&mut **tx)
                .await
                .map_err(db_err)?;
            let Some(last) = rows.last().cloned() else {
                return Ok(total);
            };
            let computed: Vec<i32> = rows
                .iter()
                .map(|(t, i)| i32::try_from(shard_of(t, i, shards)).unwrap_or(i32::MAX))
                .collect();
            total += rows.len() as u64;
            let (types, ids): (Vec<String>, Vec<String>) = rows.into_iter().unzip();
            sqlx::query(update.clone())
                .bind(types)
                .bind(ids)
                .bind(computed)
                .execute(&mut **tx)
                .await
                .map_err(db_err)?;
            after = last;
        }
    }
}
