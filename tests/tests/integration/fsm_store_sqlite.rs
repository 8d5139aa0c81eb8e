//! The FSM store conformance suite on `SqliteFsmStore`, and SQLite-specific checks of its
//! schema: status as checked text, the correlation scope as a bit mask read by a stored
//! generated guard, the partial indexes (the concurrency slots' unique one among them), and the
//! pick's plan. Each test works on a database file of its own.

use durable_runtime::fsm::Status;
use durable_runtime::fsm::conformance::FsmFixture;
use durable_runtime::fsm::store::{FsmStore, NewInstance};
use durable_sqlx::sqlx::{self, SqlitePool};
use durable_sqlx::{SqliteFsmStore, SqliteStore};
use tempfile::TempDir;

/// An FSM store on a new database file, deleted with the fixture.
struct SqliteFsm {
    store: SqliteFsmStore,
    _dir: TempDir,
}

impl FsmFixture for SqliteFsm {
    type Store = SqliteFsmStore;

    fn store(&self) -> &SqliteFsmStore {
        &self.store
    }
}

async fn fixture() -> SqliteFsm {
    let dir = tempfile::tempdir().expect("temporary directory");
    let store = SqliteStore::open(dir.path().join("durable.db"))
        .await
        .expect("open SQLite");
    SqliteFsm {
        store: store.fsm(),
        _dir: dir,
    }
}

mod conformance {
    durable_runtime::fsm_conformance_tests!(|_case: &'static str| async {
        Some(super::fixture().await)
    });
}

async fn index_sql(pool: &SqlitePool, name: &str) -> String {
    sqlx::query_scalar("SELECT sql FROM sqlite_master WHERE type = 'index' AND name = ?1")
        .bind(name)
        .fetch_optional(pool)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("no index {name}"))
}

fn row(key: Option<&str>, scope: &[Status]) -> NewInstance {
    NewInstance {
        fsm: "f".into(),
        fsm_version: 1,
        step: "s".into(),
        state: "{}".into(),
        queue: "q".into(),
        priority: 0,
        eligible_at: std::time::UNIX_EPOCH,
        correlation_key: key.map(str::to_owned),
        correlation_scope: scope.to_vec(),
        concurrency_key: None,
        concurrency_limit: 1,
        rate_limit_key: None,
        rate_limit_units: 1,
    }
}

/// The layout is the Postgres one in SQLite's types: the status is text its check constraint
/// keeps to the six statuses, the scope a bit mask (runnable 1 … failed 32) that the stored
/// generated guard reads, and the indexes are partial like Postgres'.
#[tokio::test]
async fn schema_is_the_seeds_in_sqlite_types() {
    let fx = fixture().await;
    let pool = fx.store.pool();
    let table: String = sqlx::query_scalar(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'durable_fsm'",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert!(
        table.contains("correlation_guard TEXT GENERATED ALWAYS AS") && table.contains("STORED"),
        "{table}"
    );
    let refused = sqlx::query(
        "INSERT INTO durable_fsm (fsm, step, status, eligible_at, inserted_at, updated_at)
         VALUES ('f', 's', 'sleeping', 0, 0, 0)",
    )
    .execute(pool)
    .await
    .unwrap_err();
    assert!(refused.to_string().contains("CHECK"), "{refused}");

    // The scope's bits, as the store writes them and the guard reads them.
    let ids = fx
        .store
        .insert(
            &[
                row(Some("live"), &Status::LIVE),
                row(Some("ended"), &[Status::Done, Status::Failed]),
                row(Some("open"), &[]),
            ],
            std::time::UNIX_EPOCH,
        )
        .await
        .unwrap();
    assert_eq!(ids.len(), 3);
    let stored: Vec<(String, i64, Option<String>)> = sqlx::query_as(
        "SELECT correlation_key, correlation_scope, correlation_guard FROM durable_fsm
         ORDER BY correlation_key",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    assert_eq!(
        stored,
        [
            ("ended".to_owned(), 48, None),
            ("live".to_owned(), 15, Some("live".to_owned())),
            ("open".to_owned(), 0, None),
        ]
    );
    // Ending the `ended` row puts its key in scope: the guard follows the status.
    sqlx::query("UPDATE durable_fsm SET status = 'done' WHERE correlation_key = 'ended'")
        .execute(pool)
        .await
        .unwrap();
    assert!(fx.store.find("ended").await.unwrap().is_some());
    assert_eq!(fx.store.find("open").await.unwrap(), None);

    let pick = index_sql(pool, "durable_fsm_pick").await;
    assert!(
        pick.contains("(queue, priority, eligible_at)")
            && pick.contains("WHERE status = 'runnable'"),
        "{pick}"
    );
    let correlation = index_sql(pool, "durable_fsm_correlation").await;
    assert!(
        correlation.starts_with("CREATE UNIQUE INDEX")
            && correlation.contains("WHERE correlation_guard IS NOT NULL"),
        "{correlation}"
    );
    for (index, columns) in [
        ("durable_fsm_lease", "(lease_expires_at)"),
        ("durable_fsm_parent", "(parent_id)"),
        ("durable_fsm_deadline", "(await_deadline)"),
        ("durable_fsm_ended", "(updated_at)"),
        ("durable_fsm_signals_target", "(target_id, name)"),
    ] {
        let sql = index_sql(pool, index).await;
        assert!(sql.contains(columns), "{sql}");
    }
}

/// The database itself refuses a second executing row in a taken slot of a concurrency key,
/// whoever writes it: the unique partial index over executing rows' `(concurrency_key,
/// concurrency_slot)` is the arbiter, not the picker.
#[tokio::test]
async fn concurrency_slots_are_unique_among_executing_rows() {
    let fx = fixture().await;
    let pool = fx.store.pool();
    let definition = index_sql(pool, "durable_fsm_concurrency").await;
    assert!(
        definition.starts_with("CREATE UNIQUE INDEX")
            && definition.contains("(concurrency_key, concurrency_slot)")
            && definition.contains("status = 'executing'"),
        "{definition}"
    );
    let insert = |slot: i64, status: &'static str| {
        sqlx::query(
            "INSERT INTO durable_fsm (fsm, step, status, concurrency_key, concurrency_slot,
                                      eligible_at, inserted_at, updated_at)
             VALUES ('f', 's', ?2, 'k', ?1, 0, 0, 0)",
        )
        .bind(slot)
        .bind(status)
        .execute(pool)
    };
    insert(0, "executing").await.unwrap();
    insert(1, "executing").await.unwrap();
    insert(0, "runnable").await.unwrap();
    let refused = insert(0, "executing").await.unwrap_err();
    assert!(
        refused.to_string().contains("UNIQUE constraint failed"),
        "{refused}"
    );
    // Leaving `executing` frees the slot.
    sqlx::query(
        "UPDATE durable_fsm SET status = 'done' WHERE concurrency_slot = 0 AND status = 'executing'",
    )
    .execute(pool)
    .await
    .unwrap();
    insert(0, "executing").await.unwrap();
}

/// The pick's statements use the partial indexes: the candidates walk the pick index, and the
/// free-slot probe reads the concurrency index of one key, never the executing set.
#[tokio::test]
async fn pick_uses_the_partial_indexes() {
    let fx = fixture().await;
    let pool = fx.store.pool();
    let plan = |sql: &'static str| async move {
        let rows: Vec<(i64, i64, i64, String)> =
            sqlx::query_as(sqlx::AssertSqlSafe(format!("EXPLAIN QUERY PLAN {sql}")))
                .fetch_all(pool)
                .await
                .unwrap();
        rows.into_iter()
            .map(|(.., detail)| detail)
            .collect::<Vec<_>>()
            .join("\n")
    };
    let candidates = plan(
        "SELECT f.id FROM durable_fsm f
         WHERE f.status = 'runnable' AND f.queue = 'q' AND f.eligible_at <= 5
           AND (f.concurrency_key IS NULL OR (
                SELECT count(*) FROM durable_fsm e
                WHERE e.status = 'executing' AND e.concurrency_key = f.concurrency_key
                  AND e.concurrency_slot < f.concurrency_limit) < f.concurrency_limit)
         ORDER BY f.priority, f.eligible_at, f.id LIMIT 10",
    )
    .await;
    assert!(
        candidates.contains("USING INDEX durable_fsm_pick"),
        "{candidates}"
    );
    assert!(
        candidates.contains("USING COVERING INDEX durable_fsm_concurrency")
            || candidates.contains("USING INDEX durable_fsm_concurrency"),
        "{candidates}"
    );
    assert!(!candidates.contains("SCAN e"), "{candidates}");
}
