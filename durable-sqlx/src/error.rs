//! Errors: this crate's own [`Error`] (opening a store, migrations) and the mapping of driver
//! errors to the runtime's [`StorageError`].

use durable_runtime::storage::StorageError;

/// Why a store could not be opened or migrated.
///
/// Errors of the [`Storage`](durable_runtime::storage::Storage) methods themselves are the
/// runtime's [`StorageError`]; this type only covers setting a store up.
///
/// # Examples
///
/// ```
/// # #[cfg(feature = "sqlite")] {
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use durable_sqlx::{Error, SqliteStore};
///
/// let err = SqliteStore::builder("sqlite::memory:")
///     .table_prefix("app-1")
///     .open()
///     .await
///     .unwrap_err();
/// assert!(matches!(err, Error::InvalidName { .. }));
/// assert!(!err.is_retryable());
///
/// // A file that cannot be opened: the message names it, and the likely cause.
/// let err = SqliteStore::open("/no/such/dir/app.db").await.unwrap_err();
/// assert!(matches!(err, Error::Open { .. }));
/// assert!(err.to_string().starts_with(
///     "cannot open SQLite database /no/such/dir/app.db (directory /no/such/dir does not exist): "
/// ));
/// # }
/// # }
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A table prefix or schema name is not a plain lowercase SQL identifier.
    #[error("invalid {what} {value:?}: {reason}")]
    InvalidName {
        /// What the name is for (`"table prefix"` or `"schema"`).
        what: &'static str,
        /// The name given.
        value: String,
        /// What is wrong with it and what to write instead.
        reason: &'static str,
    },
    /// An SQLite page size that is not a power of two from 512 to 65536 bytes.
    #[error("invalid SQLite page size {0}: use a power of two from 512 to 65536 bytes")]
    InvalidPageSize(u32),
    /// The database URL or path could not be parsed.
    #[error("invalid database location: {0}")]
    InvalidLocation(#[source] Box<dyn std::error::Error + Send + Sync + 'static>),
    /// One of the store's schema migrations failed; it was rolled back and the ones before it
    /// stay applied.
    #[error("schema migration {version} ({description}) failed: {source}")]
    Migration {
        /// The version of the migration that failed.
        version: i64,
        /// Its description.
        description: &'static str,
        /// The database error.
        #[source]
        source: StorageError,
    },
    /// Rolling back one of the store's schema migrations failed; nothing of it was changed.
    #[error("rolling back schema migration {version} ({description}) failed: {source}")]
    Rollback {
        /// The version of the migration.
        version: i64,
        /// Its description.
        description: &'static str,
        /// The database error.
        #[source]
        source: StorageError,
    },
    /// The last applied schema migration has no down script, so it cannot be rolled back.
    #[error(
        "schema migration {version} ({description}) has no down script: it cannot be rolled back"
    )]
    Irreversible {
        /// The version of the migration.
        version: i64,
        /// Its description.
        description: &'static str,
    },
    /// The last applied schema migration is unknown to this release (a later release applied
    /// it): roll it back with the release that applied it.
    #[error(
        "schema migration {version} was applied by a later release of durable-sqlx: roll it back with that release"
    )]
    UnknownMigration {
        /// The version of the migration.
        version: i64,
    },
    /// The database could not be opened or connected to: a Postgres server that refuses the
    /// connection or cannot be reached, a SQLite file that cannot be opened (its directory
    /// is missing, no permission). Retryable when the database could not be reached.
    #[error("cannot open {location}: {source}")]
    Open {
        /// What was being opened, without credentials: "PostgreSQL database \`app\` at
        /// 127.0.0.1:5432", or "SQLite database /var/lib/app/app.db".
        location: String,
        /// The driver's error.
        #[source]
        source: StorageError,
    },
    /// The database failed (unreachable, refused a statement).
    #[error(transparent)]
    Storage(#[from] StorageError),
}

impl Error {
    /// Whether trying again later may succeed (the database could not be reached).
    ///
    /// # Examples
    ///
    /// ```
    /// use durable_runtime::storage::StorageError;
    ///
    /// let err = durable_sqlx::Error::from(StorageError::unavailable(std::io::Error::other("down")));
    /// assert!(err.is_retryable());
    /// ```
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Storage(err)
            | Self::Migration { source: err, .. }
            | Self::Rollback { source: err, .. }
            | Self::Open { source: err, .. } => err.is_retryable(),
            Self::InvalidName { .. }
            | Self::InvalidPageSize(_)
            | Self::InvalidLocation(_)
            | Self::Irreversible { .. }
            | Self::UnknownMigration { .. } => false,
        }
    }
}

/// The SQL dialect an error comes from, to read its error code.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Dialect {
    #[cfg(feature = "sqlite")]
    Sqlite,
    #[cfg(feature = "postgres")]
    Postgres,
}

/// Maps a driver error to the runtime's storage error: a failure to reach the database (I/O,
/// connection lost, pool timed out or closed, server shutting down, a lock held by another
/// writer, a serialization failure) is retryable; everything else is a rejection.
pub(crate) fn storage_error(dialect: Dialect, err: sqlx::Error) -> StorageError {
    if is_transient(dialect, &err) {
        StorageError::unavailable(err)
    } else {
        StorageError::rejected(err)
    }
}

fn is_transient(dialect: Dialect, err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => {
            let Some(code) = db.code() else {
                return false;
            };
            match dialect {
                #[cfg(feature = "sqlite")]
                Dialect::Sqlite => matches!(
                    sqlite_primary_code(&code),
                    Some(SQLITE_BUSY | SQLITE_LOCKED | SQLITE_IOERR | SQLITE_FULL)
                ),
                #[cfg(feature = "postgres")]
                Dialect::Postgres => is_transient_sqlstate(&code),
            }
        }
        _ => false,
    }
}

/// Whether `err` is SQLite reporting the database locked by another connection.
#[cfg(feature = "sqlite")]
pub(crate) fn is_sqlite_lock(err: &sqlx::Error) -> bool {
    let code = err.as_database_error().and_then(|db| db.code());
    matches!(
        code.as_deref().and_then(sqlite_primary_code),
        Some(SQLITE_BUSY | SQLITE_LOCKED)
    )
}

/// The primary result code of a SQLite error code: the low byte of the extended code.
#[cfg(feature = "sqlite")]
fn sqlite_primary_code(code: &str) -> Option<i32> {
    code.parse::<i32>().ok().map(|code| code & 0xff)
}

#[cfg(feature = "sqlite")]
const SQLITE_BUSY: i32 = 5;
#[cfg(feature = "sqlite")]
const SQLITE_LOCKED: i32 = 6;
#[cfg(feature = "sqlite")]
const SQLITE_IOERR: i32 = 10;
/// The disk is full: like Postgres's class 53, it may pass once space is freed.
#[cfg(feature = "sqlite")]
const SQLITE_FULL: i32 = 13;

/// SQLSTATEs after which the same operation may succeed later.
#[cfg(feature = "postgres")]
fn is_transient_sqlstate(code: &str) -> bool {
    // Class 08: connection exception. Class 53: insufficient resources (too many connections,
    // out of memory or disk). Class 58: system error (I/O).
    code.starts_with("08")
        || code.starts_with("53")
        || code.starts_with("58")
        || matches!(
            code,
            // admin_shutdown (pg_terminate_backend, server stopping), crash_shutdown,
            // cannot_connect_now (server starting), database_dropped is not transient.
            "57P01" | "57P02" | "57P03"
            // serialization_failure, deadlock_detected
            | "40001" | "40P01"
            // read_only_sql_transaction: a standby or a server in recovery after failover
            | "25006"
            // lock_not_available (`lock_timeout`), query_canceled (`statement_timeout`, or
            // an operator's `pg_cancel_backend`): nothing was applied
            | "55P03" | "57014"
        )
}

/// A rejection carrying a plain message.
pub(crate) fn rejected(message: impl Into<String>) -> StorageError {
    StorageError::rejected(message.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    #[test]
    fn pool_errors_are_retryable() {
        #[cfg(feature = "sqlite")]
        let dialect = Dialect::Sqlite;
        #[cfg(all(not(feature = "sqlite"), feature = "postgres"))]
        let dialect = Dialect::Postgres;
        assert!(storage_error(dialect, sqlx::Error::PoolTimedOut).is_retryable());
        assert!(storage_error(dialect, sqlx::Error::PoolClosed).is_retryable());
        assert!(
            storage_error(
                dialect,
                sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset))
            )
            .is_retryable()
        );
        assert!(!storage_error(dialect, sqlx::Error::RowNotFound).is_retryable());
        assert!(!storage_error(dialect, sqlx::Error::Protocol("bad".into())).is_retryable());
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn sqlstates() {
        assert!(is_transient_sqlstate("57P01"));
        assert!(is_transient_sqlstate("08006"));
        assert!(is_transient_sqlstate("40P01"));
        assert!(is_transient_sqlstate("55P03"), "lock_timeout");
        assert!(is_transient_sqlstate("57014"), "statement_timeout");
        assert!(!is_transient_sqlstate("23505"));
        assert!(!is_transient_sqlstate("42P01"));
    }
}
