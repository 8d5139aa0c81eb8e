//! The kill loop: three worker processes (`fsm_worker`) share one Postgres schema, or one
//! SQLite file, and run instances of a five-step FSM while one of them is killed with SIGKILL
//! every two seconds (and started again). Every instance must reach `done`, and an audit row
//! written by a trigger inside each outcome's transaction must show exactly one committed
//! transition per (instance, step): a step may run more than once (a worker died after running
//! it but before committing), its transition never. Executions are reported beside
//! transitions.
//!
//! `FSM_KILL_INSTANCES` sets the number of instances (default 10,000 on Postgres, 3,000 on
//! SQLite, whose one writer the three processes share). Without `DATABASE_URL` the Postgres
//! loop is skipped, unless `CI` is set: then it fails.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use durable_runtime::fsm::store::{FsmStore, NewInstance};
use durable_runtime::fsm::{Engine, Status};
use durable_sqlx::sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use durable_sqlx::sqlx::{self, AssertSqlSafe, PgPool, SqlitePool};
use durable_sqlx::{PostgresStore, SqliteStore, Synchronous};
use durable_tests::SchemaGuard;

const WORKERS: usize = 3;
const KILL_EVERY: Duration = Duration::from_secs(2);
const DEADLINE: Duration = Duration::from_secs(600);

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

/// A worker process, killed when dropped.
struct Worker(Child);

impl Worker {
    /// A worker with `env` set: where its database is.
    fn start(env: &[(&str, &str)]) -> Self {
        let child = Command::new(env!("CARGO_BIN_EXE_fsm_worker"))
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start a worker");
        Self(child)
    }

    fn kill(&mut self) {
        // `Child::kill` sends SIGKILL: no outcome, heartbeat or release leaves the process.
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

async fn scalar(pool: &PgPool, sql: String) -> i64 {
    sqlx::query_scalar(AssertSqlSafe(sql))
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn sqlite_scalar(pool: &SqlitePool, sql: &str) -> i64 {
    sqlx::query_scalar(AssertSqlSafe(sql.to_owned()))
        .fetch_one(pool)
        .await
        .unwrap()
}

fn instances(default: i64) -> i64 {
    std::env::var("FSM_KILL_INSTANCES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

/// Inserts `instances` runs of the five steps, from a client (the FSM need not be registered
/// to insert it).
async fn insert_instances(store: impl FsmStore, instances: i64) {
    let client = Engine::builder(store).no_reaper().no_gc().build().unwrap();
    let now = client.now();
    let rows: Vec<NewInstance> = (0..instances)
        .map(|_| NewInstance {
            fsm: "kill.five".into(),
            fsm_version: 1,
            step: "s1".into(),
            state: "{}".into(),
            queue: "default".into(),
            priority: 0,
            eligible_at: now,
            correlation_key: None,
            correlation_scope: Status::LIVE.to_vec(),
            concurrency_key: None,
            concurrency_limit: 1,
            rate_limit_key: None,
            rate_limit_units: 1,
        })
        .collect();
    for chunk in rows.chunks(5_000) {
        client.store().insert(chunk, now).await.unwrap();
    }
    client.shutdown().await;
}

/// Runs the workers `env` describes, killing one every [`KILL_EVERY`], until `done` counts
/// `instances`. Returns how long it took and how many workers were killed.
async fn kill_until_done<F, Fut>(env: &[(&str, &str)], instances: i64, done: F) -> (Duration, usize)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = i64>,
{
    let mut workers: Vec<Worker> = (0..WORKERS).map(|_| Worker::start(env)).collect();
    let started = Instant::now();
    let mut kills = 0;
    loop {
        tokio::time::sleep(KILL_EVERY).await;
        let done = done().await;
        if done == instances {
            break;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "only {done} of {instances} instances done after {:?}",
            started.elapsed()
        );
        let victim = kills % WORKERS;
        workers[victim].kill();
        workers[victim] = Worker::start(env);
        kills += 1;
    }
    (started.elapsed(), kills)
}

/// What the audit shows once every instance is done.
struct Audit {
    /// Committed transitions.
    transitions: i64,
    /// Distinct (instance, step) among them.
    distinct: i64,
    /// Step executions.
    executions: i64,
    /// Failed instances.
    failed: i64,
    /// Instances that committed s1 to s5 once each.
    complete: i64,
}

impl Audit {
    fn check(&self, instances: i64, took: Duration, kills: usize) {
        let Audit {
            transitions,
            distinct,
            executions,
            failed,
            complete,
        } = *self;
        eprintln!(
            "kill loop: {instances} instances x 5 steps in {took:?} with {kills} SIGKILLs; \
             {transitions} committed transitions, {executions} step executions \
             ({} re-executed)",
            executions - transitions
        );
        assert_eq!(failed, 0);
        assert_eq!(
            transitions,
            instances * 5,
            "one transition per (instance, step)"
        );
        assert_eq!(distinct, transitions, "no (instance, step) committed twice");
        assert_eq!(
            complete, instances,
            "every instance committed s1 to s5 once each"
        );
        assert!(executions >= transitions, "every transition was executed");
        assert!(kills >= 1, "at least one worker was killed mid-run");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_workers_lose_no_transition() {
    let Some(url) = database_url() else {
        return;
    };
    let instances = instances(10_000);
    let guard = SchemaGuard::new(&url, "fsm_kill_loop").await;
    let schema = guard.name.clone();
    let store = PostgresStore::builder(&url)
        .schema(&schema)
        .connect()
        .await
        .unwrap();
    let pool = store.pool().clone();
    // The audit: one row per committed transition, written by a trigger in the outcome's own
    // transaction (a reaped claim, executing back to runnable at the same step, is not one).
    sqlx::raw_sql(AssertSqlSafe(format!(
        r#"
        CREATE TABLE "{schema}".kill_executions (instance BIGINT NOT NULL, step TEXT NOT NULL);
        CREATE TABLE "{schema}".kill_audit (instance BIGINT NOT NULL, step TEXT NOT NULL,
                                            status TEXT NOT NULL);
        CREATE FUNCTION "{schema}".kill_audit() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO "{schema}".kill_audit VALUES (OLD.id, OLD.step, NEW.status::text);
            RETURN NEW;
        END $$;
        CREATE TRIGGER kill_audit AFTER UPDATE ON "{schema}".durable_fsm FOR EACH ROW
            WHEN (OLD.status = 'executing' AND NEW.status <> 'executing'
                  AND (NEW.step <> OLD.step OR NEW.status IN ('done', 'failed')))
            EXECUTE FUNCTION "{schema}".kill_audit();
        "#
    )))
    .execute(&pool)
    .await
    .unwrap();
    insert_instances(store.fsm(), instances).await;

    let env = [
        ("DATABASE_URL", url.as_str()),
        ("FSM_SCHEMA", schema.as_str()),
    ];
    let done_sql = format!("SELECT count(*) FROM \"{schema}\".durable_fsm WHERE status = 'done'");
    let (took, kills) = kill_until_done(&env, instances, || scalar(&pool, done_sql.clone())).await;

    let audit = format!("\"{schema}\".kill_audit");
    Audit {
        transitions: scalar(&pool, format!("SELECT count(*) FROM {audit}")).await,
        distinct: scalar(
            &pool,
            format!("SELECT count(*) FROM (SELECT DISTINCT instance, step FROM {audit}) AS d"),
        )
        .await,
        executions: scalar(
            &pool,
            format!("SELECT count(*) FROM \"{schema}\".kill_executions"),
        )
        .await,
        failed: scalar(
            &pool,
            format!("SELECT count(*) FROM \"{schema}\".durable_fsm WHERE status = 'failed'"),
        )
        .await,
        complete: scalar(
            &pool,
            format!(
                "SELECT count(*) FROM (SELECT instance FROM {audit} GROUP BY instance
                 HAVING array_agg(step ORDER BY step) = ARRAY['s1','s2','s3','s4','s5']) AS c"
            ),
        )
        .await,
    }
    .check(instances, took, kills);
}

/// The same loop on one SQLite file: three processes, each with its own writing connection,
/// taking turns at the database's one write lock while they are killed. The audit trigger runs
/// inside each outcome's transaction as on Postgres; executions go to a file of their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_sqlite_workers_lose_no_transition() {
    let instances = instances(3_000);
    let dir = tempfile::tempdir().unwrap();
    let database = dir.path().join("durable.db");
    let executions = dir.path().join("executions.db");
    let store = SqliteStore::builder(&database)
        .synchronous(Synchronous::Normal)
        .open()
        .await
        .unwrap();
    let pool = store.pool().clone();
    sqlx::raw_sql(
        "CREATE TABLE kill_audit (instance INTEGER NOT NULL, step TEXT NOT NULL,
                                  status TEXT NOT NULL);
         CREATE TRIGGER kill_audit AFTER UPDATE ON durable_fsm FOR EACH ROW
             WHEN OLD.status = 'executing' AND NEW.status <> 'executing'
                  AND (NEW.step <> OLD.step OR NEW.status IN ('done', 'failed'))
         BEGIN
             INSERT INTO kill_audit VALUES (OLD.id, OLD.step, NEW.status);
         END;",
    )
    .execute(&pool)
    .await
    .unwrap();
    let recorded = SqlitePoolOptions::new()
        .connect_with(
            SqliteConnectOptions::new()
                .filename(&executions)
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal),
        )
        .await
        .unwrap();
    sqlx::raw_sql("CREATE TABLE kill_executions (instance INTEGER NOT NULL, step TEXT NOT NULL)")
        .execute(&recorded)
        .await
        .unwrap();
    insert_instances(store.fsm(), instances).await;

    let database = database.to_str().unwrap();
    let executions = executions.to_str().unwrap();
    let env = [("FSM_SQLITE", database), ("FSM_EXECUTIONS", executions)];
    let (took, kills) = kill_until_done(&env, instances, || {
        sqlite_scalar(
            &pool,
            "SELECT count(*) FROM durable_fsm WHERE status = 'done'",
        )
    })
    .await;

    Audit {
        transitions: sqlite_scalar(&pool, "SELECT count(*) FROM kill_audit").await,
        distinct: sqlite_scalar(
            &pool,
            "SELECT count(*) FROM (SELECT DISTINCT instance, step FROM kill_audit)",
        )
        .await,
        executions: sqlite_scalar(&recorded, "SELECT count(*) FROM kill_executions").await,
        failed: sqlite_scalar(
            &pool,
            "SELECT count(*) FROM durable_fsm WHERE status = 'failed'",
        )
        .await,
        complete: sqlite_scalar(
            &pool,
            "SELECT count(*) FROM (SELECT instance FROM kill_audit GROUP BY instance
             HAVING group_concat(step, ',' ORDER BY step) = 's1,s2,s3,s4,s5')",
        )
        .await,
    }
    .check(instances, took, kills);
}
