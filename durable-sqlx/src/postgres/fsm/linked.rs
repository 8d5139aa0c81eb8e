//! Object writes that carry FSM changes ([`ObjectWrite::fsm`]): the batch and its FSM inserts
//! and signals in one transaction.
//!
//! The batch's writes are applied as any transactional batch is
//! ([`writes::apply_in_transaction`]); once their versions and limits hold, each FSM change
//! runs on the same connection, in batch order, with the FSM store's own statements, and the
//! transaction commits only if every change was accepted. A refused change (an occupied
//! correlation key, a signal with no live target) rolls everything back and names its write.
//!
//! [`ObjectWrite::fsm`]: durable_runtime::storage::ObjectWrite::fsm

use std::time::SystemTime;

use durable_runtime::storage::{
    CommitError, FsmChange, FsmRefusal, StorageError, truncate_to_micros,
};
use sqlx::{Connection, PgConnection};

use super::super::sql::Sql;
use super::super::writes::{self, Prepared};
use super::PostgresFsmStore;
use crate::postgres::db_err;

/// Commits `prepared`, some of whose writes carry FSM changes, in one transaction on `conn`.
pub(in crate::postgres) async fn commit_on(
    conn: &mut PgConnection,
    sql: &Sql,
    fsm: &PostgresFsmStore,
    prepared: &[Prepared<'_>],
) -> Result<(), CommitError> {
    let mut tx = conn.begin().await.map_err(db_err)?;
    let refused = match writes::apply_in_transaction(&mut tx, sql, prepared).await? {
        Some(refused) => Some(refused),
        None => apply(fsm, &mut tx, prepared).await?,
    };
    if let Some(refused) = refused {
        tx.rollback().await.map_err(db_err)?;
        return Err(refused);
    }
    tx.commit().await.map_err(db_err)?;
    Ok(())
}

/// Applies the FSM changes of `prepared`, in batch order, on `conn` inside the open
/// transaction. Returns the refusal of the first change refused (the caller rolls back).
pub(in crate::postgres) async fn apply(
    fsm: &PostgresFsmStore,
    conn: &mut PgConnection,
    prepared: &[Prepared<'_>],
) -> Result<Option<CommitError>, StorageError> {
    let now = truncate_to_micros(SystemTime::now());
    // `prepared` is in key order (the order rows are locked in); changes apply in batch order.
    let mut in_batch_order: Vec<&Prepared<'_>> = prepared.iter().collect();
    in_batch_order.sort_by_key(|p| p.index);
    for p in in_batch_order {
        for change in &p.write.fsm {
            let refusal = match change {
                FsmChange::Insert(instance) => {
                    let inserted = fsm.insert_on(conn, &[(instance, None)], now).await?;
                    if !inserted.is_empty() {
                        continue;
                    }
                    FsmRefusal::Duplicate {
                        correlation_key: instance.correlation_key.clone().unwrap_or_default(),
                    }
                }
                FsmChange::Signal { target, signal } => {
                    if fsm.signal_on(conn, target, signal, now).await?.is_some() {
                        continue;
                    }
                    FsmRefusal::no_target(target, signal.name.clone())
                }
            };
            return Ok(Some(CommitError::Fsm {
                index: p.index,
                key: p.write.key.clone(),
                refusal,
            }));
        }
    }
    Ok(None)
}
