//! Opening the database a `--database-url` names: an SQLite file or a Postgres server.

use std::path::Path;
use std::sync::Arc;

use durable_sqlx::{PostgresStore, SqliteStore};

use super::Store;
use super::failure::Failure;

/// An opened database, of a known backend (the inspection of stored types needs to know it).
#[derive(Clone, Debug)]
pub(crate) enum Database {
    Sqlite(SqliteStore),
    Postgres(PostgresStore),
}

/// Whether opening may create a database that does not exist yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Create {
    /// `serve`: a new SQLite file is created.
    Allowed,
    /// Inspection: a missing SQLite file is an error, not a new empty database.
    Refused,
}

impl Database {
    /// Opens `url`: `postgres://` or `postgresql://` for Postgres; `sqlite:` URLs and plain
    /// paths for SQLite. Pending migrations are applied.
    pub(crate) async fn open(url: &str, create: Create) -> Result<Self, Failure> {
        let unopened = |error: durable_sqlx::Error| {
            Failure::local(
                "database_unavailable",
                format!("cannot open the database: {error}"),
            )
        };
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return PostgresStore::connect(url)
                .await
                .map(Self::Postgres)
                .map_err(unopened);
        }
        if let Some(scheme) = url.split_once("://").map(|(scheme, _)| scheme)
            && scheme != "sqlite"
        {
            return Err(Failure::local(
                "invalid_database_url",
                format!("unsupported database URL scheme `{scheme}` (expected sqlite or postgres)"),
            ));
        }
        if create == Create::Refused
            && let Some(path) = sqlite_file(url)
            && !Path::new(path).exists()
        {
            return Err(Failure::local(
                "database_not_found",
                format!("no SQLite database at `{path}`"),
            ));
        }
        SqliteStore::open(url)
            .await
            .map(Self::Sqlite)
            .map_err(unopened)
    }

    /// The database as the runtime's storage.
    pub(crate) fn store(&self) -> Store {
        match self {
            Self::Sqlite(store) => Arc::new(store.clone()),
            Self::Postgres(store) => Arc::new(store.clone()),
        }
    }
}

/// The file of an SQLite location (`app.db`, `sqlite://app.db`, `sqlite:app.db?mode=rwc`),
/// `None` for an in-memory database.
fn sqlite_file(url: &str) -> Option<&str> {
    let path = url
        .strip_prefix("sqlite://")
        .or_else(|| url.strip_prefix("sqlite:"))
        .unwrap_or(url);
    let path = path.split_once('?').map_or(path, |(path, _)| path);
    (!path.is_empty() && path != ":memory:").then_some(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_locations_name_their_file() {
        assert_eq!(sqlite_file("app.db"), Some("app.db"));
        assert_eq!(sqlite_file("sqlite://data/app.db"), Some("data/app.db"));
        assert_eq!(sqlite_file("sqlite:app.db?mode=rwc"), Some("app.db"));
        assert_eq!(sqlite_file("sqlite::memory:"), None);
    }
}
