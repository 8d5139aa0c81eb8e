//! Object writes that carry FSM changes ([`ObjectWrite::fsm`]): the batch and its FSM inserts
//! and signals in one `BEGIN IMMEDIATE` transaction on the store's writer.
//!
//! The batch statement is sent without its `COMMIT` ([`batch::apply_open`]); once its versions
//! and limits hold, each FSM change runs on the same connection, in batch order, with the FSM
//! store's own statements, and the transaction commits only if every change was accepted. A
//! refused change (an occupied correlation key, a signal with no live target) rolls the whole
//! batch back and names its write.

use durable_runtime::storage::{CommitError, FsmChange, FsmRefusal, ObjectWrite, StorageError};
use sqlx::SqliteConnection;

use super::super::SqliteStore;
use super::super::batch::{self, Opened, Params};
use super::super::writer::WriterGuard;
use super::SqliteFsmStore;
use crate::conflict::{UNLOCATED_RETRIES, kept_changing};
use crate::schema::now_micros;

/// Commits `batch`, some of whose writes carry FSM changes, in one transaction.
pub(in crate::sqlite) async fn commit(
    store: &SqliteStore,
    mut writer: WriterGuard<'_>,
    batch: &[ObjectWrite],
    params: &Params<'_>,
) -> Result<(), CommitError> {
    let fsm = store.fsm();
    for _ in 0..UNLOCATED_RETRIES {
        match batch::apply_open(&mut writer, &store.sql, params).await? {
            Opened::Applied => {}
            Opened::Exceeded(exceeded) => return Err(exceeded),
            Opened::Mismatch => {
                match batch::locate_conflict(writer.connection(), &store.sql, batch).await? {
                    Some(conflict) => return Err(conflict),
                    // The row that did not match changed again since: try the batch again.
                    None => continue,
                }
            }
        }
        let applied = apply(&fsm, writer.connection(), batch, now_micros()).await;
        batch::end_open(&mut writer, matches!(applied, Ok(None))).await?;
        return match applied? {
            None => Ok(()),
            Some(refused) => Err(refused),
        };
    }
    Err(kept_changing())
}

/// Applies the FSM changes of `batch` on `conn`, inside the open transaction. Returns the
/// refusal of the first change refused (the caller rolls back).
async fn apply(
    fsm: &SqliteFsmStore,
    conn: &mut SqliteConnection,
    batch: &[ObjectWrite],
    now: i64,
) -> Result<Option<CommitError>, StorageError> {
    for (index, write) in batch.iter().enumerate() {
        for change in &write.fsm {
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
                index,
                key: write.key.clone(),
                refusal,
            }));
        }
    }
    Ok(None)
}
