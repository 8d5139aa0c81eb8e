//! Committing a batch: its writes are checked and converted before anything is sent
//! ([`Prepared`]), then applied by the cheapest route that fits. A single object write without
//! alarm changes is one statement, a transaction of its own; a batch of state writes only is
//! one statement too ([`states`]); anything else runs in a transaction, one statement per row
//! for a single write, array statements for several.

use durable_runtime::storage::{AlarmChange, CommitError, ObjectKey, ObjectWrite, StorageError};
use sqlx::{Connection, PgConnection};

use super::sql::Sql;
use super::time::PgTime;
use super::{PostgresStore, db_err, states};
use crate::net_alarms::NetAlarms;
use crate::schema::{first_missing, state_text, to_db_version, to_micros};

/// A write checked and converted before the transaction starts.
pub(super) struct Prepared<'a> {
    pub(super) index: usize,
    pub(super) write: &'a ObjectWrite,
    pub(super) state: Option<&'a str>,
    pub(super) expected: i64,
    pub(super) alarms: Vec<(&'a AlarmChange, Option<PgTime>)>,
}

pub(super) fn prepare(batch: &[ObjectWrite]) -> Result<Vec<Prepared<'_>>, StorageError> {
    let mut prepared = batch
        .iter()
        .enumerate()
        .map(|(index, write)| {
            Ok(Prepared {
                index,
                write,
                state: write.state.as_deref().map(state_text).transpose()?,
                expected: to_db_version(write.expected_version)?,
                alarms: write
                    .alarms
                    .iter()
                    .map(|change| match change {
                        AlarmChange::Set { due_at, .. } => {
                            Ok((change, Some(PgTime::new(*due_at)?)))
                        }
                        AlarmChange::Finish { claimed_at, .. } => {
                            Ok((change, Some(PgTime::new(*claimed_at)?)))
                        }
                        _ => Ok((change, None)),
                    })
                    .collect::<Result<_, StorageError>>()?,
            })
        })
        .collect::<Result<Vec<_>, StorageError>>()?;
    // Concurrent batches lock their rows in one global order (by key), so they never deadlock.
    prepared.sort_by(|a, b| a.write.key.cmp(&b.write.key));
    Ok(prepared)
}

/// Applies each write with one statement per row, then its alarm changes in order.
/// `Err(position)` names the first write, in `prepared`, whose version did not match.
async fn apply_each(
    conn: &mut PgConnection,
    sql: &Sql,
    prepared: &[Prepared<'_>],
) -> Result<Result<(), usize>, StorageError> {
    for (position, p) in prepared.iter().enumerate() {
        if !apply_object_row(conn, sql, p).await? {
            return Ok(Err(position));
        }
        apply_alarm_changes(conn, sql, p).await?;
        apply_reply(conn, sql, p).await?;
    }
    Ok(Ok(()))
}

/// Writes one object's row, checking its version. Returns whether it matched.
async fn apply_object_row(
    conn: &mut PgConnection,
    sql: &Sql,
    p: &Prepared<'_>,
) -> Result<bool, StorageError> {
    let key = &p.write.key;
    let query = match (p.state, p.expected) {
        (Some(state), 0) => sqlx::query(sql.insert.clone())
            .bind(&key.object_type)
            .bind(&key.object_id)
            .bind(state),
        (Some(state), expected) => sqlx::query(sql.update.clone())
            .bind(&key.object_type)
            .bind(&key.object_id)
            .bind(state)
            .bind(expected),
        (None, expected) => sqlx::query(sql.touch.clone())
            .bind(&key.object_type)
            .bind(&key.object_id)
            .bind(expected),
    };
    let affected = query
        .execute(&mut *conn)
        .await
        .map_err(db_err)?
        .rows_affected();
    Ok(affected == 1)
}

/// Stores the reply a write carries under its idempotency key, if any.
pub(super) async fn apply_reply(
    conn: &mut PgConnection,
    sql: &Sql,
    p: &Prepared<'_>,
) -> Result<(), StorageError> {
    let Some(reply) = &p.write.idempotency else {
        return Ok(());
    };
    let key = &p.write.key;
    sqlx::query(sql.reply_insert.clone())
        .bind(&key.object_type)
        .bind(&key.object_id)
        .bind(reply.key.as_bytes())
        .bind(&reply.fingerprint)
        .bind(&reply.reply)
        .bind(to_micros(reply.expires_at)?)
        .execute(&mut *conn)
        .await
        .map_err(db_err)?;
    Ok(())
}

/// Applies one write's alarm changes, in order.
async fn apply_alarm_changes(
    conn: &mut PgConnection,
    sql: &Sql,
    p: &Prepared<'_>,
) -> Result<(), StorageError> {
    let key = &p.write.key;
    for (change, time) in &p.alarms {
        let query = match change {
            AlarmChange::Set { name, payload, .. } => sqlx::query(sql.alarm_set.clone())
                .bind(&key.object_type)
                .bind(&key.object_id)
                .bind(name)
                .bind(*time)
                .bind(payload.as_deref()),
            AlarmChange::Cancel { name } => sqlx::query(sql.alarm_cancel.clone())
                .bind(&key.object_type)
                .bind(&key.object_id)
                .bind(name),
            AlarmChange::CancelAll => sqlx::query(sql.alarm_cancel_all.clone())
                .bind(&key.object_type)
                .bind(&key.object_id),
            // The time bound here is the claim time.
            AlarmChange::Finish { name, .. } => sqlx::query(sql.finish.clone())
                .bind(&key.object_type)
                .bind(&key.object_id)
                .bind(name)
                .bind(*time),
            // Checked once the whole batch is applied.
            AlarmChange::Limit { .. } => continue,
        };
        query.execute(&mut *conn).await.map_err(db_err)?;
    }
    Ok(())
}

/// Applies a batch with array statements: new objects in one `INSERT ... SELECT FROM unnest`,
/// updated ones in one `UPDATE ... FROM unnest`, the removal of fired alarms in one `DELETE`.
/// Version checks come from `RETURNING`: a row missing from it did not match. Writes that only
/// touch the version, and alarm changes other than removals of fired alarms, keep one
/// statement each (in order per object). `Err(position)` names the first write, in
/// `prepared`, whose version did not match.
async fn apply_bulk(
    conn: &mut PgConnection,
    sql: &Sql,
    prepared: &[Prepared<'_>],
) -> Result<Result<(), usize>, StorageError> {
    let positions = |keep: &dyn Fn(&Prepared<'_>) -> bool| -> Vec<usize> {
        (0..prepared.len())
            .filter(|&i| keep(&prepared[i]))
            .collect()
    };
    let columns = |chunk: &[usize]| {
        let types: Vec<&str> = chunk
            .iter()
            .map(|&i| prepared[i].write.key.object_type.as_str())
            .collect();
        let ids: Vec<&str> = chunk
            .iter()
            .map(|&i| prepared[i].write.key.object_id.as_str())
            .collect();
        let states: Vec<&str> = chunk
            .iter()
            .map(|&i| prepared[i].state.unwrap_or_default())
            .collect();
        (types, ids, states)
    };
    let inserts = positions(&|p| p.state.is_some() && p.expected == 0);
    if !inserts.is_empty() {
        let (types, ids, states) = columns(&inserts);
        let written: Vec<(String, String)> = sqlx::query_as(sql.insert_many.clone())
            .bind(types)
            .bind(ids)
            .bind(states)
            .fetch_all(&mut *conn)
            .await
            .map_err(db_err)?;
        if let Some(missing) = first_missing(keys_at(prepared, &inserts), &written) {
            return Ok(Err(missing));
        }
    }
    let updates = positions(&|p| p.state.is_some() && p.expected != 0);
    if !updates.is_empty() {
        let (types, ids, states) = columns(&updates);
        let expected: Vec<i64> = updates.iter().map(|&i| prepared[i].expected).collect();
        let written: Vec<(String, String)> = sqlx::query_as(sql.update_many.clone())
            .bind(types)
            .bind(ids)
            .bind(states)
            .bind(expected)
            .fetch_all(&mut *conn)
            .await
            .map_err(db_err)?;
        if let Some(missing) = first_missing(keys_at(prepared, &updates), &written) {
            return Ok(Err(missing));
        }
    }
    for (position, p) in prepared.iter().enumerate() {
        if p.state.is_none() && !apply_object_row(conn, sql, p).await? {
            return Ok(Err(position));
        }
    }
    apply_alarms_bulk(conn, sql, prepared).await?;
    for p in prepared {
        apply_reply(conn, sql, p).await?;
    }
    Ok(Ok(()))
}

/// Applies the alarm changes of a batch with one statement per kind of change. Each write's
/// changes are reduced to their net effect ([`NetAlarms`]: after any cancel-all, each name is
/// touched once), and writes are for distinct objects, so applying cancel-alls first and then
/// the per-name changes, kind by kind, does what applying each write's changes in order does.
pub(super) async fn apply_alarms_bulk(
    conn: &mut PgConnection,
    sql: &Sql,
    prepared: &[Prepared<'_>],
) -> Result<(), StorageError> {
    let mut cancel_alls: (Vec<&str>, Vec<&str>) = Default::default();
    let mut cancels: (Vec<&str>, Vec<&str>, Vec<&str>) = Default::default();
    let mut finishes: (Vec<&str>, Vec<&str>, Vec<&str>, Vec<PgTime>) = Default::default();
    let mut sets: Sets<'_> = Default::default();
    for p in prepared {
        let net = NetAlarms::of(&p.write.alarms);
        let (t, i) = (
            p.write.key.object_type.as_str(),
            p.write.key.object_id.as_str(),
        );
        if net.cancel_all {
            cancel_alls.0.push(t);
            cancel_alls.1.push(i);
        }
        for name in net.cancels {
            cancels.0.push(t);
            cancels.1.push(i);
            cancels.2.push(name);
        }
        for (name, claimed_at) in net.finishes {
            finishes.0.push(t);
            finishes.1.push(i);
            finishes.2.push(name);
            finishes.3.push(PgTime::new(claimed_at)?);
        }
        for (name, due_at, payload) in net.sets {
            sets.0.push(t);
            sets.1.push(i);
            sets.2.push(name);
            sets.3.push(PgTime::new(due_at)?);
            sets.4.push(payload);
        }
    }
    if !cancel_alls.0.is_empty() {
        sqlx::query(sql.cancel_all_many.clone())
            .bind(cancel_alls.0)
            .bind(cancel_alls.1)
            .execute(&mut *conn)
            .await
            .map_err(db_err)?;
    }
    if !cancels.0.is_empty() {
        sqlx::query(sql.cancel_many.clone())
            .bind(cancels.0)
            .bind(cancels.1)
            .bind(cancels.2)
            .execute(&mut *conn)
            .await
            .map_err(db_err)?;
    }
    if !finishes.0.is_empty() {
        sqlx::query(sql.finish_many.clone())
            .bind(finishes.0)
            .bind(finishes.1)
            .bind(finishes.2)
            .bind(finishes.3)
            .execute(&mut *conn)
            .await
            .map_err(db_err)?;
    }
    if !sets.0.is_empty() {
        sqlx::query(sql.set_many.clone())
            .bind(sets.0)
            .bind(sets.1)
            .bind(sets.2)
            .bind(sets.3)
            .bind(sets.4)
            .execute(&mut *conn)
            .await
            .map_err(db_err)?;
    }
    Ok(())
}

/// The columns of scheduled alarms: types, ids, names, due times and payloads.
type Sets<'a> = (
    Vec<&'a str>,
    Vec<&'a str>,
    Vec<&'a str>,
    Vec<PgTime>,
    Vec<Option<&'a [u8]>>,
);

/// The positions of `chunk` with the keys of their writes.
fn keys_at<'a>(
    prepared: &'a [Prepared<'_>],
    chunk: &'a [usize],
) -> impl ExactSizeIterator<Item = (usize, &'a ObjectKey)> {
    chunk.iter().map(|&i| (i, &prepared[i].write.key))
}

pub(super) fn attempts_param(attempts: u32) -> Result<i32, StorageError> {
    i32::try_from(attempts)
        .map_err(|_| crate::error::rejected(format!("attempt count {attempts} is out of range")))
}

/// Commits `prepared` on `conn`.
pub(super) async fn commit_on(
    conn: &mut PgConnection,
    sql: &Sql,
    prepared: &[Prepared<'_>],
) -> Result<(), CommitError> {
    let with_kv = prepared.iter().any(|p| !p.write.kv.is_empty());
    // A stored reply is a row of its own: such a write goes through a transaction.
    let replies = prepared.iter().any(|p| p.write.idempotency.is_some());
    if let [single] = prepared
        && single.alarms.is_empty()
        && !with_kv
        && !replies
    {
        // One statement is a transaction of its own: no BEGIN and COMMIT round trips.
        if apply_object_row(conn, sql, single).await? {
            return Ok(());
        }
        let found = PostgresStore::found_version(conn, sql, &single.write.key).await?;
        return Err(CommitError::Conflict {
            index: single.index,
            key: single.write.key.clone(),
            expected: single.write.expected_version,
            found,
        });
    }
    if !with_kv && !replies && states::applies(prepared) {
        return states::commit(conn, &sql.states, prepared).await;
    }
    let mut tx = conn.begin().await.map_err(db_err)?;
    if let Some(refused) = apply_in_transaction(&mut tx, sql, prepared).await? {
        tx.rollback().await.map_err(db_err)?;
        return Err(refused);
    }
    tx.commit().await.map_err(db_err)?;
    Ok(())
}

/// Applies `prepared` inside a transaction the caller opened and ends. Returns the error of
/// the first write refused (a version that did not match, a limit exceeded): the caller rolls
/// back then.
pub(super) async fn apply_in_transaction(
    conn: &mut PgConnection,
    sql: &Sql,
    prepared: &[Prepared<'_>],
) -> Result<Option<CommitError>, CommitError> {
    // A batch of several writes goes through a few array statements: one round trip to
    // the server per statement is most of what a commit costs.
    let applied = if prepared.len() == 1 {
        apply_each(conn, sql, prepared).await?
    } else {
        apply_bulk(conn, sql, prepared).await?
    };
    if let Err(position) = applied {
        let p = &prepared[position];
        let found = PostgresStore::found_version(conn, sql, &p.write.key).await?;
        return Ok(Some(CommitError::Conflict {
            index: p.index,
            key: p.write.key.clone(),
            expected: p.write.expected_version,
            found,
        }));
    }
    if prepared.iter().any(|p| !p.write.kv.is_empty()) {
        super::kv::apply(conn, &sql.kv, prepared).await?;
    }
    Ok(super::kv::first_over_limit(conn, &sql.kv, prepared).await?)
}
