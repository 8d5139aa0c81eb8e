//! Reversible schema migrations on SQLite and Postgres (skipped without `DATABASE_URL`): every
//! migration file has a down script, the applied version is reported, and rolling every
//! migration back and applying them again (up, down, up) leaves a working store. Each test
//! works on a fresh database file or schema.

use durable_runtime::storage::{AlarmChange, ObjectKey, ObjectWrite, Storage};
use durable_sqlx::{Error, PostgresStore, SqliteStore};
use durable_tests::SchemaGuard;

/// A fixed instant plus `offset_ms`.
fn at(offset_ms: u64) -> std::time::SystemTime {
    std::time::UNIX_EPOCH + std::time::Duration::from_millis(1_700_000_000_000 + offset_ms)
}

/// The versions of the migration files of `backend`, and whether each has a down script.
fn migration_files(backend: &str) -> Vec<(i64, bool)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../durable-sqlx/migrations")
        .join(backend);
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    let mut versions: Vec<(i64, bool)> = names
        .iter()
        .filter(|name| name.ends_with(".sql") && !name.ends_with(".down.sql"))
        .map(|name| {
            let version = name[..name.find('_').unwrap()].parse().unwrap();
            let down = name.replace(".sql", ".down.sql");
            (version, names.contains(&down))
        })
        .collect();
    versions.sort_unstable();
    versions
}

#[test]
fn every_migration_file_has_a_down_script() {
    for backend in ["sqlite", "postgres"] {
        let files = migration_files(backend);
        assert!(files.len() >= 6, "{backend}: {files:?}");
        for (version, down) in files {
            assert!(down, "{backend} migration {version:04} has no .down.sql");
        }
    }
}

/// The operations a store's migrations serve: a write with an alarm, a load, a deletion (a
/// tombstone), a claim.
async fn works(store: &dyn Storage, id: &str) {
    let key = ObjectKey::new("Counter", id);
    let write = ObjectWrite {
        key: key.clone(),
        expected_version: 0,
        state: Some(br#"{"n":1}"#.to_vec()),
        alarms: vec![AlarmChange::Set {
            name: "tick".into(),
            due_at: at(0),
            payload: None,
        }],
        kv: Vec::new(),
        idempotency: None,
        fsm: Default::default(),
    };
    store.commit(&[write]).await.unwrap();
    assert_eq!(store.load(&key).await.unwrap().version(), 1);
    assert_eq!(store.list_alarms(&key).await.unwrap().len(), 1);
    let claimed = store
        .claim_due_alarms(at(1), at(1), at(60_000), 10)
        .await
        .unwrap();
    assert!(claimed.iter().any(|alarm| alarm.key == key));
    assert!(store.delete(&key).await.unwrap());
}

/// What a store offers to go up and down.
trait Reversible: Storage {
    async fn version(&self) -> Result<Option<i64>, Error>;
    async fn rollback(&self) -> Result<Option<i64>, Error>;
    async fn up(&self) -> Result<(), Error>;
}

impl Reversible for SqliteStore {
    async fn version(&self) -> Result<Option<i64>, Error> {
        self.schema_version().await
    }
    async fn rollback(&self) -> Result<Option<i64>, Error> {
        self.rollback_last_migration().await
    }
    async fn up(&self) -> Result<(), Error> {
        self.migrate().await
    }
}

impl Reversible for PostgresStore {
    async fn version(&self) -> Result<Option<i64>, Error> {
        self.schema_version().await
    }
    async fn rollback(&self) -> Result<Option<i64>, Error> {
        self.rollback_last_migration().await
    }
    async fn up(&self) -> Result<(), Error> {
        self.migrate().await
    }
}

/// Up, down one, up; then down to nothing, one migration at a time, and up again.
async fn round_trip(store: &impl Reversible, backend: &str) {
    let versions: Vec<i64> = migration_files(backend)
        .into_iter()
        .map(|(v, _)| v)
        .collect();
    let last = *versions.last().unwrap();
    assert_eq!(store.version().await.unwrap(), Some(last));
    works(store, "before").await;

    // The last migration, down and up again: the data survives.
    assert_eq!(store.rollback().await.unwrap(), Some(last));
    assert_eq!(
        store.version().await.unwrap(),
        versions.iter().rev().nth(1).copied()
    );
    store.up().await.unwrap();
    assert_eq!(store.version().await.unwrap(), Some(last));
    works(store, "again").await;

    // Every migration, last first.
    for expected in versions.iter().rev() {
        assert_eq!(store.rollback().await.unwrap(), Some(*expected));
    }
    assert_eq!(store.version().await.unwrap(), None);
    assert_eq!(store.rollback().await.unwrap(), None, "nothing left");

    // And up again, to a store that works as a new one.
    store.up().await.unwrap();
    assert_eq!(store.version().await.unwrap(), Some(last));
    works(store, "after").await;
}

#[tokio::test]
async fn sqlite_migrations_go_down_and_up() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("durable.db"))
        .await
        .unwrap();
    round_trip(&store, "sqlite").await;
    // With a table prefix too.
    let prefixed = SqliteStore::builder(dir.path().join("durable.db"))
        .table_prefix("app1_")
        .open()
        .await
        .unwrap();
    round_trip(&prefixed, "sqlite").await;
}

#[tokio::test]
async fn postgres_migrations_go_down_and_up() {
    let Ok(url) = std::env::var("DATABASE_URL") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "DATABASE_URL must be set when CI is set"
        );
        eprintln!("skipped: DATABASE_URL not set");
        return;
    };
    let guard = SchemaGuard::new(&url, "migration_rollback").await;
    let store = PostgresStore::builder(&url)
        .schema(&guard.name)
        .max_connections(2)
        .connect()
        .await
        .unwrap();
    round_trip(&store, "postgres").await;
    let prefixed = PostgresStore::builder(&url)
        .schema(&guard.name)
        .table_prefix("app1_")
        .max_connections(2)
        .connect()
        .await
        .unwrap();
    round_trip(&prefixed, "postgres").await;
}

/// A migration applied by a later release cannot be rolled back by this one.
#[tokio::test]
async fn a_migration_this_release_does_not_know_is_refused() {
    let store = SqliteStore::open("sqlite::memory:").await.unwrap();
    durable_sqlx::sqlx::query(
        "INSERT INTO durable_schema_migrations (version, description, applied_at) VALUES (9999, 'future', 0)",
    )
    .execute(store.pool())
    .await
    .unwrap();
    assert_eq!(store.schema_version().await.unwrap(), Some(9999));
    let err = store.rollback_last_migration().await.unwrap_err();
    assert!(
        matches!(err, Error::UnknownMigration { version: 9999 }),
        "{err:?}"
    );
    assert!(!err.is_retryable());
}
