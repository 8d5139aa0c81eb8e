//! Cluster mode on Postgres: the [`ClusterBackend`] of [`PostgresStore`] (membership, shard
//! leases) and the fenced forms of its loads, commits and alarm claims, used once a node's
//! shard table is attached.
//!
//! Every safety property is a statement of this database: a shard is acquired by a
//! conditional update bumping its epoch; a lease ends on the database's clock; an activation
//! raises the object's fence to its shard's epoch (`... WHERE fence <= $epoch`); a commit is
//! conditional on `fence = $epoch` as well as on the version. No advisory lock, no
//! `LISTEN/NOTIFY`; serialization failures (`40001`) and deadlocks (`40P01`) are retried.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use durable_runtime::cluster::{
    ClusterBackend, ClusterError, ClusterView, NodeRow, ShardRow, ShardTable,
};
use durable_runtime::storage::{
    AlarmRecord, CommitError, Loaded, ObjectKey, ObjectWrite, StorageError,
};
use sqlx::{Connection, PgConnection, SqlStr};

use super::sql::alarm_from_row;
use super::time::PgTime;
use super::writes::{Prepared, apply_alarms_bulk, apply_reply, prepare};
use super::{PostgresStore, db_err};
use crate::schema::{Names, claim_limit, claimed_alarms, from_db_version, loaded, statement};

/// Objects whose shard is computed at once by [`ClusterBackend::prepare`].
const BACKFILL_BATCH: i64 = 5000;

/// How many times a lease statement is tried when the server reports a serialization
/// failure or a deadlock.
const ATTEMPTS: u32 = 5;

/// A store's cluster state, shared by its clones.
#[derive(Debug, Default)]
pub(super) struct ClusterState {
    sql: OnceLock<ClusterSql>,
    /// Set once the store serves a node: its loads, commits and claims are fenced from then.
    fencing: OnceLock<Arc<ShardTable>>,
}

impl ClusterState {
    /// The node's shard table, if the store serves one.
    pub(super) fn fencing(&self) -> Option<&Arc<ShardTable>> {
        self.fencing.get()
    }
}

/// The cluster's statements.
#[derive(Debug)]
struct ClusterSql {
    meta_insert: SqlStr,
    meta_shards: SqlStr,
    shards_insert: SqlStr,
    backfill_select: SqlStr,
    backfill_update: SqlStr,
    register: SqlStr,
    renew: SqlStr,
    nodes: SqlStr,
    shards: SqlStr,
    acquire: SqlStr,
    release: SqlStr,
    leave: SqlStr,
    /// `$1`–`$4`: type, id, fence, shard. Raises the fence (or inserts a placeholder row) and
    /// returns state and version; no row if a higher fence is there.
    load: SqlStr,
    /// The same over arrays; returns type, id, state and version of each row raised.
    load_many: SqlStr,
    /// `$1`–`$5`: types, ids, states (NULL keeps the state), expected versions, fences.
    commit: SqlStr,
    /// `$1`, `$2`: type and id; version and fence.
    fence_of: SqlStr,
    /// `$1`, `$2`: type and id; the fence, the row locked.
    fence_lock: SqlStr,
    /// The store's claim, restricted to the objects of the shards in `$5`.
    claim: SqlStr,
    /// The store's next due time, restricted to the shards in `$1`.
    next_due: SqlStr,
}

impl ClusterSql {
    fn new(names: &Names) -> Self {
        let q = &names.qualifier;
        let objects = &names.objects;
        let alarms = &names.alarms;
        let cluster = format!("{q}durable_cluster");
        let nodes = format!("{q}durable_nodes");
        let shards = format!("{q}durable_shards");
        let ms = "* interval '1 millisecond'";
        let a_columns = "a.object_type, a.object_id, a.name, a.due_at, a.attempts, a.claimed_at, \
                         a.last_error, a.dead, a.payload";
        // The alarm `a` belongs to an object of a shard this node serves.
        let owned = |param: &str| {
            format!(
                "EXISTS (SELECT 1 FROM {objects} o WHERE o.object_type = a.object_type
                     AND o.object_id = a.object_id AND o.shard = ANY({param}::int4[]))"
            )
        };
        Self {
            meta_insert: statement(format!(
                "INSERT INTO {cluster} (id, shards) VALUES (1, $1) ON CONFLICT (id) DO NOTHING"
            )),
            meta_shards: statement(format!("SELECT shards FROM {cluster} WHERE id = 1")),
            shards_insert: statement(format!(
                "INSERT INTO {shards} (shard) SELECT s FROM generate_series(0, $1 - 1) AS s
                 ON CONFLICT (shard) DO NOTHING"
            )),
            backfill_select: statement(format!(
                "SELECT object_type, object_id FROM {objects} WHERE shard IS NULL LIMIT $1"
            )),
            backfill_update: statement(format!(
                "UPDATE {objects} o SET shard = v.s
                 FROM unnest($1::text[], $2::text[], $3::int4[]) AS v(t, i, s)
                 WHERE o.object_type = v.t AND o.object_id = v.i"
            )),
            register: statement(format!(
                "INSERT INTO {nodes} AS n
                     (node_id, address, generation, started_at, heartbeat_at, status)
                 VALUES ($1, $2, 1, now(), now(), 'up')
                 ON CONFLICT (node_id) DO UPDATE SET address = excluded.address,
                     generation = n.generation + 1, started_at = now(), heartbeat_at = now(),
                     status = 'up'
                 RETURNING generation"
            )),
            // The heartbeat and every renewal in one statement; a node registered again by
            // another process (a newer generation) renews nothing.
            renew: statement(format!(
                "WITH beat AS (
                     UPDATE {nodes} SET heartbeat_at = now()
                     WHERE node_id = $1 AND generation = $2 AND status = 'up'
                     RETURNING 1
                 )
                 UPDATE {shards} s SET lease_expires_at = now() + $5::int8 {ms}
                 FROM unnest($3::int4[], $4::int8[]) AS v(shard, epoch)
                 WHERE s.shard = v.shard AND s.epoch = v.epoch AND s.owner = $1
                     AND EXISTS (SELECT 1 FROM beat)
                 RETURNING s.shard"
            )),
            nodes: statement(format!(
                "SELECT node_id, address, generation, heartbeat_at > now() - $1::int8 {ms}, status
                 FROM {nodes} WHERE status = 'up' ORDER BY node_id"
            )),
            shards: statement(format!(
                "SELECT shard, owner, epoch,
                     owner IS NULL OR lease_expires_at IS NULL OR lease_expires_at < now(),
                     (owner IS NULL OR lease_expires_at IS NULL OR lease_expires_at < now())
                         AND coalesce(lease_expires_at, '-infinity') < now() - $1::int8 {ms}
                 FROM {shards} ORDER BY shard"
            )),
            acquire: statement(format!(
                "UPDATE {shards} SET owner = $1, epoch = epoch + 1,
                     lease_expires_at = now() + $3::int8 {ms}
                 WHERE shard = ANY($2::int4[])
                     AND (owner IS NULL OR lease_expires_at IS NULL OR lease_expires_at < now())
                 RETURNING shard, epoch"
            )),
            release: statement(format!(
                "UPDATE {shards} s SET owner = NULL, lease_expires_at = now()
                 FROM unnest($2::int4[], $3::int8[]) AS v(shard, epoch)
                 WHERE s.shard = v.shard AND s.epoch = v.epoch AND s.owner = $1"
            )),
            leave: statement(format!(
                "UPDATE {nodes} SET status = 'left' WHERE node_id = $1 AND generation = $2"
            )),
            load: statement(format!(
                "INSERT INTO {objects} AS o (object_type, object_id, state, version, fence, shard)
                 VALUES ($1, $2, NULL, 0, $3, $4)
                 ON CONFLICT (object_type, object_id) DO UPDATE
                     SET fence = excluded.fence, shard = excluded.shard
                     WHERE o.fence <= excluded.fence
                 RETURNING o.state, o.version"
            )),
            load_many: statement(format!(
                "INSERT INTO {objects} AS o (object_type, object_id, state, version, fence, shard)
                 SELECT t, i, NULL, 0, f, s
                 FROM unnest($1::text[], $2::text[], $3::int8[], $4::int4[]) AS v(t, i, f, s)
                 ON CONFLICT (object_type, object_id) DO UPDATE
                     SET fence = excluded.fence, shard = excluded.shard
                     WHERE o.fence <= excluded.fence
                 RETURNING o.object_type, o.object_id, o.state, o.version"
            )),
            // A write without a state keeps it, and needs one (a tombstone or a placeholder
            // is recreated only with a state).
            commit: statement(format!(
                "UPDATE {objects} o SET state = coalesce(v.s, o.state), version = o.version + 1,
                     updated_at = now()
                 FROM unnest($1::text[], $2::text[], $3::text[], $4::int8[], $5::int8[])
                     AS v(t, i, s, e, f)
                 WHERE o.object_type = v.t AND o.object_id = v.i AND o.version = v.e
                     AND o.fence = v.f AND (v.s IS NOT NULL OR o.state IS NOT NULL)
                 RETURNING o.object_type, o.object_id"
            )),
            fence_of: statement(format!(
                "SELECT version, fence FROM {objects} WHERE object_type = $1 AND object_id = $2"
            )),
            fence_lock: statement(format!(
                "SELECT fence FROM {objects} WHERE object_type = $1 AND object_id = $2
                 FOR UPDATE"
            )),
            claim: statement(format!(
                "WITH unclaimed AS (
                     SELECT a.object_type, a.object_id, a.name, a.due_at FROM {alarms} a
                     WHERE NOT a.dead AND a.claimed_at IS NULL AND a.due_at <= $2
                         AND {owned_claim}
                     ORDER BY a.due_at, a.object_type, a.object_id, a.name
                     LIMIT $4
                     FOR UPDATE OF a SKIP LOCKED
                 ), lapsed AS (
                     SELECT a.object_type, a.object_id, a.name, a.due_at FROM {alarms} a
                     WHERE a.claimed_at IS NOT NULL AND greatest(a.due_at, a.claim_expires_at) <= $2
                         AND a.claim_expires_at <= $1 AND NOT a.dead AND {owned_claim}
                     ORDER BY a.due_at, a.object_type, a.object_id, a.name
                     LIMIT $4
                     FOR UPDATE OF a SKIP LOCKED
                 ), due AS (
                     SELECT object_type, object_id, name FROM (
                         SELECT * FROM unclaimed UNION ALL SELECT * FROM lapsed
                     ) AS both_kinds
                     ORDER BY due_at, object_type, object_id, name
                     LIMIT $4
                 )
                 UPDATE {alarms} a SET claimed_at = $1, claim_expires_at = $3
                 FROM due
                 WHERE a.object_type = due.object_type AND a.object_id = due.object_id
                     AND a.name = due.name
                 RETURNING {a_columns}",
                owned_claim = owned("$5"),
            )),
            next_due: statement(format!(
                "SELECT least(
                     (SELECT a.due_at FROM {alarms} a
                      WHERE NOT a.dead AND a.claimed_at IS NULL AND {owned_due}
                      ORDER BY a.due_at LIMIT 1),
                     (SELECT greatest(a.due_at, a.claim_expires_at) FROM {alarms} a
                      WHERE a.claimed_at IS NOT NULL AND NOT a.dead AND {owned_due}
                      ORDER BY greatest(a.due_at, a.claim_expires_at)
                      LIMIT 1)
                 )",
                owned_due = owned("$1"),
            )),
        }
    }
}

/// Whether the server refused a statement for a serialization failure or a deadlock, which
/// running it again resolves.
fn retryable(error: &sqlx::Error) -> bool {
    error
        .as_database_error()
        .and_then(|db| db.code())
        .is_some_and(|code| code == "40001" || code == "40P01")
}

/// Runs `op` again while the server reports a serialization failure or a deadlock.
async fn retrying<T, F, Fut>(mut op: F) -> Result<T, StorageError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, sqlx::Error>>,
{
    let mut attempt = 1;
    loop {
        match op().await {
            Err(error) if attempt < ATTEMPTS && retryable(&error) => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(5 * u64::from(attempt))).await;
            }
            result => return result.map_err(db_err),
        }
    }
}

fn millis(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

fn db_epoch(epoch: u64) -> i64 {
    i64::try_from(epoch).unwrap_or(i64::MAX)
}

fn db_shard(shard: u32) -> i32 {
    i32::try_from(shard).unwrap_or(i32::MAX)
}

fn stored_shard(shard: i32) -> u32 {
    u32::try_from(shard).unwrap_or(u32::MAX)
}

fn stored_epoch(epoch: i64) -> u64 {
    u64::try_from(epoch).unwrap_or(0)
}

/// The error of an operation on `key` whose shard this node does not hold.
fn not_held(key: &ObjectKey, shard: u32) -> StorageError {
    StorageError::fenced(format!(
        "this node does not hold shard {shard} of {key} (or its lease is no longer valid here)"
    ))
}

/// The error of an operation on `key` whose fence is another node's.
fn fenced_by(key: &ObjectKey, shard: u32, fence: i64, epoch: u64) -> StorageError {
    StorageError::fenced(format!(
        "{key} (shard {shard}) carries fence {fence}, this node writes with epoch {epoch}"
    ))
}

/// What a fenced load read: a placeholder (version 0) holds nothing.
fn fenced_loaded(state: Option<String>, version: i64) -> Result<Loaded, StorageError> {
    if version == 0 && state.is_none() {
        return Ok(Loaded::Absent);
    }
    loaded(state.map(String::into_bytes), Some(version))
}

impl PostgresStore {
    fn cluster_sql(&self) -> &ClusterSql {
        self.cluster
            .sql
            .get_or_init(|| ClusterSql::new(&self.names))
    }

    /// Loads `key` raising its fence to its shard's epoch.
    pub(super) async fn fenced_load(
        &self,
        table: &ShardTable,
        key: &ObjectKey,
    ) -> Result<Loaded, StorageError> {
        let shard = table.shard_of(&key.object_type, &key.object_id);
        let epoch = table.epoch(shard).ok_or_else(|| not_held(key, shard))?;
        let row: Option<(Option<String>, i64)> = sqlx::query_as(self.cluster_sql().load.clone())
            .bind(&key.object_type)
            .bind(&key.object_id)
            .bind(db_epoch(epoch))
            .bind(db_shard(shard))
            .fetch_optional(&self.pool)
            .await
            .map_err(db_err)?;
        match row {
            Some((state, version)) => fenced_loaded(state, version),
            None => {
                // A newer owner's fence is on the object: this node is the stale one.
                table.lose(shard, epoch);
                Err(not_held(key, shard))
            }
        }
    }

    /// Loads `keys` raising their fences, in one statement.
    pub(super) async fn fenced_load_many(
        &self,
        table: &ShardTable,
        keys: &[ObjectKey],
    ) -> Result<Vec<Loaded>, StorageError> {
        // One row per key, in key order (the order rows are locked in).
        let mut unique: Vec<&ObjectKey> = keys.iter().collect();
        unique.sort();
        unique.dedup();
        let mut columns = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let mut epochs = HashMap::new();
        for key in &unique {
            let shard = table.shard_of(&key.object_type, &key.object_id);
            let epoch = table.epoch(shard).ok_or_else(|| not_held(key, shard))?;
            epochs.insert(shard, epoch);
            columns.0.push(key.object_type.as_str());
            columns.1.push(key.object_id.as_str());
            columns.2.push(db_epoch(epoch));
            columns.3.push(db_shard(shard));
        }
        let rows: Vec<(String, String, Option<String>, i64)> =
            sqlx::query_as(self.cluster_sql().load_many.clone())
                .bind(columns.0)
                .bind(columns.1)
                .bind(columns.2)
                .bind(columns.3)
                .fetch_all(&self.pool)
                .await
                .map_err(db_err)?;
        let found: HashMap<(String, String), (Option<String>, i64)> = rows
            .into_iter()
            .map(|(t, i, state, version)| ((t, i), (state, version)))
            .collect();
        keys.iter()
            .map(|key| {
                let row = found
                    .get(&(key.object_type.clone(), key.object_id.clone()))
                    .cloned();
                match row {
                    Some((state, version)) => fenced_loaded(state, version),
                    None => {
                        let shard = table.shard_of(&key.object_type, &key.object_id);
                        if let Some(&epoch) = epochs.get(&shard) {
                            table.lose(shard, epoch);
                        }
                        Err(not_held(key, shard))
                    }
                }
            })
            .collect()
    }

    /// Commits `batch` with every write conditional on its object's fence.
    pub(super) async fn fenced_commit(
        &self,
        table: &ShardTable,
        batch: &[ObjectWrite],
    ) -> Result<(), CommitError> {
        let prepared = prepare(batch)?;
        let mut fences = Vec::with_capacity(prepared.len());
        for p in &prepared {
            let key = &p.write.key;
            let shard = table.shard_of(&key.object_type, &key.object_id);
            let epoch = table.epoch(shard).ok_or_else(|| not_held(key, shard))?;
            fences.push((shard, epoch));
        }
        let mut lease = self.commits.lend().await?;
        let committed = tokio::time::timeout(
            self.commit_timeout,
            self.fenced_commit_on(lease.conn(), table, &prepared, &fences),
        )
        .await
        .unwrap_or_else(|_| {
            Err(CommitError::Storage(StorageError::unavailable(format!(
                "no answer from the server within {} ms; the commit's outcome is unknown",
                self.commit_timeout.as_millis()
            ))))
        });
        let answered = match &committed {
            Ok(())
            | Err(
                CommitError::Conflict { .. }
                | CommitError::KvLimit { .. }
                | CommitError::Fsm { .. },
            ) => true,
            Err(CommitError::Storage(error)) => {
                error.kind() == durable_runtime::storage::StorageErrorKind::Fenced
            }
            Err(_) => false,
        };
        if answered {
            lease.release();
        }
        committed
    }

    async fn fenced_commit_on(
        &self,
        conn: &mut PgConnection,
        table: &ShardTable,
        prepared: &[Prepared<'_>],
        fences: &[(u32, u64)],
    ) -> Result<(), CommitError> {
        let sql = self.cluster_sql();
        let mut tx = conn.begin().await.map_err(db_err)?;
        let types: Vec<&str> = prepared
            .iter()
            .map(|p| p.write.key.object_type.as_str())
            .collect();
        let ids: Vec<&str> = prepared
            .iter()
            .map(|p| p.write.key.object_id.as_str())
            .collect();
        let states: Vec<Option<&str>> = prepared.iter().map(|p| p.state).collect();
        let expected: Vec<i64> = prepared.iter().map(|p| p.expected).collect();
        let fence_column: Vec<i64> = fences.iter().map(|&(_, e)| db_epoch(e)).collect();
        let written: Vec<(String, String)> = sqlx::query_as(sql.commit.clone())
            .bind(types)
            .bind(ids)
            .bind(states)
            .bind(expected)
            .bind(fence_column)
            .fetch_all(&mut *tx)
            .await
            .map_err(db_err)?;
        if let Some(position) = crate::schema::first_missing(
            prepared.iter().enumerate().map(|(i, p)| (i, &p.write.key)),
            &written,
        ) {
            let p = &prepared[position];
            let key = &p.write.key;
            let (shard, epoch) = fences[position];
            let row: Option<(i64, i64)> = sqlx::query_as(sql.fence_of.clone())
                .bind(&key.object_type)
                .bind(&key.object_id)
                .fetch_optional(&mut *tx)
                .await
                .map_err(db_err)?;
            tx.rollback().await.map_err(db_err)?;
            return Err(match row {
                Some((_, fence)) if fence != db_epoch(epoch) => {
                    if fence > db_epoch(epoch) {
                        table.lose(shard, epoch);
                    }
                    CommitError::Storage(fenced_by(key, shard, fence, epoch))
                }
                found => CommitError::Conflict {
                    index: p.index,
                    key: key.clone(),
                    expected: p.write.expected_version,
                    found: found
                        .map(|(version, _)| from_db_version(version))
                        .transpose()?
                        .filter(|&version| version > 0),
                },
            });
        }
        if prepared.iter().any(|p| !p.alarms.is_empty()) {
            apply_alarms_bulk(&mut tx, &self.sql, prepared).await?;
        }
        if prepared.iter().any(|p| !p.write.kv.is_empty()) {
            super::kv::apply(&mut tx, &self.sql.kv, prepared).await?;
        }
        for p in prepared {
            apply_reply(&mut tx, &self.sql, p).await?;
        }
        // FSM changes ride the fenced transaction exactly as they ride an unfenced one.
        if let Some(refused) = self.apply_fsm_changes(&mut tx, prepared).await? {
            tx.rollback().await.map_err(db_err)?;
            return Err(refused);
        }
        if let Some(exceeded) = super::kv::first_over_limit(&mut tx, &self.sql.kv, prepared).await?
        {
            tx.rollback().await.map_err(db_err)?;
            return Err(exceeded);
        }
        tx.commit().await.map_err(db_err)?;
        Ok(())
    }

    /// Writes the FSM inserts and signals of `prepared` in the open transaction; returns the
    /// first refusal (the caller rolls back).
    async fn apply_fsm_changes(
        &self,
        conn: &mut PgConnection,
        prepared: &[Prepared<'_>],
    ) -> Result<Option<CommitError>, StorageError> {
        let Some(first) = prepared.iter().find(|p| !p.write.fsm.is_empty()) else {
            return Ok(None);
        };
        #[cfg(feature = "fsm")]
        {
            let _ = first;
            super::fsm::linked::apply(&self.fsm(), conn, prepared).await
        }
        #[cfg(not(feature = "fsm"))]
        {
            let _ = conn;
            Ok(Some(CommitError::Fsm {
                index: first.index,
                key: first.write.key.clone(),
                refusal: durable_runtime::storage::FsmRefusal::Unsupported,
            }))
        }
    }

    /// Locks the row of `key` in the open transaction and checks that it carries this node's
    /// fence (a deletion is a write like any other).
    pub(super) async fn check_fence(
        &self,
        conn: &mut PgConnection,
        table: &ShardTable,
        key: &ObjectKey,
    ) -> Result<(), StorageError> {
        let shard = table.shard_of(&key.object_type, &key.object_id);
        let epoch = table.epoch(shard).ok_or_else(|| not_held(key, shard))?;
        let fence: Option<i64> = sqlx::query_scalar(self.cluster_sql().fence_lock.clone())
            .bind(&key.object_type)
            .bind(&key.object_id)
            .fetch_optional(&mut *conn)
            .await
            .map_err(db_err)?;
        match fence {
            Some(fence) if fence != db_epoch(epoch) => {
                if fence > db_epoch(epoch) {
                    table.lose(shard, epoch);
                }
                Err(fenced_by(key, shard, fence, epoch))
            }
            _ => Ok(()),
        }
    }

    /// Claims due alarms of the objects of the shards `table` serves.
    pub(super) async fn fenced_claim(
        &self,
        table: &ShardTable,
        now: SystemTime,
        due_by: SystemTime,
        lease_until: SystemTime,
        limit: usize,
    ) -> Result<Vec<AlarmRecord>, StorageError> {
        let serving: Vec<i32> = table.serving_shards().into_iter().map(db_shard).collect();
        if limit == 0 || serving.is_empty() {
            return Ok(Vec::new());
        }
        let rows = sqlx::query(self.cluster_sql().claim.clone())
            .bind(PgTime::new(now)?)
            .bind(PgTime::new(due_by)?)
            .bind(PgTime::new(lease_until)?)
            .bind(claim_limit(limit))
            .bind(serving)
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?;
        Ok(claimed_alarms(&rows, alarm_from_row))
    }

    /// The earliest time an alarm of the shards `table` serves becomes claimable.
    pub(super) async fn fenced_next_due(
        &self,
        table: &ShardTable,
    ) -> Result<Option<SystemTime>, StorageError> {
        let serving: Vec<i32> = table.serving_shards().into_iter().map(db_shard).collect();
        if serving.is_empty() {
            return Ok(None);
        }
        let due: Option<PgTime> = sqlx::query_scalar(self.cluster_sql().next_due.clone())
            .bind(serving)
            .fetch_one(&self.pool)
            .await
            .map_err(db_err)?;
        due.map(PgTime::get).transpose()
    }

    /// Computes the shard of the objects stored before the cluster existed.
    async fn backfill_shards(&self, shards: u32) -> Result<(), StorageError> {
        let sql = self.cluster_sql();
        loop {
            let rows: Vec<(String, String)> = sqlx::query_as(sql.backfill_select.clone())
                .bind(BACKFILL_BATCH)
                .fetch_all(&self.pool)
                .await
                .map_err(db_err)?;
            if rows.is_empty() {
                return Ok(());
            }
            let count = rows.len();
            let computed: Vec<i32> = rows
                .iter()
                .map(|(t, i)| db_shard(durable_runtime::cluster::shard_of(t, i, shards)))
                .collect();
            let (types, ids): (Vec<String>, Vec<String>) = rows.into_iter().unzip();
            sqlx::query(sql.backfill_update.clone())
                .bind(types)
                .bind(ids)
                .bind(computed)
                .execute(&self.pool)
                .await
                .map_err(db_err)?;
            if i64::try_from(count).unwrap_or(i64::MAX) < BACKFILL_BATCH {
                return Ok(());
            }
        }
    }
}

#[async_trait]
impl ClusterBackend for PostgresStore {
    fn attach(&self, table: Arc<ShardTable>) -> Result<(), ClusterError> {
        self.cluster
            .fencing
            .set(table)
            .map_err(|_| ClusterError::AlreadyAttached)
    }

    async fn prepare(&self, shards: u32) -> Result<(), ClusterError> {
        let sql = self.cluster_sql();
        let count = i32::try_from(shards)
            .map_err(|_| ClusterError::InvalidConfig(format!("{shards} shards is too many")))?;
        let stored: i32 = retrying(|| async {
            let mut tx = self.pool.begin().await?;
            sqlx::query(sql.meta_insert.clone())
                .bind(count)
                .execute(&mut *tx)
                .await?;
            let stored: i32 = sqlx::query_scalar(sql.meta_shards.clone())
                .fetch_one(&mut *tx)
                .await?;
            if stored == count {
                sqlx::query(sql.shards_insert.clone())
                    .bind(count)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            Ok(stored)
        })
        .await?;
        if stored != count {
            return Err(ClusterError::ShardCountMismatch {
                configured: shards,
                stored: u32::try_from(stored).unwrap_or(0),
            });
        }
        self.backfill_shards(shards).await?;
        Ok(())
    }

    async fn register(&self, node_id: &str, address: &str) -> Result<u64, StorageError> {
        let generation: i64 = retrying(|| {
            sqlx::query_scalar(self.cluster_sql().register.clone())
                .bind(node_id)
                .bind(address)
                .fetch_one(&self.pool)
        })
        .await?;
        Ok(stored_epoch(generation))
    }

    async fn renew(
        &self,
        node_id: &str,
        generation: u64,
        held: &[(u32, u64)],
        ttl: Duration,
    ) -> Result<Vec<u32>, StorageError> {
        let shards: Vec<i32> = held.iter().map(|&(s, _)| db_shard(s)).collect();
        let epochs: Vec<i64> = held.iter().map(|&(_, e)| db_epoch(e)).collect();
        let renewed: Vec<i32> = retrying(|| {
            sqlx::query_scalar(self.cluster_sql().renew.clone())
                .bind(node_id)
                .bind(db_epoch(generation))
                .bind(&shards)
                .bind(&epochs)
                .bind(millis(ttl))
                .fetch_all(&self.pool)
        })
        .await?;
        Ok(renewed.into_iter().map(stored_shard).collect())
    }

    async fn view(&self, ttl: Duration) -> Result<ClusterView, StorageError> {
        let sql = self.cluster_sql();
        let nodes: Vec<(String, String, i64, bool, String)> = retrying(|| {
            sqlx::query_as(sql.nodes.clone())
                .bind(millis(ttl))
                .fetch_all(&self.pool)
        })
        .await?;
        let shards: Vec<(i32, Option<String>, i64, bool, bool)> = retrying(|| {
            sqlx::query_as(sql.shards.clone())
                .bind(millis(ttl))
                .fetch_all(&self.pool)
        })
        .await?;
        Ok(ClusterView {
            nodes: nodes
                .into_iter()
                .map(|(node_id, address, generation, live, status)| NodeRow {
                    node_id,
                    address,
                    generation: stored_epoch(generation),
                    live,
                    status,
                })
                .collect(),
            shards: shards
                .into_iter()
                .map(|(shard, owner, epoch, free, orphaned)| ShardRow {
                    shard: stored_shard(shard),
                    owner,
                    epoch: stored_epoch(epoch),
                    free,
                    orphaned,
                })
                .collect(),
        })
    }

    async fn acquire(
        &self,
        node_id: &str,
        shards: &[u32],
        ttl: Duration,
    ) -> Result<Vec<(u32, u64)>, StorageError> {
        let shards: Vec<i32> = shards.iter().copied().map(db_shard).collect();
        let acquired: Vec<(i32, i64)> = retrying(|| {
            sqlx::query_as(self.cluster_sql().acquire.clone())
                .bind(node_id)
                .bind(&shards)
                .bind(millis(ttl))
                .fetch_all(&self.pool)
        })
        .await?;
        Ok(acquired
            .into_iter()
            .map(|(shard, epoch)| (stored_shard(shard), stored_epoch(epoch)))
            .collect())
    }

    async fn release(&self, node_id: &str, shards: &[(u32, u64)]) -> Result<(), StorageError> {
        if shards.is_empty() {
            return Ok(());
        }
        let numbers: Vec<i32> = shards.iter().map(|&(s, _)| db_shard(s)).collect();
        let epochs: Vec<i64> = shards.iter().map(|&(_, e)| db_epoch(e)).collect();
        retrying(|| {
            sqlx::query(self.cluster_sql().release.clone())
                .bind(node_id)
                .bind(&numbers)
                .bind(&epochs)
                .execute(&self.pool)
        })
        .await?;
        Ok(())
    }

    async fn leave(&self, node_id: &str, generation: u64) -> Result<(), StorageError> {
        retrying(|| {
            sqlx::query(self.cluster_sql().leave.clone())
                .bind(node_id)
                .bind(db_epoch(generation))
                .execute(&self.pool)
        })
        .await?;
        Ok(())
    }
}
