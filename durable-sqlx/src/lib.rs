//! SQLite and PostgreSQL storage for [`durable_runtime`], on [sqlx](https://docs.rs/sqlx).
//!
//! Two implementations of the runtime's [`Storage`](durable_runtime::storage::Storage) trait,
//! both checked by the runtime's conformance suite:
//!
//! - [`SqliteStore`] (feature `sqlite`, on by default): an embedded SQLite file. Nothing to
//!   run beside the application; one writer at a time, durable on every commit
//!   (`synchronous = FULL`, or [`Synchronous::Normal`] for speed at the price of the last
//!   commits on power loss).
//! - [`PostgresStore`] (feature `postgres`): a PostgreSQL server that any number of processes
//!   share. Versions reject a write that lost a race; alarm claims never overlap.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use durable_runtime::storage::{ObjectKey, Storage};
//! use durable_sqlx::SqliteStore;
//!
//! // A file path, a `sqlite:` URL, or an in-memory database as here.
//! let store = SqliteStore::open("sqlite::memory:").await?;
//! assert!(store.load(&ObjectKey::new("Counter", "a")).await?.object().is_none());
//! # Ok(()) }
//! ```
//!
//! ```no_run
//! # #[cfg(feature = "postgres")]
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = durable_sqlx::PostgresStore::connect("postgres://postgres@127.0.0.1/app").await?;
//! # drop(store); Ok(()) }
//! # #[cfg(not(feature = "postgres"))] fn main() {}
//! ```
//!
//! # Tables
//!
//! Opening a store applies its embedded migrations (one set per dialect). They are recorded in
//! the store's own table `durable_schema_migrations (version, description, applied_at)`, not in
//! sqlx's `_sqlx_migrations`, so an application's own sqlx migrator in the same database is
//! unaffected. A [table prefix](SqliteStoreBuilder::table_prefix) (and, on Postgres, a
//! [schema](PostgresStoreBuilder::schema)) lets several applications share one database.
//!
//! | table | columns |
//! |---|---|
//! | `durable_objects` | `object_type`, `object_id` (primary key), `state`, `version`, `created_at`, `updated_at` |
//! | `durable_alarms` | `object_type`, `object_id`, `name` (primary key), `due_at`, `claimed_at`, `attempts`, `last_error`, `dead`, `created_at`, `claim_expires_at` |
//! | `durable_commit_guard` (SQLite) | `mismatch`: always empty; it stops a batch with a stale write before its commit |
//! | `durable_fsm` | the FSM engine's instances (feature `fsm`, `PostgresStore::fsm`, `SqliteStore::fsm`): the specification's columns, a per-claim `lease_token`, an `await_deadline` and the concurrency key's `concurrency_key`, `concurrency_limit`, `concurrency_slot`; on SQLite the status is checked text and the correlation scope a bit mask |
//! | `durable_fsm_signals` | the FSM instances' inboxes: `target_id`, `name`, `payload`, `dedup_key` (unique per target) |
//!
//! On Postgres the migrations also create the function `durable_version_mismatch()`, which a
//! batch written as one statement calls to abort itself when a write's version did not match.
//!
//! - `state` is the runtime's encoded state, UTF-8 JSON, in a `TEXT` column on both
//!   databases, so it can be read with SQL (`json_extract(state, '$.count')` on SQLite,
//!   `state::jsonb ->> 'count'` on Postgres). Not `jsonb`: Postgres' `jsonb` rejects strings
//!   holding U+0000 (which JSON writes as the escape `\u0000`), while `TEXT` keeps every state
//!   exactly, byte for byte. A state that is not UTF-8 or holds a raw NUL byte is rejected.
//!   On SQLite, a state of 16 KiB or more is stored compressed, as a zstd frame in a `BLOB`,
//!   which SQL does not read as JSON
//!   ([`SqliteStoreBuilder::compress_states_from`](crate::SqliteStoreBuilder::compress_states_from)).
//! - `version` starts at 1 and grows by one on each write; a write names the version it
//!   replaces and fails with a conflict if the row moved on.
//! - A deleted object keeps its row as a *tombstone*: `state` is `NULL` and `version` one
//!   above the object's last, so that a recreated object continues above every version the key
//!   had and a writer holding an old version gets a conflict. Tombstones are never listed;
//!   select stored objects with `WHERE state IS NOT NULL`.
//! - Times are exact to the microsecond. SQLite has no time type: they are `INTEGER`
//!   microseconds since the Unix epoch (read them with
//!   `datetime(due_at / 1000000, 'unixepoch')`). Postgres uses `timestamptz`.
//! - On Postgres the key columns use the `"C"` collation, so ids are listed in byte order
//!   whatever the database's locale.
//!
//! # Errors
//!
//! The [`Storage`](durable_runtime::storage::Storage) methods return the runtime's
//! [`StorageError`](durable_runtime::storage::StorageError): retryable
//! ([`is_retryable`](durable_runtime::storage::StorageError::is_retryable)) when the database
//! cannot be reached (connection refused or lost, pool timed out, server shutting down, SQLite
//! busy), a rejection otherwise. Opening and migrating return this crate's [`Error`].
//!
//! The [`sqlx`] version this crate uses is re-exported, for building your own pools.
#![deny(missing_docs)]
// Without a backend feature the crate only holds its shared plumbing.
#![cfg_attr(
    not(any(feature = "sqlite", feature = "postgres")),
    allow(dead_code, unused_imports, unused_variables)
)]

#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod conflict;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod dead_alarms;
mod error;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod limits;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod net_alarms;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod net_kv;
#[cfg(feature = "postgres")]
mod postgres;
mod schema;
#[cfg(feature = "sqlite")]
mod sqlite;

pub use error::Error;
#[cfg(all(feature = "postgres", feature = "fsm"))]
pub use postgres::fsm::PostgresFsmStore;
#[cfg(feature = "postgres")]
pub use postgres::{PostgresStore, PostgresStoreBuilder, ReshardError, Resharded};
#[cfg(all(feature = "sqlite", feature = "fsm"))]
pub use sqlite::fsm::SqliteFsmStore;
#[cfg(feature = "sqlite")]
pub use sqlite::{SqliteStore, SqliteStoreBuilder, Synchronous};

/// The sqlx crate this crate is built on, for pools given to `from_pool`.
pub use sqlx;
