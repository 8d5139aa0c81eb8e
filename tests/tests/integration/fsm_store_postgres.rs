//! The FSM store conformance suite on `PostgresFsmStore`, and Postgres-specific checks of its
//! schema: the specification's DDL (enum type, generated guard, partial indexes) and the pick's plan.
//!
//! The server is found through `DATABASE_URL`; without it the tests are skipped, unless `CI`
//! is set: then they fail. Each test works in a schema of its own, dropped when it ends.

use durable_runtime::fsm::conformance::FsmFixture;
use durable_sqlx::{PostgresFsmStore, PostgresStore};
use durable_tests::SchemaGuard;

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

/// An FSM store in a schema of its own.
struct PgFsm {
    store: PostgresFsmStore,
    _guard: SchemaGuard,
}

impl FsmFixture for PgFsm {
    type Store = PostgresFsmStore;

    fn store(&self) -> &PostgresFsmStore {
        &self.store
    }
}

async fn fixture(test: &str) -> Option<PgFsm> {
    let url = database_url()?;
    let guard = SchemaGuard::new(&url, &format!("fsm_{test}")).await;
    let store = PostgresStore::builder(&url)
        .schema(&guard.name)
        .max_connections(6)
        .connect()
        .await
        .expect("connect to Postgres");
    Some(PgFsm {
        store: store.fsm(),
        _guard: guard,
    })
}

mod conformance {
    durable_runtime::fsm_conformance_tests!(|case: &'static str| super::fixture(case));
}

use durable_sqlx::sqlx::{self, AssertSqlSafe, Row};

/// The DDL is the specification's: the status enum in order, the generated stored correlation guard
/// over a `durable_status[]` scope, the four partial indexes (the guard's unique), `jsonb`
/// state, and the inbox's `unique (target_id, dedup_key)` and `(target_id, name)` index.
#[tokio::test]
async fn schema_is_the_seeds() {
    let Some(fx) = fixture("schema").await else {
        return;
    };
    let pool = fx.store.pool();
    let schema = &fx._guard.name;
    let labels: Vec<String> = sqlx::query_scalar(
        "SELECT e.enumlabel::text FROM pg_enum e
         JOIN pg_type t ON t.oid = e.enumtypid
         JOIN pg_namespace n ON n.oid = t.typnamespace
         WHERE t.typname = 'durable_status' AND n.nspname = $1
         ORDER BY e.enumsortorder",
    )
    .bind(schema)
    .fetch_all(pool)
    .await
    .unwrap();
    assert_eq!(
        labels,
        [
            "runnable",
            "executing",
            "awaiting_signal",
            "awaiting_children",
            "done",
            "failed"
        ]
    );

    let columns = sqlx::query(
        "SELECT column_name::text AS name, udt_name::text AS udt, is_generated::text AS generated,
                coalesce(generation_expression, '') AS expression
         FROM information_schema.columns
         WHERE table_schema = $1 AND table_name = 'durable_fsm'",
    )
    .bind(schema)
    .fetch_all(pool)
    .await
    .unwrap();
    let column = |name: &str| {
        columns
            .iter()
            .find(|row| row.get::<String, _>("name") == name)
            .unwrap_or_else(|| panic!("no column {name}"))
    };
    assert_eq!(column("status").get::<String, _>("udt"), "durable_status");
    assert_eq!(
        column("correlation_scope").get::<String, _>("udt"),
        "_durable_status"
    );
    for jsonb in ["state", "result"] {
        assert_eq!(column(jsonb).get::<String, _>("udt"), "jsonb");
    }
    assert_eq!(column("priority").get::<String, _>("udt"), "int2");
    assert_eq!(column("awaits").get::<String, _>("udt"), "_text");
    let guard = column("correlation_guard");
    assert_eq!(guard.get::<String, _>("generated"), "ALWAYS");
    let expression = guard.get::<String, _>("expression");
    assert!(
        expression.contains("correlation_key IS NOT NULL")
            && expression.contains("status = ANY (correlation_scope)"),
        "{expression}"
    );
    let stored: bool = sqlx::query_scalar(
        "SELECT a.attgenerated = 's' FROM pg_attribute a
         JOIN pg_class c ON c.oid = a.attrelid
         JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = $1 AND c.relname = 'durable_fsm' AND a.attname = 'correlation_guard'",
    )
    .bind(schema)
    .fetch_one(pool)
    .await
    .unwrap();
    assert!(stored, "the guard is a stored generated column");

    let indexes: Vec<(String, String)> =
        sqlx::query_as("SELECT indexname::text, indexdef FROM pg_indexes WHERE schemaname = $1")
            .bind(schema)
            .fetch_all(pool)
            .await
            .unwrap();
    let index = |name: &str| {
        indexes
            .iter()
            .find(|(index, _)| index == name)
            .map(|(_, definition)| definition.clone())
            .unwrap_or_else(|| panic!("no index {name}: {indexes:?}"))
    };
    let pick = index("durable_fsm_pick");
    assert!(
        pick.contains("(queue, priority, eligible_at)")
            && pick.contains("WHERE (status = 'runnable'"),
        "{pick}"
    );
    let lease = index("durable_fsm_lease");
    assert!(
        lease.contains("(lease_expires_at)") && lease.contains("WHERE (status = 'executing'"),
        "{lease}"
    );
    let correlation = index("durable_fsm_correlation");
    assert!(
        correlation.starts_with("CREATE UNIQUE INDEX")
            && correlation.contains("(correlation_guard)")
            && correlation.contains("WHERE (correlation_guard IS NOT NULL)"),
        "{correlation}"
    );
    let parent = index("durable_fsm_parent");
    assert!(
        parent.contains("(parent_id)") && parent.contains("WHERE (parent_id IS NOT NULL)"),
        "{parent}"
    );
    let dedup = index("durable_fsm_signals_dedup");
    assert!(
        dedup.starts_with("CREATE UNIQUE INDEX") && dedup.contains("(target_id, dedup_key)"),
        "{dedup}"
    );
    assert!(index("durable_fsm_signals_target").contains("(target_id, name)"));
}

/// With many runnable rows, the pick's plan walks the partial pick index in order rather than
/// scanning the table.
#[tokio::test]
async fn pick_uses_the_partial_index() {
    let Some(fx) = fixture("pick_plan").await else {
        return;
    };
    let pool = fx.store.pool();
    let schema = &fx._guard.name;
    // 50,000 rows over 5 queues, most of them ended: what a production table looks like.
    sqlx::raw_sql(AssertSqlSafe(format!(
        "INSERT INTO \"{schema}\".durable_fsm (fsm, step, queue, priority, status, eligible_at)
         SELECT 'bench', 'start', 'q' || (i % 5), (i % 3)::int2,
                (CASE WHEN i % 4 = 0 THEN 'runnable' ELSE 'done' END)::\"{schema}\".durable_status,
                now() - (i || ' seconds')::interval
         FROM generate_series(1, 50000) AS i;
         ANALYZE \"{schema}\".durable_fsm;"
    )))
    .execute(pool)
    .await
    .unwrap();
    // The statement with its parameters written in (queue, due by, limit, worker, lease end,
    // now, the registered FSM versions), as the planner sees it for one execution.
    let pick = fx
        .store
        .pick_statement()
        .replace("$1", "'q1'")
        .replace("$2", "now()")
        .replace("$3", "100")
        .replace("$4", "'explain'")
        .replace("$5", "now() + interval '1 minute'")
        .replace("$6", "now()")
        .replace("$7", "ARRAY['bench:1']");
    let plan: Vec<String> = sqlx::query_scalar(AssertSqlSafe(format!("EXPLAIN {pick}")))
        .fetch_all(pool)
        .await
        .unwrap();
    let plan = plan.join("\n");
    assert!(
        plan.contains("Index Scan using durable_fsm_pick"),
        "the pick does not use its partial index:\n{plan}"
    );
    assert!(!plan.contains("Seq Scan on durable_fsm "), "{plan}");
}

/// The database itself refuses a second executing row in a taken slot of a concurrency key,
/// whoever writes it: the unique partial index over executing rows' `(concurrency_key,
/// concurrency_slot)` is the arbiter, not the picker.
#[tokio::test]
async fn concurrency_slots_are_unique_among_executing_rows() {
    let Some(fx) = fixture("concurrency_index").await else {
        return;
    };
    let pool = fx.store.pool();
    let schema = &fx._guard.name;
    let (definition,): (String,) = sqlx::query_as(
        "SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND indexname = 'durable_fsm_concurrency'",
    )
    .bind(schema)
    .fetch_one(pool)
    .await
    .unwrap();
    assert!(
        definition.starts_with("CREATE UNIQUE INDEX")
            && definition.contains("(concurrency_key, concurrency_slot)")
            && definition.contains("status = 'executing'"),
        "{definition}"
    );
    let insert = |slot: i32, status: &'static str| {
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO \"{schema}\".durable_fsm (fsm, step, status, concurrency_key, concurrency_slot)
             VALUES ('f', 's', '{status}', 'k', $1)"
        )))
        .bind(slot)
        .execute(pool)
    };
    insert(0, "executing").await.unwrap();
    insert(1, "executing").await.unwrap();
    insert(0, "runnable").await.unwrap();
    let refused = insert(0, "executing").await.unwrap_err();
    assert!(
        refused.to_string().contains("durable_fsm_concurrency"),
        "{refused}"
    );
    // Leaving `executing` frees the slot.
    sqlx::query(AssertSqlSafe(format!(
        "UPDATE \"{schema}\".durable_fsm SET status = 'done' WHERE concurrency_slot = 0 AND status = 'executing'"
    )))
    .execute(pool)
    .await
    .unwrap();
    insert(0, "executing").await.unwrap();
}
