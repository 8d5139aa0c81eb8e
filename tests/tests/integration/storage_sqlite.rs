//! The storage conformance suite on `SqliteStore`, and SQLite-specific storage tests:
//! migrations, upgrades, table prefixes, coexistence with a user's sqlx migrations, settings.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use durable_runtime::conformance::Fixture;
use durable_runtime::storage::{
    AlarmChange, CommitError, Loaded, ObjectKey, ObjectWrite, Storage, StorageErrorKind,
    StoredObject,
};
use durable_sqlx::sqlx::migrate::Migrator;
use durable_sqlx::sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use durable_sqlx::sqlx::{self, AssertSqlSafe, Connection, SqliteConnection, SqlitePool};
use durable_sqlx::{Error, SqliteStore, SqliteStoreBuilder, Synchronous};
use tempfile::TempDir;

use crate::storage_shared;
use storage_shared::at;

/// A store on a new database file, deleted with the fixture.
struct SqliteFixture {
    store: SqliteStore,
    _dir: TempDir,
}

impl Fixture for SqliteFixture {
    type Store = SqliteStore;

    fn store(&self) -> &SqliteStore {
        &self.store
    }
}

async fn fixture() -> SqliteFixture {
    let dir = tempfile::tempdir().expect("temporary directory");
    let store = SqliteStore::open(dir.path().join("durable.db"))
        .await
        .expect("open SQLite");
    SqliteFixture { store, _dir: dir }
}

durable_runtime::conformance_tests!(|_case| async { Some(fixture().await) });

fn db_path(dir: &TempDir) -> PathBuf {
    dir.path().join("durable.db")
}

fn insert(key: &ObjectKey, state: &str) -> ObjectWrite {
    ObjectWrite {
        key: key.clone(),
        expected_version: 0,
        state: Some(state.as_bytes().to_vec()),
        alarms: vec![],
        kv: Vec::new(),
        idempotency: None,
        fsm: Default::default(),
    }
}

/// `insert`, also setting the alarm `name` due at `due_at`.
fn insert_with_alarm(key: &ObjectKey, state: &str, name: &str, due_at: SystemTime) -> ObjectWrite {
    let mut write = insert(key, state);
    write.alarms.push(AlarmChange::Set {
        name: name.to_owned(),
        due_at,
        payload: None,
    });
    write
}

/// A connection of another process to the database at `path`, holding its write lock
/// (`BEGIN IMMEDIATE`) until it runs `ROLLBACK`.
async fn hold_the_write_lock(path: &Path, busy_timeout: Duration) -> SqliteConnection {
    let options = SqliteConnectOptions::new()
        .filename(path)
        .busy_timeout(busy_timeout);
    let mut other = SqliteConnection::connect_with(&options).await.unwrap();
    sqlx::raw_sql("BEGIN IMMEDIATE")
        .execute(&mut other)
        .await
        .unwrap();
    other
}

async fn tables(pool: &SqlitePool) -> Vec<String> {
    sqlx::query_scalar("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        .fetch_all(pool)
        .await
        .unwrap()
}

async fn applied_versions(pool: &SqlitePool, table: &str) -> Vec<i64> {
    sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT version FROM {table} ORDER BY version"
    )))
    .fetch_all(pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn run_all_passes() {
    let dirs = std::sync::Mutex::new(Vec::new());
    durable_runtime::conformance::run_all(|| async {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(db_path(&dir)).await.unwrap();
        dirs.lock().unwrap().push(dir);
        store
    })
    .await;
}

#[tokio::test]
async fn migrations_applied_twice_are_a_no_op() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(db_path(&dir)).await.unwrap();
    let key = ObjectKey::new("Counter", "a");
    store.commit(&[insert(&key, "{\"n\":1}")]).await.unwrap();
    assert_eq!(
        applied_versions(store.pool(), "durable_schema_migrations").await,
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 100, 101, 102]
    );
    store.migrate().await.unwrap();
    store.migrate().await.unwrap();
    drop(store);
    // Reopening applies nothing either.
    let store = SqliteStore::open(db_path(&dir)).await.unwrap();
    assert_eq!(
        applied_versions(store.pool(), "durable_schema_migrations").await,
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 100, 101, 102]
    );
    assert_eq!(
        store.load(&key).await.unwrap().object(),
        Some(StoredObject {
            state: b"{\"n\":1}".to_vec(),
            version: 1
        })
    );
    // The store never touches sqlx's own migrations table.
    assert!(
        !tables(store.pool())
            .await
            .contains(&"_sqlx_migrations".to_owned())
    );
}

#[tokio::test]
async fn concurrent_opens_migrate_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = db_path(&dir);
    let opens = (0..4).map(|_| SqliteStore::open(&path));
    let stores = futures_util::future::join_all(opens).await;
    let stores: Vec<SqliteStore> = stores.into_iter().map(Result::unwrap).collect();
    assert_eq!(
        applied_versions(stores[0].pool(), "durable_schema_migrations").await,
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 100, 101, 102]
    );
}

/// A database created by the first migration only, with data in it, is upgraded in place.
#[tokio::test]
async fn upgrade_from_first_migration_keeps_data() {
    let dir = tempfile::tempdir().unwrap();
    let old = SqliteStore::builder(db_path(&dir))
        .migrate_on_open(false)
        .open()
        .await
        .unwrap();
    old.migrate_to(1).await.unwrap();
    assert_eq!(
        applied_versions(old.pool(), "durable_schema_migrations").await,
        [1]
    );
    // Rows as the first schema stored them (no `last_error` / `dead` columns yet).
    let due = 1_700_000_000_123_457i64;
    sqlx::raw_sql(AssertSqlSafe(format!(
        "INSERT INTO durable_objects (object_type, object_id, state, version, created_at, updated_at)
             VALUES ('Counter', 'a', '{{\"n\":41}}', 7, 1, 2);
         INSERT INTO durable_alarms (object_type, object_id, name, due_at, claimed_at, attempts, created_at)
             VALUES ('Counter', 'a', 'tick', {due}, NULL, 2, 1);"
    )))
    .execute(old.pool())
    .await
    .unwrap();
    old.pool().close().await;

    let store = SqliteStore::open(db_path(&dir)).await.unwrap();
    assert_eq!(
        applied_versions(store.pool(), "durable_schema_migrations").await,
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 100, 101, 102]
    );
    let key = ObjectKey::new("Counter", "a");
    assert_eq!(
        store.load(&key).await.unwrap().object(),
        Some(StoredObject {
            state: b"{\"n\":41}".to_vec(),
            version: 7
        })
    );
    let alarms = store.list_alarms(&key).await.unwrap();
    assert_eq!(alarms.len(), 1);
    assert_eq!(
        (
            alarms[0].name.as_str(),
            alarms[0].due_at,
            alarms[0].attempts,
            alarms[0].dead,
            alarms[0].last_error.as_deref()
        ),
        ("tick", at(0), 2, false, None)
    );
    // The upgraded store works as a new one.
    let claimed = store
        .claim_due_alarms(at(1), at(1), at(60_000), 10)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert!(
        store
            .fail_alarm(&key, "tick", at(1), 3, "boom", None)
            .await
            .unwrap()
    );
    assert!(store.list_alarms(&key).await.unwrap()[0].dead);
    let indexes: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'durable_alarms'",
    )
    .fetch_all(store.pool())
    .await
    .unwrap();
    assert!(
        indexes.contains(&"durable_alarms_unclaimed".to_owned())
            && indexes.contains(&"durable_alarms_claimable".to_owned()),
        "{indexes:?}"
    );
    assert!(
        indexes.contains(&"durable_alarms_dead".to_owned()),
        "{indexes:?}"
    );
    // The alarm that died in the upgraded store is listed among the dead ones.
    let dead = store.list_dead_alarms(None, None, 10).await.unwrap();
    assert_eq!(dead.alarms, store.list_alarms(&key).await.unwrap());
    assert_eq!(dead.next, None);
    // The upgraded table keeps tombstones: deleted, then recreated above every old version.
    assert!(store.delete(&key).await.unwrap());
    assert_eq!(
        store.load(&key).await.unwrap(),
        Loaded::Deleted { version: 8 }
    );
    let recreate = ObjectWrite {
        key: key.clone(),
        expected_version: 8,
        state: Some(b"{}".to_vec()),
        alarms: vec![],
        kv: Vec::new(),
        idempotency: None,
        fsm: Default::default(),
    };
    store.commit(&[recreate]).await.unwrap();
    assert_eq!(store.load(&key).await.unwrap().version(), 9);
}

/// Writes a user's sqlx migration file.
fn user_migration(dir: &Path, file: &str, sql: &str) {
    std::fs::write(dir.join(file), sql).unwrap();
}

/// A user's own sqlx migrator over the same database keeps working, before and after ours.
#[tokio::test]
async fn user_sqlx_migrations_coexist() {
    let dir = tempfile::tempdir().unwrap();
    let migrations = dir.path().join("migrations");
    std::fs::create_dir(&migrations).unwrap();
    user_migration(
        &migrations,
        "0001_users.sql",
        "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT NOT NULL);",
    );
    let pool = SqlitePoolOptions::new()
        .connect_with(
            sqlx::sqlite::SqliteConnectOptions::new()
                .filename(db_path(&dir))
                .create_if_missing(true),
        )
        .await
        .unwrap();
    Migrator::new(migrations.as_path())
        .await
        .unwrap()
        .run(&pool)
        .await
        .unwrap();

    // Our store on the same pool: its migration 1 does not collide with the user's version 1.
    let store = SqliteStore::from_pool(pool.clone()).await.unwrap();
    let key = ObjectKey::new("Counter", "a");
    store.commit(&[insert(&key, "{}")]).await.unwrap();

    // The user's migrator still sees only its own history, and applies a new migration.
    user_migration(
        &migrations,
        "0002_emails.sql",
        "ALTER TABLE users ADD COLUMN email TEXT;",
    );
    let migrator = Migrator::new(migrations.as_path()).await.unwrap();
    migrator.run(&pool).await.unwrap();
    migrator.run(&pool).await.unwrap();
    assert_eq!(applied_versions(&pool, "_sqlx_migrations").await, [1, 2]);
    sqlx::query("INSERT INTO users (id, name, email) VALUES (1, 'ada', 'ada@example.com')")
        .execute(&pool)
        .await
        .unwrap();

    // And ours is unaffected.
    store.migrate().await.unwrap();
    assert_eq!(
        applied_versions(&pool, "durable_schema_migrations").await,
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 100, 101, 102]
    );
    assert_eq!(store.load(&key).await.unwrap().object().unwrap().version, 1);
}

/// Stores with different table prefixes share one file without seeing each other's data.
#[tokio::test]
async fn table_prefixes_isolate_stores() {
    let dir = tempfile::tempdir().unwrap();
    let plain = SqliteStore::open(db_path(&dir)).await.unwrap();
    let app1 = SqliteStore::builder(db_path(&dir))
        .table_prefix("app1_")
        .open()
        .await
        .unwrap();
    let app2 = SqliteStore::builder(db_path(&dir))
        .table_prefix("app2_")
        .open()
        .await
        .unwrap();
    let key = ObjectKey::new("Counter", "a");
    let write = insert_with_alarm(&key, "{\"app\":1}", "tick", at(0));
    app1.commit(&[write]).await.unwrap();
    app2.commit(&[insert(&key, "{\"app\":2}")]).await.unwrap();

    assert_eq!(
        app1.load(&key).await.unwrap().object().unwrap().state,
        b"{\"app\":1}"
    );
    assert_eq!(
        app2.load(&key).await.unwrap().object().unwrap().state,
        b"{\"app\":2}"
    );
    assert_eq!(plain.load(&key).await.unwrap().object(), None);
    assert_eq!(app2.list_alarms(&key).await.unwrap(), []);
    assert_eq!(app2.next_alarm_due().await.unwrap(), None);
    assert_eq!(app1.next_alarm_due().await.unwrap(), Some(at(0)));
    assert!(
        app2.claim_due_alarms(at(1), at(1), at(60_000), 10)
            .await
            .unwrap()
            .is_empty()
    );

    let names = tables(plain.pool()).await;
    for table in [
        "durable_objects",
        "app1_durable_objects",
        "app1_durable_alarms",
        "app1_durable_schema_migrations",
        "app1_durable_commit_guard",
        "app1_durable_fsm",
        "app1_durable_fsm_paused_queues",
        "app1_durable_fsm_rate_limits",
        "app1_durable_fsm_signals",
        "app2_durable_objects",
        "app2_durable_fsm",
    ] {
        assert!(
            names.contains(&table.to_owned()),
            "{table} missing from {names:?}"
        );
    }
    assert_eq!(
        applied_versions(plain.pool(), "app2_durable_schema_migrations").await,
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 100, 101, 102]
    );
}

#[tokio::test]
async fn invalid_table_prefixes_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    for prefix in [
        "App_",
        "a-b",
        "1a",
        "x; DROP TABLE y; --",
        "a b",
        &"a".repeat(33),
    ] {
        let err = SqliteStore::builder(db_path(&dir))
            .table_prefix(prefix)
            .open()
            .await
            .unwrap_err();
        assert!(
            matches!(&err, Error::InvalidName { what: "table prefix", value, .. } if value == prefix),
            "{prefix:?}: {err:?}"
        );
        assert!(!err.is_retryable());
    }
    assert!(!db_path(&dir).exists(), "nothing was created");
}

#[tokio::test]
async fn state_survives_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let key = ObjectKey::new("Counter", "a");
    {
        let store = SqliteStore::open(db_path(&dir)).await.unwrap();
        store.commit(&[insert(&key, "{\"n\":5}")]).await.unwrap();
        store.pool().close().await;
    }
    let store = SqliteStore::open(db_path(&dir)).await.unwrap();
    assert_eq!(
        store.load(&key).await.unwrap().object().unwrap().state,
        b"{\"n\":5}"
    );
}

#[tokio::test]
async fn locations_paths_and_urls() {
    let dir = tempfile::tempdir().unwrap();
    let nested = dir.path().join("plain.db");
    let forms = [
        nested.to_str().unwrap().to_owned(),
        format!("sqlite://{}", dir.path().join("url.db").display()),
        format!("sqlite:{}?mode=rwc", dir.path().join("query.db").display()),
    ];
    for form in &forms {
        let store = SqliteStore::open(form).await.unwrap();
        let key = ObjectKey::new("Counter", "a");
        store.commit(&[insert(&key, "{}")]).await.unwrap();
        store.pool().close().await;
        let store = SqliteStore::open(form).await.unwrap();
        assert!(store.load(&key).await.unwrap().object().is_some(), "{form}");
    }
    for file in ["plain.db", "url.db", "query.db"] {
        assert!(dir.path().join(file).exists(), "{file}");
    }

    let memory = SqliteStore::open("sqlite::memory:").await.unwrap();
    let key = ObjectKey::new("Counter", "m");
    memory.commit(&[insert(&key, "{}")]).await.unwrap();
    assert!(memory.load(&key).await.unwrap().object().is_some());
    let other_memory = SqliteStore::open(":memory:").await.unwrap();
    assert!(
        other_memory.load(&key).await.unwrap().object().is_none(),
        "private per store"
    );

    let err = SqliteStore::open("sqlite:x.db?mode=bogus")
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidLocation(_)), "{err:?}");
}

/// A connection setting, as text.
async fn pragma(pool: &SqlitePool, name: &str) -> String {
    sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT CAST((SELECT * FROM pragma_{name}) AS TEXT)"
    )))
    .fetch_one(pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn wal_and_synchronous_settings() {
    let dir = tempfile::tempdir().unwrap();
    let full = SqliteStore::open(dir.path().join("full.db")).await.unwrap();
    assert_eq!(pragma(full.pool(), "journal_mode").await, "wal");
    assert_eq!(
        pragma(full.pool(), "synchronous").await,
        "2",
        "FULL by default"
    );
    assert_eq!(pragma(full.pool(), "busy_timeout").await, "5000");

    let normal = SqliteStore::builder(dir.path().join("normal.db"))
        .synchronous(Synchronous::Normal)
        .busy_timeout(Duration::from_millis(1500))
        .open()
        .await
        .unwrap();
    assert_eq!(pragma(normal.pool(), "journal_mode").await, "wal");
    assert_eq!(pragma(normal.pool(), "synchronous").await, "1", "NORMAL");
    assert_eq!(pragma(normal.pool(), "busy_timeout").await, "1500");
}

#[tokio::test]
async fn new_databases_get_the_configured_page_size_and_existing_ones_keep_theirs() {
    let dir = tempfile::tempdir().unwrap();
    let default = SqliteStore::open(dir.path().join("default.db"))
        .await
        .unwrap();
    assert_eq!(
        pragma(default.pool(), "page_size").await,
        SqliteStoreBuilder::DEFAULT_PAGE_SIZE.to_string()
    );
    assert_eq!(SqliteStoreBuilder::DEFAULT_PAGE_SIZE, 1024);

    let path = dir.path().join("large.db");
    let key = ObjectKey::new("Counter", "a");
    {
        let large = SqliteStore::builder(&path)
            .page_size(4096)
            .open()
            .await
            .unwrap();
        assert_eq!(pragma(large.pool(), "page_size").await, "4096");
        large.commit(&[insert(&key, "{\"n\":1}")]).await.unwrap();
        large.close().await;
    }
    // Reopened with the default: the file keeps its pages, and its data.
    let reopened = SqliteStore::open(&path).await.unwrap();
    assert_eq!(pragma(reopened.pool(), "page_size").await, "4096");
    let stored = reopened
        .load(&key)
        .await
        .unwrap()
        .object()
        .expect("still stored");
    assert_eq!(stored.state, b"{\"n\":1}");

    // Converting while another connection has the file open fails and changes nothing.
    let err = SqliteStore::builder(&path)
        .convert_page_size(true)
        .open()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Open { .. }), "{err:?}");
    assert_eq!(pragma(reopened.pool(), "page_size").await, "4096");
    reopened.close().await;

    // Converted when asked, with everything it held, back in WAL mode.
    let converted = SqliteStore::builder(&path)
        .convert_page_size(true)
        .open()
        .await
        .unwrap();
    assert_eq!(pragma(converted.pool(), "page_size").await, "1024");
    assert_eq!(pragma(converted.pool(), "journal_mode").await, "wal");
    let stored = converted.load(&key).await.unwrap().object().expect("kept");
    assert_eq!(stored.state, b"{\"n\":1}");
    assert_eq!(stored.version, 1);
    converted.close().await;
    // Opening again with the same settings has nothing to convert.
    let again = SqliteStore::builder(&path)
        .convert_page_size(true)
        .open()
        .await
        .unwrap();
    assert_eq!(pragma(again.pool(), "page_size").await, "1024");
}

#[tokio::test]
async fn page_cache_and_memory_map_are_set_on_every_connection() {
    let dir = tempfile::tempdir().unwrap();
    let default = SqliteStore::open(dir.path().join("default.db"))
        .await
        .unwrap();
    let kib = SqliteStoreBuilder::DEFAULT_CACHE_SIZE / 1024;
    assert_eq!(
        pragma(default.pool(), "cache_size").await,
        format!("-{kib}")
    );
    let mmap: i64 = sqlx::query_scalar("PRAGMA mmap_size")
        .fetch_one(default.pool())
        .await
        .unwrap();
    assert_eq!(mmap as u64, SqliteStoreBuilder::DEFAULT_MMAP_SIZE);
    assert_eq!(SqliteStoreBuilder::DEFAULT_CACHE_SIZE, 64 << 20);

    let custom = SqliteStore::builder(dir.path().join("custom.db"))
        .cache_size(8 << 20)
        .mmap_size(0)
        .max_connections(3)
        .open()
        .await
        .unwrap();
    // Three connections held at once: each has the settings.
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut conn = custom.pool().acquire().await.unwrap();
        let cache: i64 = sqlx::query_scalar("PRAGMA cache_size")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        let mmap: i64 = sqlx::query_scalar("PRAGMA mmap_size")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        assert_eq!((cache, mmap), (-8192, 0));
        held.push(conn);
    }
}

/// The WAL size, in pages, at which a connection of `pool` checkpoints.
async fn autocheckpoint(pool: &SqlitePool) -> i64 {
    sqlx::query_scalar("PRAGMA wal_autocheckpoint")
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Frames in the WAL right now (a passive checkpoint reports them; it copies what it can but
/// does not restart the WAL).
async fn wal_frames(pool: &SqlitePool) -> i64 {
    let (_busy, frames, _copied): (i64, i64, i64) =
        sqlx::query_as("PRAGMA wal_checkpoint(PASSIVE)")
            .fetch_one(pool)
            .await
            .unwrap();
    frames
}

#[tokio::test]
async fn without_the_background_checkpointer_commits_checkpoint_at_the_configured_size() {
    let dir = tempfile::tempdir().unwrap();
    let inline = SqliteStore::builder(dir.path().join("default.db"))
        .background_checkpoints(false)
        .open()
        .await
        .unwrap();
    assert_eq!(
        autocheckpoint(inline.pool()).await,
        i64::from(SqliteStoreBuilder::DEFAULT_WAL_AUTOCHECKPOINT)
    );
    assert_eq!(SqliteStoreBuilder::DEFAULT_WAL_AUTOCHECKPOINT, 4096);

    // 200 commits of one new object each, on a store that checkpoints every 16 pages and on one
    // that never does: the first WAL stays short, the second holds every commit.
    let mut frames = Vec::new();
    for (name, pages) in [("short.db", 16), ("unbounded.db", 0)] {
        let store = SqliteStore::builder(dir.path().join(name))
            .background_checkpoints(false)
            .wal_autocheckpoint(pages)
            .open()
            .await
            .unwrap();
        assert_eq!(autocheckpoint(store.pool()).await, i64::from(pages));
        for i in 0..200 {
            let key = ObjectKey::new("Counter", format!("c{i}"));
            store.commit(&[insert(&key, "{\"n\":1}")]).await.unwrap();
        }
        frames.push(wal_frames(store.pool()).await);
        // Every commit is readable either way.
        let key = ObjectKey::new("Counter", "c199");
        assert!(store.load(&key).await.unwrap().object().is_some());
    }
    let [short, unbounded] = frames[..] else {
        unreachable!("two stores")
    };
    assert!(short < 64, "checkpointed every 16 pages: {short} frames");
    assert!(unbounded >= 200, "never checkpointed: {unbounded} frames");
}

/// The length of the WAL file of the database at `path` (0 if there is none).
fn wal_len(path: &Path) -> u64 {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    std::fs::metadata(wal).map_or(0, |meta| meta.len())
}

/// The WAL frames of the database at `path` not yet copied into it, read from the header of
/// its shared-memory index (the last frame written, at byte 16; the last copied, at byte 96);
/// `None` while there is no index.
fn wal_pending(path: &Path) -> Option<u32> {
    let mut shm = path.as_os_str().to_owned();
    shm.push("-shm");
    let header = std::fs::read(shm).ok()?;
    let u32_at = |at: usize| Some(u32::from_ne_bytes(header.get(at..at + 4)?.try_into().ok()?));
    Some(u32_at(16)? - u32_at(96)?)
}

/// How many files of the database at `path` (itself, its WAL, its shared-memory index) this
/// process has open.
fn open_files(path: &Path) -> usize {
    let path = path.canonicalize().expect("the database exists");
    std::fs::read_dir("/proc/self/fd")
        .expect("the process's open files are listed in /proc")
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter(|target| {
            target
                .as_os_str()
                .as_encoded_bytes()
                .starts_with(path.as_os_str().as_encoded_bytes())
        })
        .count()
}

/// Waits, within a deadline that fails the test, until `done` holds.
async fn eventually(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !done().await {
        assert!(std::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_background_checkpointer_keeps_the_wal_bounded_under_sustained_writes() {
    const LIMIT: u64 = 1 << 20;
    let dir = tempfile::tempdir().unwrap();
    let path = db_path(&dir);
    let store = SqliteStore::builder(&path)
        .wal_autocheckpoint(64)
        .wal_size_limit(LIMIT)
        .open()
        .await
        .unwrap();
    // No commit checkpoints: only the checkpointer can.
    assert_eq!(autocheckpoint(store.pool()).await, 0);

    // 1,500 commits of an 8 KiB state each, over 300 objects: ~18 MiB of pages through the WAL.
    let state = format!("{{\"pad\":\"{}\"}}", "x".repeat(8 << 10));
    let mut versions = vec![0u64; 300];
    let mut largest = 0;
    for i in 0..1_500 {
        let slot = i % versions.len();
        let key = ObjectKey::new("Counter", format!("c{slot}"));
        let mut write = insert(&key, &state);
        write.expected_version = versions[slot];
        store.commit(&[write]).await.unwrap();
        versions[slot] += 1;
        largest = largest.max(wal_len(&path));
    }
    assert!(
        largest < 8 << 20,
        "the WAL was checkpointed while commits went on: at most {largest} bytes"
    );
    // Once the checkpointer has caught up, the next commit starts the WAL over, truncated to
    // the limit.
    let key = ObjectKey::new("Counter", "last");
    let mut version = 0;
    eventually("the WAL back within its limit", async || {
        let mut write = insert(&key, "{}");
        write.expected_version = version;
        store.commit(&[write]).await.unwrap();
        version += 1;
        wal_len(&path) <= LIMIT
    })
    .await;

    // Everything survives reopening.
    store.close().await;
    let reopened = SqliteStore::open(&path).await.unwrap();
    for (slot, &version) in versions.iter().enumerate() {
        let key = ObjectKey::new("Counter", format!("c{slot}"));
        let stored = reopened.load(&key).await.unwrap().object().expect("stored");
        assert_eq!(stored.version, version);
        assert_eq!(stored.state, state.as_bytes());
    }
}

/// Commits `commits` states of `state` over `objects` objects of `store`, from `prefix`, one at a
/// time; returns the largest WAL file seen after a commit and the objects' versions.
async fn commit_states(
    store: &SqliteStore,
    path: &Path,
    prefix: &str,
    objects: usize,
    commits: usize,
    state: &str,
) -> (u64, Vec<u64>) {
    let mut versions = vec![0u64; objects];
    let mut largest = 0;
    for i in 0..commits {
        let slot = i % objects;
        let key = ObjectKey::new("Counter", format!("{prefix}{slot}"));
        let mut write = insert(&key, state);
        write.expected_version = versions[slot];
        store.commit(&[write]).await.unwrap();
        versions[slot] += 1;
        largest = largest.max(wal_len(path));
    }
    (largest, versions)
}

/// Under commits that never pause, each background checkpoint catches up with the pages
/// committed while it ran, so that the WAL starts over from its beginning: it stays a few
/// checkpoint thresholds long, far below its size limit, instead of growing to the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_starts_over_after_each_background_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let path = db_path(&dir);
    // 128 pages of 1 KiB; the default 64 MiB limit is never the reason the WAL starts over.
    let store = SqliteStore::builder(&path)
        .wal_autocheckpoint(128)
        .open()
        .await
        .unwrap();
    // 2,400 commits of an 8 KiB state (nine pages each): about 21 MiB through the WAL.
    let state = format!("{{\"pad\":\"{}\"}}", "y".repeat(8 << 10));
    let (largest, versions) = commit_states(&store, &path, "c", 100, 2_400, &state).await;
    // Started over once four thresholds long (512 KiB), with the commits made meanwhile.
    assert!(
        largest < 2 << 20,
        "the WAL started over while commits went on: at most {largest} bytes"
    );
    store.close().await;
    let reopened = SqliteStore::open(&path).await.unwrap();
    for (slot, &version) in versions.iter().enumerate() {
        let key = ObjectKey::new("Counter", format!("c{slot}"));
        let stored = reopened.load(&key).await.unwrap().object().expect("stored");
        assert_eq!(
            (stored.version, stored.state.as_slice()),
            (version, state.as_bytes())
        );
    }
}

/// Two stores on one database, each with its checkpointer, committing at once: a checkpointer
/// holds back only its own store's commits while it catches up, the other's go on, and every
/// commit of both is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_checkpointing_one_database_keep_every_commit() {
    const LIMIT: u64 = 4 << 20;
    let dir = tempfile::tempdir().unwrap();
    let path = db_path(&dir);
    let open = || {
        SqliteStore::builder(&path)
            .wal_autocheckpoint(128)
            .wal_size_limit(LIMIT)
            .open()
    };
    let (first, second) = (open().await.unwrap(), open().await.unwrap());
    let state = format!("{{\"pad\":\"{}\"}}", "z".repeat(4 << 10));
    let (a, b) = tokio::join!(
        commit_states(&first, &path, "a", 50, 400, &state),
        commit_states(&second, &path, "b", 50, 400, &state),
    );
    // Bounded by the restarting checkpoint at the limit even when the two never leave the WAL
    // fully copied.
    assert!(a.0.max(b.0) < 4 * LIMIT, "WAL of {} bytes", a.0.max(b.0));
    first.close().await;
    second.close().await;
    let reopened = SqliteStore::open(&path).await.unwrap();
    for (prefix, versions) in [("a", a.1), ("b", b.1)] {
        for (slot, &version) in versions.iter().enumerate() {
            let key = ObjectKey::new("Counter", format!("{prefix}{slot}"));
            let stored = reopened.load(&key).await.unwrap().object().expect("stored");
            assert_eq!(stored.version, version);
        }
    }
}

#[tokio::test]
async fn the_checkpointer_stops_when_the_store_is_closed_or_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let key = ObjectKey::new("Counter", "a");
    // Closed: once `close` returns, nothing of the store has the database open, so the last
    // connection removed the WAL; the store refuses work.
    let closed = dir.path().join("closed.db");
    let store = SqliteStore::open(&closed).await.unwrap();
    let clone = store.clone();
    store.commit(&[insert(&key, "{}")]).await.unwrap();
    assert!(wal_len(&closed) > 0);
    store.close().await;
    assert!(!Path::new(&format!("{}-wal", closed.display())).exists());
    let mut write = insert(&key, "{}");
    write.expected_version = 1;
    assert!(clone.commit(&[write]).await.is_err());
    assert!(clone.load(&key).await.is_err());

    // Dropped: the last clone gone, the checkpointer closes its connection too. The connections
    // close together, each on its own thread, so the one SQLite lets remove the WAL may not be
    // last: what is checked is that no file of the database stays open in this process.
    let dropped = dir.path().join("dropped.db");
    let store = SqliteStore::builder(&dropped)
        .wal_autocheckpoint(8)
        .open()
        .await
        .unwrap();
    store.commit(&[insert(&key, "{}")]).await.unwrap();
    let clone = store.clone();
    drop(store);
    // A clone keeps the store, and its checkpointer, running: it checkpoints the WAL on its own
    // connection once 8 pages are waiting (each commit adds at least one), and a look after a
    // commit finds nothing left to copy.
    let mut others = 0;
    eventually("the checkpointer copied the WAL", async || {
        others += 1;
        let other = ObjectKey::new("Counter", format!("other{others}"));
        clone.commit(&[insert(&other, "{}")]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(30)).await;
        wal_pending(&dropped) == Some(0)
    })
    .await;
    assert!(open_files(&dropped) >= 3, "the store has the database open");
    let mut write = insert(&key, "{\"n\":2}");
    write.expected_version = 1;
    clone.commit(&[write]).await.unwrap();
    drop(clone);
    eventually("every connection closed", async || {
        open_files(&dropped) == 0
    })
    .await;
    let reopened = SqliteStore::open(&dropped).await.unwrap();
    let stored = reopened.load(&key).await.unwrap().object().expect("stored");
    assert_eq!(stored.state, b"{\"n\":2}");
}

#[tokio::test]
async fn invalid_page_sizes_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    for size in [0, 256, 1000, 3072, 131_072] {
        let err = SqliteStore::builder(db_path(&dir))
            .page_size(size)
            .open()
            .await
            .unwrap_err();
        assert!(
            matches!(err, Error::InvalidPageSize(value) if value == size),
            "{size}: {err:?}"
        );
        assert!(!err.is_retryable());
    }
    assert!(!db_path(&dir).exists(), "nothing was created");
}

/// The tables stay readable with plain SQL: JSON state, integer microsecond times.
#[tokio::test]
async fn tables_are_inspectable() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(db_path(&dir)).await.unwrap();
    let key = ObjectKey::new("Counter", "a");
    let write = insert_with_alarm(&key, "{\"count\":3,\"nul\":\"a\\u0000b\"}", "tick", at(0));
    store.commit(&[write]).await.unwrap();
    let (count, version): (i64, i64) = sqlx::query_as(
        "SELECT json_extract(state, '$.count'), version FROM durable_objects WHERE object_id = 'a'",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!((count, version), (3, 1));
    let (due, date): (i64, String) = sqlx::query_as(
        "SELECT due_at, strftime('%Y-%m-%d %H:%M:%f', due_at / 1000000.0, 'unixepoch') FROM durable_alarms",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(due, 1_700_000_000_123_457);
    assert_eq!(date, "2023-11-14 22:13:20.123");
}

#[tokio::test]
async fn states_that_are_not_text_are_rejected() {
    let store = SqliteStore::open("sqlite::memory:").await.unwrap();
    let key = ObjectKey::new("Counter", "a");
    for state in [b"\xff\xfe".to_vec(), b"{\"a\":\"\0\"}".to_vec()] {
        let write = ObjectWrite {
            key: key.clone(),
            expected_version: 0,
            state: Some(state),
            alarms: vec![],
            kv: Vec::new(),
            idempotency: None,
            fsm: Default::default(),
        };
        match store.commit(&[write]).await {
            Err(CommitError::Storage(err)) => {
                assert_eq!(err.kind(), StorageErrorKind::Rejected);
                assert!(!err.is_retryable());
            }
            other => panic!("expected a rejection, got {other:?}"),
        }
    }
    assert_eq!(store.load(&key).await.unwrap().object(), None);
}

/// A writer that holds the database lock longer than the busy timeout makes commits fail with
/// a retryable error; they succeed once the lock is released.
#[tokio::test]
async fn a_locked_database_is_retryable() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::builder(db_path(&dir))
        .busy_timeout(Duration::from_millis(100))
        .open()
        .await
        .unwrap();
    let other = SqlitePool::connect(&format!("sqlite://{}", db_path(&dir).display()))
        .await
        .unwrap();
    let mut lock = other.begin_with("BEGIN IMMEDIATE").await.unwrap();
    sqlx::query("INSERT INTO durable_objects (object_type, object_id, state, version, created_at, updated_at) VALUES ('Other', 'x', '{}', 1, 0, 0)")
        .execute(&mut *lock)
        .await
        .unwrap();

    let key = ObjectKey::new("Counter", "a");
    match store.commit(&[insert(&key, "{}")]).await {
        Err(CommitError::Storage(err)) => assert!(err.is_retryable(), "{err}"),
        other => panic!("expected a busy error, got {other:?}"),
    }
    lock.rollback().await.unwrap();
    store.commit(&[insert(&key, "{}")]).await.unwrap();
    assert_eq!(store.load(&key).await.unwrap().object().unwrap().version, 1);
}

/// Two stores over one file (two processes): no lost update, no double claim.
#[tokio::test]
async fn two_stores_on_one_file() {
    let dir = tempfile::tempdir().unwrap();
    let stores = [
        SqliteStore::open(db_path(&dir)).await.unwrap(),
        SqliteStore::open(db_path(&dir)).await.unwrap(),
    ];
    storage_shared::increments_across_stores(&stores).await;
    storage_shared::claims_across_stores(&stores).await;
}

#[tokio::test]
async fn a_commit_abandoned_mid_transaction_leaves_no_transaction_open() {
    let dir = tempfile::tempdir().unwrap();
    let path = db_path(&dir);
    let store = SqliteStore::open(&path).await.unwrap();
    let key = ObjectKey::new("Counter", "a");
    store.commit(&[insert(&key, "{\"n\":1}")]).await.unwrap();

    // Another process holds the write lock, so the commit's `BEGIN IMMEDIATE` waits for it;
    // the commit's caller gives up meanwhile.
    let mut other = hold_the_write_lock(&path, Duration::from_secs(5)).await;
    let update = ObjectWrite {
        key: key.clone(),
        expected_version: 1,
        state: Some(b"{\"n\":2}".to_vec()),
        alarms: vec![],
        kv: Vec::new(),
        idempotency: None,
        fsm: Default::default(),
    };
    let abandoned = tokio::time::timeout(
        Duration::from_millis(100),
        store.commit(std::slice::from_ref(&update)),
    )
    .await;
    assert!(abandoned.is_err(), "the commit waited for the lock");
    sqlx::raw_sql("ROLLBACK").execute(&mut other).await.unwrap();

    // The store holds no transaction: another connection can write (within its 5 s busy
    // timeout, while the abandoned commit finishes), and so can the store.
    sqlx::raw_sql("BEGIN IMMEDIATE; ROLLBACK")
        .execute(&mut other)
        .await
        .expect("the write lock is free");
    store.commit(std::slice::from_ref(&update)).await.unwrap();
    assert_eq!(store.load(&key).await.unwrap().object().unwrap().version, 2);
}

/// A store and its object `Counter/a`, stored with one alarm due at `at(10)`.
async fn store_with_a_due_alarm(path: &Path, busy_timeout: Duration) -> (SqliteStore, ObjectKey) {
    let store = SqliteStore::builder(path)
        .busy_timeout(busy_timeout)
        .open()
        .await
        .unwrap();
    let key = ObjectKey::new("Counter", "a");
    store
        .commit(&[insert_with_alarm(&key, "{}", "ring", at(10))])
        .await
        .unwrap();
    (store, key)
}

/// A claim sends `BEGIN IMMEDIATE`, its update and `COMMIT` in one round trip: when another
/// process holds the write lock past the busy timeout it fails with a retryable error, claims
/// nothing, and leaves the writer usable, so the next claim takes the alarm once.
#[tokio::test]
async fn a_claim_meeting_a_locked_database_fails_retryably_and_claims_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (store, key) = store_with_a_due_alarm(&db_path(&dir), Duration::from_millis(100)).await;
    let mut other = hold_the_write_lock(&db_path(&dir), Duration::ZERO).await;
    match store.claim_due_alarms(at(20), at(20), at(30), 10).await {
        Err(err) => assert!(err.is_retryable(), "{err}"),
        Ok(claimed) => panic!("claimed {claimed:?} under another process's write lock"),
    }
    sqlx::raw_sql("ROLLBACK").execute(&mut other).await.unwrap();
    let alarms = store.list_alarms(&key).await.unwrap();
    assert_eq!(alarms[0].claimed_at, None, "the failed claim left no trace");
    let claimed = store
        .claim_due_alarms(at(20), at(20), at(30), 10)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(claimed[0].claimed_at, Some(at(20)));
    let again = store
        .claim_due_alarms(at(21), at(21), at(31), 10)
        .await
        .unwrap();
    assert!(again.is_empty(), "claimed twice: {again:?}");
}

/// A claim whose caller gives up while it waits for the write lock leaves no transaction open
/// on the store's writer: other processes and the store itself write afterwards.
#[tokio::test]
async fn a_claim_abandoned_mid_transaction_leaves_no_transaction_open() {
    let dir = tempfile::tempdir().unwrap();
    let (store, key) = store_with_a_due_alarm(&db_path(&dir), Duration::from_secs(5)).await;
    let mut other = hold_the_write_lock(&db_path(&dir), Duration::from_secs(5)).await;
    let abandoned = tokio::time::timeout(
        Duration::from_millis(100),
        store.claim_due_alarms(at(20), at(20), at(30), 10),
    )
    .await;
    assert!(abandoned.is_err(), "the claim waited for the lock");
    sqlx::raw_sql("ROLLBACK").execute(&mut other).await.unwrap();
    sqlx::raw_sql("BEGIN IMMEDIATE; ROLLBACK")
        .execute(&mut other)
        .await
        .expect("the write lock is free");
    let claimed = store
        .claim_due_alarms(at(20), at(20), at(30), 10)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1, "the abandoned claim took nothing");
    store
        .commit(&[insert(&ObjectKey::new("Counter", "b"), "{}")])
        .await
        .unwrap();
    assert_eq!(
        store.list_alarms(&key).await.unwrap()[0].claimed_at,
        Some(at(20))
    );
}

#[tokio::test]
async fn an_unreadable_claimed_alarm_does_not_hold_back_the_others() {
    let fx = fixture().await;
    let pool = fx.store.pool().clone();
    storage_shared::unreadable_claimed_rows_are_skipped(&fx.store, || async move {
        sqlx::query("UPDATE durable_alarms SET attempts = -1 WHERE object_id = 'bad'")
            .execute(&pool)
            .await
            .unwrap();
    })
    .await;
}

/// An in-memory database is one shared cache for the writer and the reading connection, where
/// SQLite locks whole tables: a read meeting a write in flight waits for it to end (SQLite's
/// unlock notification) instead of failing with "database table is locked".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_memory_reads_wait_for_writes_in_flight() {
    let store = std::sync::Arc::new(SqliteStore::open("sqlite::memory:").await.unwrap());
    let writes = 300;
    let writer = tokio::spawn({
        let store = store.clone();
        async move {
            for i in 0..writes {
                let key = ObjectKey::new("Counter", format!("w{i}"));
                store
                    .commit(&[insert(&key, &format!("{{\"n\":{i}}}"))])
                    .await
                    .unwrap();
            }
        }
    });
    let mut reads = 0;
    while !writer.is_finished() {
        for i in (0..writes).step_by(37) {
            let key = ObjectKey::new("Counter", format!("w{i}"));
            store.load(&key).await.expect("a read beside writes");
            reads += 1;
        }
    }
    writer.await.unwrap();
    assert!(reads > 0);
    for i in 0..writes {
        let key = ObjectKey::new("Counter", format!("w{i}"));
        assert!(store.load(&key).await.unwrap().object().is_some(), "w{i}");
    }
}
