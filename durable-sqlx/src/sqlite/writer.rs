//! The store's one writing connection.
//!
//! SQLite admits one writer at a time, so the store writes through one connection of its own,
//! opened with the pool's options, instead of whichever pooled connection is free. Besides
//! queueing writers here (a writer that finds SQLite's lock taken backs off in sleeps of up to
//! 100 ms; queueing in process hands the lock over as soon as it is free), this keeps the
//! writer's page cache valid: a connection that finds the database changed by another
//! connection since its last transaction drops its cache and reads the pages again. Reads keep
//! using the pool.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use durable_runtime::storage::StorageError;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool};
use sqlx::{ConnectOptions, Connection, SqliteConnection};
use tokio::sync::{Mutex, MutexGuard};

use super::db_err;

/// The writing connection, opened when the store opens and again after it was discarded.
#[derive(Debug)]
pub(super) struct Writer {
    options: Arc<SqliteConnectOptions>,
    connection: Mutex<Option<SqliteConnection>>,
    /// Set by [`close`](Writer::close): no connection is opened again.
    closed: AtomicBool,
}

impl Writer {
    /// A writer to the database of `pool`, with its connection options.
    pub(super) fn new(pool: &SqlitePool) -> Self {
        Self {
            options: pool.connect_options(),
            connection: Mutex::new(None),
            closed: AtomicBool::new(false),
        }
    }

    /// Waits for the writer's turn and returns its connection.
    pub(super) async fn lock(&self) -> Result<WriterGuard<'_>, StorageError> {
        let mut guard = self.connection.lock().await;
        if self.closed.load(Ordering::Acquire) {
            return Err(StorageError::unavailable("the SQLite store is closed"));
        }
        if guard.is_none() {
            *guard = Some(self.options.connect().await.map_err(db_err)?);
        }
        Ok(WriterGuard {
            connection: guard,
            in_transaction: false,
        })
    }

    /// Waits for the writer's turn without taking its connection: nothing this store writes
    /// comes in while the returned guard is held.
    pub(super) async fn hold(&self) -> MutexGuard<'_, Option<SqliteConnection>> {
        self.connection.lock().await
    }

    /// Closes the connection, after the write holding it (if any) is done; later writes fail.
    pub(super) async fn close(&self) {
        let connection = {
            let mut guard = self.connection.lock().await;
            self.closed.store(true, Ordering::Release);
            guard.take()
        };
        if let Some(connection) = connection {
            let _ = connection.close().await;
        }
    }
}

/// The writer's turn: its connection, held until dropped.
pub(super) struct WriterGuard<'a> {
    connection: MutexGuard<'a, Option<SqliteConnection>>,
    /// A transaction opened by the store's own SQL (not sqlx's `begin`, which rolls back by
    /// itself) may be open on the connection.
    in_transaction: bool,
}

impl WriterGuard<'_> {
    /// The connection.
    pub(super) fn connection(&mut self) -> &mut SqliteConnection {
        self.connection
            .as_mut()
            .expect("a writer guard always holds a connection")
    }

    /// Opens an immediate transaction on the connection: it takes SQLite's write lock at once,
    /// so nothing another connection writes can come between its reads and its writes. sqlx
    /// rolls it back if it is dropped unfinished.
    pub(super) async fn begin_immediate(
        &mut self,
    ) -> Result<sqlx::Transaction<'_, sqlx::Sqlite>, StorageError> {
        self.connection()
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(db_err)
    }

    /// The next query opens a transaction of its own (`BEGIN ..; ..; COMMIT`): until
    /// [`transaction_ended`](Self::transaction_ended), dropping the guard closes the connection.
    /// A caller that gives up on the query (a timeout, a cancelled task) drops the guard while
    /// the query may have stopped after its `BEGIN`, and a connection left inside a transaction
    /// would keep SQLite's write lock and fail every later transaction.
    pub(super) fn transaction_started(&mut self) {
        self.in_transaction = true;
    }

    /// The transaction opened since [`transaction_started`](Self::transaction_started) is over
    /// (committed or rolled back).
    pub(super) fn transaction_ended(&mut self) {
        self.in_transaction = false;
    }

    /// Rolls back the transaction a failed query left open (or finds none open, if its `BEGIN`
    /// failed) and marks it ended. Returns false if the connection's state is unknown then: the
    /// transaction stays marked open, so the guard closes the connection when it is dropped.
    pub(super) async fn roll_back(&mut self) -> bool {
        let rolled_back = match sqlx::query("ROLLBACK").execute(self.connection()).await {
            Ok(_) => true,
            Err(error) => {
                let no_transaction = error
                    .as_database_error()
                    .is_some_and(|db| db.message().contains("no transaction is active"));
                if !no_transaction {
                    tracing::warn!(%error, "rolling back a failed SQLite write failed; closing its connection");
                }
                no_transaction
            }
        };
        if rolled_back {
            self.transaction_ended();
        }
        rolled_back
    }
}

impl Drop for WriterGuard<'_> {
    fn drop(&mut self) {
        if self.in_transaction {
            drop(self.connection.take());
        }
    }
}
