//! Opening the database a `--database-url` names: an SQLite file or a Postgres server.

use std::path::Path;
use std::sync::Arc;

use durable_sqlx::{PostgresStore, SqliteStore};

use super::Store;
use super::args::MigrationsCommand;
use super::failure::Failure;
use super::render::{Reply, SchemaStatus};

/// Where the store's tables are, when not the defaults (`--db-schema`, `--table-prefix`).
#[derive(Clone, Debug, Default)]
pub(crate) struct Tables {
    /// The Postgres schema holding the tables (default: the connection's).
    pub(crate) schema: Option<String>,
    /// The prefix of the table names (default: none).
    pub(crate) prefix: String,
}

/// Whether opening may create a database that does not exist yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Create {
    /// `serve`: a new SQLite file is created.
    Allowed,
    /// Inspection: a missing SQLite file is an error, not a new empty database.
    Refused,
}

/// Opens `url` as a store: `postgres://` or `postgresql://` for Postgres; `sqlite:` URLs and
/// plain paths for SQLite. Pending migrations are applied.
pub(crate) async fn open(url: &str, tables: &Tables, create: Create) -> Result<Store, Failure> {
    let unopened = |error: durable_sqlx::Error| {
        Failure::local(
            "database_unavailable",
            format!("cannot open the database: {error}"),
        )
    };
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let mut builder = PostgresStore::builder(url).table_prefix(tables.prefix.as_str());
        if let Some(schema) = &tables.schema {
            builder = builder.schema(schema.as_str());
        }
        let store = builder.connect().await.map_err(unopened)?;
        return Ok(Arc::new(store));
    }
    if let Some(scheme) = url.split_once("://").map(|(scheme, _)| scheme)
        && scheme != "sqlite"
    {
        return Err(Failure::local(
            "invalid_database_url",
            format!("unsupported database URL scheme `{scheme}` (expected sqlite or postgres)"),
        ));
    }
    if tables.schema.is_some() {
        return Err(Failure::local(
            "usage",
            "--db-schema applies to Postgres only",
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
    let store = SqliteStore::builder(url)
        .table_prefix(tables.prefix.as_str())
        .open()
        .await
        .map_err(unopened)?;
    Ok(Arc::new(store))
}

/// `migrations status|rollback` on `url`, opened without applying migrations. A rollback
/// changes the schema under any runtime using the database: it needs `offline`.
pub(crate) async fn migrations(
    url: &str,
    tables: &Tables,
    command: MigrationsCommand,
    offline: bool,
) -> Result<Reply, Failure> {
    if matches!(command, MigrationsCommand::Rollback) && !offline {
        return Err(Failure::local(
            "offline_required",
            "to roll back a migration, no runtime may use the database: stop them, then pass \
             --offline",
        ));
    }
    let failed = |error: durable_sqlx::Error| match error {
        durable_sqlx::Error::Open { .. } => Failure::local(
            "database_unavailable",
            format!("cannot open the database: {error}"),
        ),
        other => Failure::local("migration_failed", other.to_string()),
    };
    let rollback = matches!(command, MigrationsCommand::Rollback);
    let (rolled_back, schema_version) =
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let mut builder = PostgresStore::builder(url)
                .table_prefix(tables.prefix.as_str())
                .migrate_on_open(false);
            if let Some(schema) = &tables.schema {
                builder = builder.schema(schema.as_str());
            }
            let store = builder.connect().await.map_err(failed)?;
            let rolled_back = match rollback {
                true => store.rollback_last_migration().await.map_err(failed)?,
                false => None,
            };
            (rolled_back, store.schema_version().await.map_err(failed)?)
        } else {
            if let Some(path) = sqlite_file(url)
                && !Path::new(path).exists()
            {
                return Err(Failure::local(
                    "database_not_found",
                    format!("no SQLite database at `{path}`"),
                ));
            }
            let store = SqliteStore::builder(url)
                .table_prefix(tables.prefix.as_str())
                .migrate_on_open(false)
                .open()
                .await
                .map_err(failed)?;
            let rolled_back = match rollback {
                true => store.rollback_last_migration().await.map_err(failed)?,
                false => None,
            };
            (rolled_back, store.schema_version().await.map_err(failed)?)
        };
    Ok(Reply::Schema(SchemaStatus {
        schema_version,
        rolled_back,
    }))
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
