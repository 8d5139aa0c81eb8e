//! The storage conformance suite on `PostgresStore`, and Postgres-specific storage tests:
//! migrations, upgrades, schemas and prefixes, coexistence with a user's sqlx migrations,
//! connection loss.
//!
//! The server is found through `DATABASE_URL`. Without it every test prints
//! "skipped: DATABASE_URL not set" and passes, unless `CI` is set: then it fails. Each test
//! works in its own schema, dropped when the test ends (also when it fails), so tests run in
//! parallel.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use durable_runtime::conformance::Fixture;
use durable_runtime::storage::{
    AlarmChange, CommitError, Loaded, ObjectKey, ObjectWrite, Storage, StorageErrorKind,
    StoredObject,
};
use durable_sqlx::sqlx::migrate::Migrator;
use durable_sqlx::sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use durable_sqlx::sqlx::{self, AssertSqlSafe, Connection, PgConnection, PgPool};
use durable_sqlx::{Error, PostgresStore};
use durable_tests::SchemaGuard;

use crate::storage_shared;
use storage_shared::at;

/// The database URL, or `None` (after saying so) when the tests should be skipped.
fn database_url() -> Option<String> {
    match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var_os("CI").is_none(),
                "DATABASE_URL must be set when CI is set: the Postgres tests cannot be skipped"
            );
            eprintln!("skipped: DATABASE_URL not set");
            None
        }
    }
}

/// A store in a schema of its own.
struct PgFixture {
    store: PostgresStore,
    guard: SchemaGuard,
}

impl Fixture for PgFixture {
    type Store = PostgresStore;

    fn store(&self) -> &PostgresStore {
        &self.store
    }
}

async fn fixture(test: &str) -> Option<PgFixture> {
    let url = database_url()?;
    let guard = SchemaGuard::new(&url, test).await;
    let store = PostgresStore::builder(&url)
        .schema(&guard.name)
        .max_connections(5)
        .connect()
        .await
        .expect("connect to Postgres");
    Some(PgFixture { store, guard })
}

durable_runtime::conformance_tests!(|case: &'static str| fixture(case));

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

/// [`insert`] with the alarm `tick` due at `at(0)`.
fn insert_with_tick(key: &ObjectKey, state: &str) -> ObjectWrite {
    let mut write = insert(key, state);
    write.alarms.push(AlarmChange::Set {
        name: "tick".into(),
        due_at: at(0),
        payload: None,
    });
    write
}

async fn applied_versions(pool: &PgPool, table: &str) -> Vec<i64> {
    sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT version FROM {table} ORDER BY version"
    )))
    .fetch_all(pool)
    .await
    .unwrap()
}

async fn tables_in(pool: &PgPool, schema: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables WHERE table_schema = $1
         ORDER BY table_name",
    )
    .bind(schema)
    .fetch_all(pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn migrations_applied_twice_are_a_no_op() {
    let Some(fx) = fixture("migrate_twice").await else {
        return;
    };
    let migrations = format!("{}.durable_schema_migrations", fx.guard.name);
    let key = ObjectKey::new("Counter", "a");
    fx.store.commit(&[insert(&key, "{\"n\":1}")]).await.unwrap();
    assert_eq!(
        applied_versions(fx.store.pool(), &migrations).await,
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 13, 100, 101, 102]
    );
    fx.store.migrate().await.unwrap();
    fx.store.migrate().await.unwrap();
    let again = PostgresStore::builder(&fx.guard.url)
        .schema(&fx.guard.name)
        .connect()
        .await
        .unwrap();
    assert_eq!(
        applied_versions(again.pool(), &migrations).await,
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 13, 100, 101, 102]
    );
    assert_eq!(
        again.load(&key).await.unwrap().object(),
        Some(StoredObject {
            state: b"{\"n\":1}".to_vec(),
            version: 1
        })
    );
    assert_eq!(
        tables_in(fx.store.pool(), &fx.guard.name).await,
        [
            "durable_alarms",
            "durable_cluster",
            "durable_fsm",
            "durable_fsm_paused_queues",
            "durable_fsm_rate_limits",
            "durable_fsm_signals",
            "durable_idempotency",
            "durable_kv",
            "durable_nodes",
            "durable_objects",
            "durable_schema_migrations",
            "durable_shards"
        ]
    );
}

#[tokio::test]
async fn concurrent_connects_migrate_once() {
    let Some(url) = database_url() else {
        return;
    };
    let guard = SchemaGuard::new(&url, "concurrent_connects").await;
    let connects = (0..4).map(|_| {
        PostgresStore::builder(&url)
            .schema(&guard.name)
            .max_connections(2)
            .connect()
    });
    let stores: Vec<PostgresStore> = futures_util::future::join_all(connects)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        applied_versions(
            stores[0].pool(),
            &format!("{}.durable_schema_migrations", guard.name)
        )
        .await,
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 13, 100, 101, 102]
    );
}

#[tokio::test]
async fn concurrent_connects_with_other_prefixes_share_a_new_schema() {
    let Some(url) = database_url() else {
        return;
    };
    for round in 0..3 {
        let guard = SchemaGuard::new(&url, &format!("shared_schema_{round}")).await;
        let connects = (0..4).map(|i| {
            PostgresStore::builder(&url)
                .schema(&guard.name)
                .table_prefix(format!("app{i}_"))
                .max_connections(2)
                .connect()
        });
        for connected in futures_util::future::join_all(connects).await {
            connected.expect("every store connects");
        }
    }
}

/// A database created by the first migration only, with data in it, is upgraded in place.
#[tokio::test]
async fn upgrade_from_first_migration_keeps_data() {
    let Some(url) = database_url() else {
        return;
    };
    let guard = SchemaGuard::new(&url, "upgrade").await;
    let schema = &guard.name;
    let old = PostgresStore::builder(&url)
        .schema(schema)
        .migrate_on_open(false)
        .connect()
        .await
        .unwrap();
    old.migrate_to(1).await.unwrap();
    let migrations = format!("{schema}.durable_schema_migrations");
    assert_eq!(applied_versions(old.pool(), &migrations).await, [1]);
    sqlx::raw_sql(AssertSqlSafe(format!(
        "INSERT INTO {schema}.durable_objects (object_type, object_id, state, version)
             VALUES ('Counter', 'a', '{{\"n\":41}}', 7);
         INSERT INTO {schema}.durable_alarms (object_type, object_id, name, due_at, attempts)
             VALUES ('Counter', 'a', 'tick', '2023-11-14 22:13:20.123457+00', 2);"
    )))
    .execute(old.pool())
    .await
    .unwrap();
    old.pool().close().await;

    let store = PostgresStore::builder(&url)
        .schema(schema)
        .connect()
        .await
        .unwrap();
    assert_eq!(
        applied_versions(store.pool(), &migrations).await,
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 13, 100, 101, 102]
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
    assert_eq!(
        store
            .claim_due_alarms(at(1), at(1), at(60_000), 10)
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(
        store
            .fail_alarm(&key, "tick", at(1), 3, "boom", None)
            .await
            .unwrap()
    );
    assert!(store.list_alarms(&key).await.unwrap()[0].dead);
    let indexes: Vec<String> = sqlx::query_scalar(
        "SELECT indexname::text FROM pg_indexes WHERE schemaname = $1 AND tablename = 'durable_alarms'",
    )
    .bind(schema)
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

fn user_migration(dir: &Path, file: &str, sql: &str) {
    std::fs::write(dir.join(file), sql).unwrap();
}

/// A user's own sqlx migrator over the same database (and the same schema) keeps working,
/// before and after ours.
#[tokio::test]
async fn user_sqlx_migrations_coexist() {
    let Some(url) = database_url() else {
        return;
    };
    let guard = SchemaGuard::new(&url, "user_migrations").await;
    let schema = &guard.name;
    let mut admin = PgConnection::connect(&url).await.unwrap();
    sqlx::raw_sql(AssertSqlSafe(format!("CREATE SCHEMA {schema}")))
        .execute(&mut admin)
        .await
        .unwrap();
    // The user's pool works in the test's schema: their tables, sqlx's `_sqlx_migrations` and
    // (without a schema option) ours all land there.
    let options = PgConnectOptions::from_str(&url)
        .unwrap()
        .options([("search_path", schema.as_str())]);
    let pool = PgPoolOptions::new()
        .max_connections(3)
        .connect_with(options)
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    user_migration(
        dir.path(),
        "0001_users.sql",
        "CREATE TABLE users (id BIGINT PRIMARY KEY, name TEXT NOT NULL);",
    );
    Migrator::new(dir.path())
        .await
        .unwrap()
        .run(&pool)
        .await
        .unwrap();

    let store = PostgresStore::from_pool(pool.clone()).await.unwrap();
    let key = ObjectKey::new("Counter", "a");
    store.commit(&[insert(&key, "{}")]).await.unwrap();

    user_migration(
        dir.path(),
        "0002_emails.sql",
        "ALTER TABLE users ADD COLUMN email TEXT;",
    );
    let migrator = Migrator::new(dir.path()).await.unwrap();
    migrator.run(&pool).await.unwrap();
    migrator.run(&pool).await.unwrap();
    assert_eq!(
        applied_versions(&pool, &format!("{schema}._sqlx_migrations")).await,
        [1, 2]
    );
    store.migrate().await.unwrap();
    assert_eq!(
        applied_versions(&pool, &format!("{schema}.durable_schema_migrations")).await,
        [1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 13, 100, 101, 102]
    );
    assert_eq!(store.load(&key).await.unwrap().object().unwrap().version, 1);
    assert_eq!(
        tables_in(&pool, schema).await,
        [
            "_sqlx_migrations",
            "durable_alarms",
            "durable_cluster",
            "durable_fsm",
            "durable_fsm_paused_queues",
            "durable_fsm_rate_limits",
            "durable_fsm_signals",
            "durable_idempotency",
            "durable_kv",
            "durable_nodes",
            "durable_objects",
            "durable_schema_migrations",
            "durable_shards",
            "users"
        ]
    );
    admin.close().await.ok();
}

/// A backend test that panics, even inside a transaction holding locks on its tables, leaves
/// no schema behind.
#[tokio::test]
async fn a_failing_backend_test_leaves_no_schema_behind() {
    let Some(url) = database_url() else { return };
    // The schema of this backend, by its name: the other tests of the process (every module of
    // the test binary, under `cargo test`) create schemas of their own meanwhile.
    let exists = |url: String, schema: String| async move {
        let mut conn = PgConnection::connect(&url).await.unwrap();
        let found: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
                .bind(schema)
                .fetch_one(&mut conn)
                .await
                .unwrap();
        found
    };
    let (named, name) = std::sync::mpsc::channel();
    let test_url = url.clone();
    let failed = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let backend = durable_tests::postgres().await.unwrap();
            let schema = backend.postgres_schema().expect("a schema").to_owned();
            named.send(schema.clone()).unwrap();
            assert!(exists(test_url.clone(), schema.clone()).await, "{schema}");
            let write = insert(&ObjectKey::new("T", "a"), "{}");
            backend.store.commit(&[write]).await.unwrap();
            let mut conn = PgConnection::connect(&test_url).await.unwrap();
            let mut tx = conn.begin().await.unwrap();
            sqlx::raw_sql(AssertSqlSafe(format!(
                "LOCK TABLE {schema}.durable_objects"
            )))
            .execute(&mut *tx)
            .await
            .unwrap();
            panic!("a failing test in {schema}");
        })
    })
    .join();
    assert!(failed.is_err(), "the test body panicked");
    let schema = name.recv().expect("the backend's schema");
    assert!(!exists(url, schema.clone()).await, "{schema} left behind");
}

/// Stores in different schemas, or with different table prefixes, share one database without
/// seeing each other's data.
#[tokio::test]
async fn schemas_and_prefixes_isolate_stores() {
    let Some(url) = database_url() else {
        return;
    };
    let a = SchemaGuard::new(&url, "iso_a").await;
    let b = SchemaGuard::new(&url, "iso_b").await;
    let store_a = PostgresStore::builder(&url)
        .schema(&a.name)
        .max_connections(2)
        .connect()
        .await
        .unwrap();
    let store_b = PostgresStore::builder(&url)
        .schema(&b.name)
        .max_connections(2)
        .connect()
        .await
        .unwrap();
    let store_b2 = PostgresStore::builder(&url)
        .schema(&b.name)
        .table_prefix("app2_")
        .max_connections(2)
        .connect()
        .await
        .unwrap();
    let key = ObjectKey::new("Counter", "a");
    let write = insert_with_tick(&key, "{\"app\":\"a\"}");
    store_a.commit(&[write]).await.unwrap();
    store_b
        .commit(&[insert(&key, "{\"app\":\"b\"}")])
        .await
        .unwrap();

    assert_eq!(
        store_a.load(&key).await.unwrap().object().unwrap().state,
        b"{\"app\":\"a\"}"
    );
    assert_eq!(
        store_b.load(&key).await.unwrap().object().unwrap().state,
        b"{\"app\":\"b\"}"
    );
    assert_eq!(store_b2.load(&key).await.unwrap().object(), None);
    assert_eq!(store_b.next_alarm_due().await.unwrap(), None);
    assert_eq!(store_a.next_alarm_due().await.unwrap(), Some(at(0)));
    assert!(
        store_b2
            .claim_due_alarms(at(1), at(1), at(60_000), 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        tables_in(store_b.pool(), &b.name).await,
        [
            "app2_durable_alarms",
            "app2_durable_cluster",
            "app2_durable_fsm",
            "app2_durable_fsm_paused_queues",
            "app2_durable_fsm_rate_limits",
            "app2_durable_fsm_signals",
            "app2_durable_idempotency",
            "app2_durable_kv",
            "app2_durable_nodes",
            "app2_durable_objects",
            "app2_durable_schema_migrations",
            "app2_durable_shards",
            "durable_alarms",
            "durable_cluster",
            "durable_fsm",
            "durable_fsm_paused_queues",
            "durable_fsm_rate_limits",
            "durable_fsm_signals",
            "durable_idempotency",
            "durable_kv",
            "durable_nodes",
            "durable_objects",
            "durable_schema_migrations",
            "durable_shards"
        ]
    );
}

#[tokio::test]
async fn invalid_names_are_rejected() {
    let Some(url) = database_url() else {
        return;
    };
    for schema in ["Bad", "a-b", "pg_mine", "x; DROP SCHEMA public; --", ""] {
        let err = PostgresStore::builder(&url)
            .schema(schema)
            .connect()
            .await
            .unwrap_err();
        assert!(
            matches!(&err, Error::InvalidName { what: "schema", .. }),
            "{schema:?}: {err:?}"
        );
    }
    let err = PostgresStore::builder(&url)
        .table_prefix("a b")
        .connect()
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            Error::InvalidName {
                what: "table prefix",
                ..
            }
        ),
        "{err:?}"
    );
    let err = PostgresStore::connect("postgres://localhost:notaport/db")
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidLocation(_)), "{err:?}");
}

/// The tables stay readable with plain SQL: `state::jsonb`, `timestamptz` times; a state
/// holding `\u0000` (which `jsonb` rejects) is stored all the same.
#[tokio::test]
async fn tables_are_inspectable() {
    let Some(fx) = fixture("inspect").await else {
        return;
    };
    let schema = &fx.guard.name;
    let key = ObjectKey::new("Counter", "a");
    let write = insert_with_tick(&key, "{\"count\":3}");
    let nul = ObjectKey::new("Counter", "nul");
    fx.store
        .commit(&[write, insert(&nul, "{\"s\":\"a\\u0000b\"}")])
        .await
        .unwrap();
    let count: String = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT state::jsonb ->> 'count' FROM {schema}.durable_objects WHERE object_id = 'a'"
    )))
    .fetch_one(fx.store.pool())
    .await
    .unwrap();
    assert_eq!(count, "3");
    let exact: bool = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT due_at = timestamptz '2023-11-14 22:13:20.123457+00' FROM {schema}.durable_alarms"
    )))
    .fetch_one(fx.store.pool())
    .await
    .unwrap();
    assert!(exact, "due_at is the exact timestamptz");
    assert_eq!(
        fx.store.load(&nul).await.unwrap().object().unwrap().state,
        b"{\"s\":\"a\\u0000b\"}"
    );
}

#[tokio::test]
async fn states_that_are_not_text_are_rejected() {
    let Some(fx) = fixture("not_text").await else {
        return;
    };
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
        match fx.store.commit(&[write]).await {
            Err(CommitError::Storage(err)) => {
                assert_eq!(err.kind(), StorageErrorKind::Rejected);
            }
            other => panic!("expected a rejection, got {other:?}"),
        }
    }
    assert_eq!(fx.store.load(&key).await.unwrap().object(), None);
}

/// Two stores (two processes) over one schema: no lost update, no double claim.
#[tokio::test]
async fn two_stores_on_one_database() {
    let Some(fx) = fixture("two_stores").await else {
        return;
    };
    let second = PostgresStore::builder(&fx.guard.url)
        .schema(&fx.guard.name)
        .max_connections(5)
        .connect()
        .await
        .unwrap();
    let stores = [fx.store.clone(), second];
    storage_shared::increments_across_stores(&stores).await;
    storage_shared::claims_across_stores(&stores).await;
}

/// Terminates every server process serving `application_name`; returns how many.
async fn terminate(admin: &mut PgConnection, application_name: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE application_name = $1 AND pid <> pg_backend_pid()) terminated",
    )
    .bind(application_name)
    .fetch_one(admin)
    .await
    .unwrap()
}

/// Connection loss mid-run: the server terminates the store's connections (idle ones, and
/// one waiting inside a commit). The commit in flight fails with a retryable storage error and
/// applies nothing; later calls succeed on new connections, without restarting anything.
#[tokio::test]
async fn connection_loss_is_retryable_and_recovers() {
    let Some(url) = database_url() else {
        return;
    };
    let guard = SchemaGuard::new(&url, "connection_loss").await;
    let schema = &guard.name;
    let app = format!("durable-test-{}", std::process::id());
    let store = PostgresStore::builder(&url)
        .schema(schema)
        .application_name(&app)
        .max_connections(3)
        .acquire_timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap();
    let mut admin = PgConnection::connect(&url).await.unwrap();
    // A second admin connection: activity statistics read inside a transaction are frozen.
    let mut monitor = PgConnection::connect(&url).await.unwrap();
    let key = ObjectKey::new("Counter", "a");
    store.commit(&[insert(&key, "{\"n\":1}")]).await.unwrap();

    // 1. Idle connections die: the pool notices and reconnects.
    assert!(terminate(&mut admin, &app).await >= 1);
    let mut attempts = 0;
    let stored = loop {
        attempts += 1;
        match store.load(&key).await {
            Ok(stored) => break stored,
            Err(err) => {
                assert!(err.is_retryable(), "not retryable: {err}");
                assert!(attempts < 5, "no recovery after {attempts} attempts: {err}");
            }
        }
    };
    assert_eq!(stored.version(), 1);
    // The connection kept for commits died too. One used within the last half second would
    // be trusted without a ping (and fail the next commit, retryably); after that it is
    // pinged, found dead and replaced before the commit below uses it.
    tokio::time::sleep(Duration::from_millis(700)).await;

    // 2. A commit waiting on a row lock loses its connection in the middle of its transaction.
    let mut blocker = admin.begin().await.unwrap();
    sqlx::query(AssertSqlSafe(format!(
        "SELECT version FROM {schema}.durable_objects WHERE object_id = 'a' FOR UPDATE"
    )))
    .execute(&mut *blocker)
    .await
    .unwrap();
    let write = ObjectWrite {
        key: key.clone(),
        expected_version: 1,
        state: Some(b"{\"n\":2}".to_vec()),
        alarms: vec![AlarmChange::Set {
            name: "tick".into(),
            due_at: at(0),
            payload: None,
        }],
        kv: Vec::new(),
        idempotency: None,
        fsm: Default::default(),
    };
    let in_flight = {
        let store = store.clone();
        let write = write.clone();
        tokio::spawn(async move { store.commit(&[write]).await })
    };
    // Wait until the commit is blocked on the lock, then cut it off.
    let mut waited = 0;
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
             WHERE application_name = $1 AND wait_event_type = 'Lock'",
        )
        .bind(&app)
        .fetch_one(&mut monitor)
        .await
        .unwrap();
        if waiting > 0 {
            break;
        }
        waited += 1;
        if waited >= 1000 || in_flight.is_finished() {
            let activity: Vec<(Option<String>, Option<String>, Option<String>)> = sqlx::query_as(
                "SELECT state, wait_event_type, query FROM pg_stat_activity WHERE application_name = $1",
            )
            .bind(&app)
            .fetch_all(&mut monitor)
            .await
            .unwrap();
            let result = if in_flight.is_finished() {
                format!("{:?}", in_flight.await.unwrap())
            } else {
                "still running".to_owned()
            };
            panic!("the commit never blocked on the row lock: {result}; activity: {activity:?}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(terminate(&mut monitor, &app).await >= 1);
    match in_flight.await.unwrap() {
        Err(CommitError::Storage(err)) => assert!(err.is_retryable(), "not retryable: {err}"),
        other => panic!("expected a retryable storage error, got {other:?}"),
    }
    blocker.rollback().await.unwrap();

    // Nothing of the cut-off commit was applied; retrying it succeeds.
    assert_eq!(store.load(&key).await.unwrap().object().unwrap().version, 1);
    assert!(store.list_alarms(&key).await.unwrap().is_empty());
    store.commit(&[write]).await.unwrap();
    assert_eq!(store.load(&key).await.unwrap().object().unwrap().version, 2);

    // 3. Repeated losses during a stream of commits: every failure is retryable, and the
    //    stream always completes.
    let worker = {
        let store = store.clone();
        let key = key.clone();
        tokio::spawn(async move {
            let mut failures = 0;
            for _ in 0..100 {
                loop {
                    let stored = match store.load(&key).await {
                        Ok(stored) => stored.object().expect("stored"),
                        Err(err) => {
                            assert!(err.is_retryable(), "load: {err}");
                            failures += 1;
                            continue;
                        }
                    };
                    let write = ObjectWrite {
                        key: key.clone(),
                        expected_version: stored.version,
                        state: Some(format!("{{\"n\":{}}}", stored.version + 1).into_bytes()),
                        alarms: vec![],
                        kv: Vec::new(),
                        idempotency: None,
                        fsm: Default::default(),
                    };
                    match store.commit(&[write]).await {
                        Ok(()) => break,
                        // A commit whose reply was lost may have been applied: reload.
                        Err(CommitError::Conflict { .. }) => {}
                        Err(CommitError::Storage(err)) => {
                            assert!(err.is_retryable(), "commit: {err}");
                            failures += 1;
                        }
                        Err(err) => panic!("{err}"),
                    }
                }
            }
            failures
        })
    };
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        terminate(&mut admin, &app).await;
    }
    let failures = worker.await.unwrap();
    eprintln!("retryable failures during the stream: {failures}");
    // The last termination may have cut pooled connections used a moment before, which are
    // trusted without a ping: each fails its next use once, retryably, and is dropped.
    let mut cut = 0;
    let stored = loop {
        match store.load(&key).await {
            Ok(stored) => break stored,
            Err(err) => {
                assert!(err.is_retryable(), "load: {err}");
                cut += 1;
                assert!(
                    cut <= 16,
                    "a load still fails after {cut} cut connections: {err}"
                );
            }
        }
    };
    let version = stored.version();
    assert!(version >= 102, "version {version}");
    admin.close().await.ok();
    monitor.close().await.ok();
}

/// How many server processes serve `application_name`.
async fn connections_of(monitor: &mut PgConnection, application_name: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE application_name = $1")
        .bind(application_name)
        .fetch_one(monitor)
        .await
        .unwrap()
}

/// The connections kept for commits count within `max_connections`: many concurrent commits
/// and loads never open more.
#[tokio::test]
async fn commits_stay_within_max_connections() {
    for max in [4, 1] {
        stays_within(max).await;
    }
}

/// 16 tasks commit and load at once on a store of `max` connections: the server never sees
/// more than `max` of its connections.
async fn stays_within(max: u32) {
    let Some(url) = database_url() else {
        return;
    };
    let guard = SchemaGuard::new(&url, &format!("max_connections_{max}")).await;
    let app = format!("durable-max-conn-{max}-{}", std::process::id());
    let store = PostgresStore::builder(&url)
        .schema(&guard.name)
        .application_name(&app)
        .max_connections(max)
        .connect()
        .await
        .unwrap();
    assert_eq!(store.max_concurrent_commits(), 1);
    let mut monitor = PgConnection::connect(&url).await.unwrap();
    let workers: Vec<_> = (0..16)
        .map(|worker| {
            let store = store.clone();
            tokio::spawn(async move {
                for round in 0..20 {
                    let key = ObjectKey::new("Counter", format!("{worker}-{round}"));
                    store.commit(&[insert(&key, "{}")]).await.unwrap();
                    assert_eq!(store.load(&key).await.unwrap().object().unwrap().version, 1);
                }
            })
        })
        .collect();
    let mut peak = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while workers.iter().any(|w| !w.is_finished()) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the workers did not finish within 60 s"
        );
        peak = peak.max(connections_of(&mut monitor, &app).await);
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    for worker in workers {
        worker.await.unwrap();
    }
    assert!(
        (1..=i64::from(max)).contains(&peak),
        "{peak} connections open at once, at most {max} allowed"
    );
    monitor.close().await.ok();
}

/// A connection kept for commits that the server dropped while it sat idle is found out by a
/// ping before use: the next commit and load succeed at the first attempt.
#[tokio::test]
async fn idle_connections_dropped_by_the_server_are_replaced_unseen() {
    let Some(url) = database_url() else {
        return;
    };
    let guard = SchemaGuard::new(&url, "idle_dropped").await;
    let app = format!("durable-idle-dropped-{}", std::process::id());
    let store = PostgresStore::builder(&url)
        .schema(&guard.name)
        .application_name(&app)
        .connect()
        .await
        .unwrap();
    let mut admin = PgConnection::connect(&url).await.unwrap();
    let key = ObjectKey::new("Counter", "a");
    store.commit(&[insert(&key, "{\"n\":1}")]).await.unwrap();
    for round in 1..=3 {
        assert!(terminate(&mut admin, &app).await >= 1);
        // Longer than a connection is trusted without a ping after its last use.
        tokio::time::sleep(Duration::from_millis(700)).await;
        let write = ObjectWrite {
            key: key.clone(),
            expected_version: round,
            state: Some(format!("{{\"n\":{}}}", round + 1).into_bytes()),
            alarms: vec![],
            kv: Vec::new(),
            idempotency: None,
            fsm: Default::default(),
        };
        store.commit(&[write]).await.unwrap();
        assert_eq!(
            store.load(&key).await.unwrap().object().unwrap().version,
            round + 1
        );
    }
    admin.close().await.ok();
}

/// A TCP proxy to the Postgres server that can go silent: while frozen it forwards nothing,
/// in either direction, on old and new connections alike, and closes nothing — a peer lost
/// behind a network partition.
struct SilentProxy {
    port: u16,
    frozen: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl SilentProxy {
    async fn start(server: (String, u16)) -> Self {
        use std::sync::Arc;
        use std::sync::atomic::AtomicBool;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let frozen = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&frozen);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(upstream) = tokio::net::TcpStream::connect(&server).await else {
                    continue;
                };
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = upstream.into_split();
                tokio::spawn(Self::pipe(client_read, server_write, Arc::clone(&flag)));
                tokio::spawn(Self::pipe(server_read, client_write, Arc::clone(&flag)));
            }
        });
        Self { port, frozen }
    }

    async fn pipe(
        mut from: tokio::net::tcp::OwnedReadHalf,
        mut to: tokio::net::tcp::OwnedWriteHalf,
        frozen: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) {
        use std::sync::atomic::Ordering;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let thawed = || async {
            while frozen.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        let mut buf = vec![0; 16 * 1024];
        loop {
            thawed().await;
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            // Bytes read just before the freeze are held too.
            thawed().await;
            if to.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    }

    fn freeze(&self, frozen: bool) {
        self.frozen
            .store(frozen, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A store reaching the server through a [`SilentProxy`] (pool: 3 connections, 1 s to get
/// one), configured by `configure`, with `Counter/a` committed at version 1.
async fn store_behind_proxy(
    url: &str,
    schema: &str,
    configure: impl FnOnce(durable_sqlx::PostgresStoreBuilder) -> durable_sqlx::PostgresStoreBuilder,
) -> (SilentProxy, PostgresStore) {
    let direct = PgConnectOptions::from_str(url).unwrap();
    let proxy = SilentProxy::start((direct.get_host().to_owned(), direct.get_port())).await;
    let pool = PgPoolOptions::new()
        .max_connections(3)
        .acquire_timeout(Duration::from_secs(1))
        .connect_with(direct.clone().host("127.0.0.1").port(proxy.port))
        .await
        .unwrap();
    let store = configure(PostgresStore::builder_with_pool(pool).schema(schema))
        .connect()
        .await
        .unwrap();
    let key = ObjectKey::new("Counter", "a");
    store.commit(&[insert(&key, "{\"n\":1}")]).await.unwrap();
    (proxy, store)
}

/// The write taking `Counter/a` from version 1 to 2.
fn second_version() -> ObjectWrite {
    ObjectWrite {
        key: ObjectKey::new("Counter", "a"),
        expected_version: 1,
        state: Some(b"{\"n\":2}".to_vec()),
        alarms: vec![],
        kv: Vec::new(),
        idempotency: None,
        fsm: Default::default(),
    }
}

/// Commits the second version on a silent server: it must fail with a retryable error within
/// `within` (and with the message `expected`, if given). Then the server speaks again and the
/// commit goes through within a few attempts.
async fn fails_while_silent_then_recovers(
    proxy: &SilentProxy,
    store: &PostgresStore,
    within: Duration,
    expected: Option<&str>,
) {
    let write = second_version();
    let started = std::time::Instant::now();
    let outcome = tokio::time::timeout(
        Duration::from_secs(20),
        store.commit(std::slice::from_ref(&write)),
    )
    .await
    .expect("the commit waited on the silent server for 20 s");
    match outcome {
        Err(CommitError::Storage(err)) => {
            assert!(err.is_retryable(), "not retryable: {err}");
            if let Some(expected) = expected {
                assert_eq!(err.to_string(), expected);
            }
        }
        other => panic!("expected a retryable storage error, got {other:?}"),
    }
    assert!(started.elapsed() < within, "{:?}", started.elapsed());

    proxy.freeze(false);
    let mut attempts = 0;
    loop {
        attempts += 1;
        match store.commit(std::slice::from_ref(&write)).await {
            Ok(()) => break,
            Err(CommitError::Storage(err)) if attempts < 5 => {
                assert!(err.is_retryable(), "not retryable: {err}")
            }
            Err(err) => panic!("no recovery after {attempts} attempts: {err}"),
        }
    }
    let key = ObjectKey::new("Counter", "a");
    assert_eq!(store.load(&key).await.unwrap().object().unwrap().version, 2);
}

/// A connection kept for commits whose server went silent while it sat idle does not hold the
/// next commit forever: its ping gives up after the pool's acquire timeout, and the commit
/// fails with a retryable error. Once the server answers again, commits succeed.
#[tokio::test]
async fn commits_do_not_wait_forever_on_a_silent_server() {
    let Some(url) = database_url() else {
        return;
    };
    let guard = SchemaGuard::new(&url, "silent_server").await;
    let (proxy, store) = store_behind_proxy(&url, &guard.name, |builder| builder).await;
    proxy.freeze(true);
    // Past the time a connection is trusted without a ping: the ping gives up after the
    // pool's acquire timeout.
    tokio::time::sleep(Duration::from_millis(700)).await;
    fails_while_silent_then_recovers(&proxy, &store, Duration::from_secs(10), None).await;
}

/// A connection used a moment ago is lent without a ping: if its server falls silent, the
/// commit's own timeout ends the wait.
#[tokio::test]
async fn a_commit_on_a_connection_trusted_without_a_ping_times_out_on_a_silent_server() {
    let Some(url) = database_url() else {
        return;
    };
    let guard = SchemaGuard::new(&url, "silent_commit").await;
    let (proxy, store) = store_behind_proxy(&url, &guard.name, |builder| {
        builder.commit_timeout(Duration::from_secs(1))
    })
    .await;
    // At once: the connection was used a moment ago, so it is lent without a ping, and only
    // the commit timeout ends the wait.
    proxy.freeze(true);
    fails_while_silent_then_recovers(
        &proxy,
        &store,
        Duration::from_secs(5),
        Some(
            "storage unavailable: \
             no answer from the server within 1000 ms; the commit's outcome is unknown",
        ),
    )
    .await;
}

#[tokio::test]
async fn a_delete_racing_a_commit_leaves_no_alarm_behind() {
    let Some(fx) = fixture("delete_race").await else {
        return;
    };
    let key = ObjectKey::new("Reminder", "r");
    fx.store.commit(&[insert(&key, "{}")]).await.unwrap();
    // Another process's commit, held open: it has bumped the object's version and set an
    // alarm, but not committed yet.
    let schema = &fx.guard.name;
    let mut other = PgConnection::connect(&fx.guard.url).await.unwrap();
    sqlx::raw_sql(AssertSqlSafe(format!(
        "BEGIN;
         UPDATE {schema}.durable_objects SET version = version + 1
             WHERE object_type = 'Reminder' AND object_id = 'r';
         INSERT INTO {schema}.durable_alarms (object_type, object_id, name, due_at)
             VALUES ('Reminder', 'r', 'tick', now() + interval '1 hour');"
    )))
    .execute(&mut other)
    .await
    .unwrap();
    let store = fx.store.clone();
    let delete = tokio::spawn(async move { store.delete(&ObjectKey::new("Reminder", "r")).await });
    // The delete reaches the row and waits for the other commit's lock.
    let mut monitor = PgConnection::connect(&fx.guard.url).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        assert!(
            !delete.is_finished(),
            "the delete waits for the commit in progress"
        );
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
             WHERE wait_event_type = 'Lock' AND position($1 in query) > 0",
        )
        .bind(schema)
        .fetch_one(&mut monitor)
        .await
        .unwrap();
        if waiting > 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the delete never waited on the row lock"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        !delete.is_finished(),
        "the delete waits for the commit in progress"
    );
    sqlx::raw_sql("COMMIT").execute(&mut other).await.unwrap();
    assert!(delete.await.unwrap().unwrap(), "the object existed");

    assert_eq!(fx.store.load(&key).await.unwrap().object(), None);
    let alarms: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT count(*) FROM {schema}.durable_alarms WHERE object_id = 'r'"
    )))
    .fetch_one(&mut other)
    .await
    .unwrap();
    assert_eq!(
        alarms, 0,
        "an alarm left behind would bring the object back"
    );
}

#[tokio::test]
async fn a_lock_timeout_is_retryable() {
    let Some(url) = database_url() else {
        return;
    };
    let guard = SchemaGuard::new(&url, "lock_timeout").await;
    let options = PgConnectOptions::from_str(&url)
        .unwrap()
        .options([("lock_timeout", "200")]);
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .connect_with(options)
        .await
        .unwrap();
    let store = PostgresStore::builder_with_pool(pool)
        .schema(&guard.name)
        .connect()
        .await
        .unwrap();
    let key = ObjectKey::new("Counter", "a");
    store.commit(&[insert(&key, "{\"n\":1}")]).await.unwrap();

    // Another session holds the object's row.
    let mut other = PgConnection::connect(&url).await.unwrap();
    sqlx::raw_sql(AssertSqlSafe(format!(
        "BEGIN; SELECT * FROM {}.durable_objects FOR UPDATE",
        guard.name
    )))
    .execute(&mut other)
    .await
    .unwrap();
    let update = second_version();
    match store.commit(std::slice::from_ref(&update)).await {
        Err(CommitError::Storage(err)) => {
            assert!(err.is_retryable(), "not retryable: {err}");
            assert_eq!(err.kind(), StorageErrorKind::Unavailable);
        }
        other => panic!("expected a lock timeout, got {other:?}"),
    }
    sqlx::raw_sql("ROLLBACK").execute(&mut other).await.unwrap();
    store.commit(std::slice::from_ref(&update)).await.unwrap();
}

#[tokio::test]
async fn a_schema_named_by_a_reserved_word_works() {
    let Some(url) = database_url() else {
        return;
    };
    let mut admin = PgConnection::connect(&url).await.unwrap();
    // `order` is reserved in SQL: the store must quote it.
    let drop = "DROP SCHEMA IF EXISTS \"order\" CASCADE";
    sqlx::raw_sql(drop).execute(&mut admin).await.unwrap();
    let store = PostgresStore::builder(&url)
        .schema("order")
        .max_connections(2)
        .connect()
        .await
        .unwrap();
    let key = ObjectKey::new("Counter", "a");
    let write = insert_with_tick(&key, "{\"n\":1}");
    store.commit(&[write]).await.unwrap();
    assert_eq!(store.load(&key).await.unwrap().object().unwrap().version, 1);
    assert_eq!(
        store
            .claim_due_alarms(at(1), at(1), at(60_000), 10)
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(store.delete(&key).await.unwrap());
    // Opening it again finds the schema and its migrations.
    let again = PostgresStore::builder(&url)
        .schema("order")
        .max_connections(2)
        .connect()
        .await
        .unwrap();
    assert_eq!(again.load(&key).await.unwrap().object(), None);
    store.pool().close().await;
    again.pool().close().await;
    sqlx::raw_sql(drop).execute(&mut admin).await.unwrap();
}

#[tokio::test]
async fn a_schema_without_its_latest_migration_fails_batches_plainly() {
    let Some(url) = database_url() else {
        return;
    };
    let guard = SchemaGuard::new(&url, "unmigrated").await;
    let store = PostgresStore::builder(&url)
        .schema(&guard.name)
        .max_connections(2)
        .migrate_on_open(false)
        .connect()
        .await
        .unwrap();
    // Without migration 3, the function a batch calls on a version mismatch does not exist:
    // a batch of several writes fails at once, as a rejection, not as a version mismatch to
    // locate and retry.
    store.migrate_to(2).await.unwrap();
    let batch = [
        insert(&ObjectKey::new("Counter", "a"), "{}"),
        insert(&ObjectKey::new("Counter", "b"), "{}"),
    ];
    match store.commit(&batch).await {
        Err(CommitError::Storage(err)) => {
            assert!(!err.is_retryable(), "retryable: {err}");
            assert!(
                err.to_string().contains("durable_version_mismatch"),
                "{err}"
            );
        }
        other => panic!("expected the missing function's error, got {other:?}"),
    }
    store.migrate().await.unwrap();
    store.commit(&batch).await.unwrap();
}

#[tokio::test]
async fn an_unreadable_claimed_alarm_does_not_hold_back_the_others() {
    let Some(fx) = fixture("unreadable_claim").await else {
        return;
    };
    let pool = fx.store.pool().clone();
    let sql = format!(
        "UPDATE {}.durable_alarms SET attempts = -1 WHERE object_id = 'bad'",
        fx.guard.name
    );
    storage_shared::unreadable_claimed_rows_are_skipped(&fx.store, || async move {
        sqlx::query(AssertSqlSafe(sql.as_str()))
            .execute(&pool)
            .await
            .unwrap();
    })
    .await;
}
