//! A worker process of the FSM kill loop: runs the `kill.five` FSM's steps until it is killed,
//! from the SQLite file `FSM_SQLITE` when set (recording executions in the SQLite file
//! `FSM_EXECUTIONS`), else from the Postgres database at `DATABASE_URL`, in the schema
//! `FSM_SCHEMA`. Each step records its execution (a side effect outside the outcome's
//! transaction, so re-executions show) and moves on; the fifth ends the instance.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use durable_runtime::fsm::store::FsmStore;
use durable_runtime::fsm::{Engine, Outcome, StepContext, durable_fsm};
use durable_sqlx::sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use durable_sqlx::sqlx::{self, AssertSqlSafe, PgPool, SqlitePool};
use durable_sqlx::{PostgresStore, SqliteStore, Synchronous};

/// Where executions are recorded.
enum Executions {
    /// The database's pool and the insert into the schema's table.
    Postgres(PgPool, String),
    /// A file of its own beside the SQLite database, so that recording does not compete with
    /// the store's writer.
    Sqlite(SqlitePool),
}

static EXECUTIONS: OnceLock<Executions> = OnceLock::new();

/// Records that `step` of `ctx`'s instance ran.
async fn executed(ctx: &StepContext) -> Result<(), sqlx::Error> {
    match EXECUTIONS.get().expect("set in main") {
        Executions::Postgres(pool, insert) => sqlx::query(AssertSqlSafe(insert.clone()))
            .bind(ctx.id().get())
            .bind(ctx.step())
            .execute(pool)
            .await
            .map(drop),
        Executions::Sqlite(pool) => {
            sqlx::query("INSERT INTO kill_executions (instance, step) VALUES (?1, ?2)")
                .bind(ctx.id().get())
                .bind(ctx.step())
                .execute(pool)
                .await
                .map(drop)
        }
    }
}

/// Five steps, each recorded when it runs.
#[durable_fsm(name = "kill.five", result = u32)]
pub struct Five {}

#[durable_fsm]
impl Five {
    #[step(initial)]
    async fn s1(&mut self, ctx: &StepContext) -> Result<Outcome<Self>, sqlx::Error> {
        executed(ctx).await?;
        Ok(Outcome::next(Self::S2))
    }

    #[step]
    async fn s2(&mut self, ctx: &StepContext) -> Result<Outcome<Self>, sqlx::Error> {
        executed(ctx).await?;
        Ok(Outcome::next(Self::S3))
    }

    #[step]
    async fn s3(&mut self, ctx: &StepContext) -> Result<Outcome<Self>, sqlx::Error> {
        executed(ctx).await?;
        Ok(Outcome::next(Self::S4))
    }

    #[step]
    async fn s4(&mut self, ctx: &StepContext) -> Result<Outcome<Self>, sqlx::Error> {
        executed(ctx).await?;
        Ok(Outcome::next(Self::S5))
    }

    #[step]
    async fn s5(&mut self, ctx: &StepContext) -> Result<Outcome<Self>, sqlx::Error> {
        executed(ctx).await?;
        Ok(Outcome::done(5))
    }
}

/// The FSM store of the run, with its executions recorded where the test reads them.
async fn open() -> Arc<dyn FsmStore> {
    if let Ok(path) = std::env::var("FSM_SQLITE") {
        // `synchronous = NORMAL` loses nothing a killed process committed (only a power loss
        // can undo WAL commits not yet synced), and the loop kills processes.
        let store = SqliteStore::builder(&path)
            .synchronous(Synchronous::Normal)
            .busy_timeout(Duration::from_secs(30))
            .open()
            .await
            .expect("open SQLite");
        let executions = std::env::var("FSM_EXECUTIONS").expect("FSM_EXECUTIONS");
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(
                SqliteConnectOptions::new()
                    .filename(executions)
                    .journal_mode(SqliteJournalMode::Wal)
                    .busy_timeout(Duration::from_secs(30)),
            )
            .await
            .expect("open the executions file");
        EXECUTIONS
            .set(Executions::Sqlite(pool))
            .unwrap_or_else(|_| panic!("set once"));
        return Arc::new(store.fsm());
    }
    let url = std::env::var("DATABASE_URL").expect("DATABASE_URL");
    let schema = std::env::var("FSM_SCHEMA").expect("FSM_SCHEMA");
    let store = PostgresStore::builder(&url)
        .schema(&schema)
        .max_connections(12)
        .connect()
        .await
        .expect("connect to Postgres");
    let insert =
        format!("INSERT INTO \"{schema}\".kill_executions (instance, step) VALUES ($1, $2)");
    EXECUTIONS
        .set(Executions::Postgres(store.pool().clone(), insert))
        .unwrap_or_else(|_| panic!("set once"));
    Arc::new(store.fsm())
}

#[tokio::main]
async fn main() {
    let _engine = Engine::builder(open().await)
        .register::<Five>()
        .queue("default", 32)
        .lease_ttl(Duration::from_secs(2))
        .heartbeat(Duration::from_millis(500))
        .reaper_interval(Duration::from_millis(250))
        .poll_interval(Duration::from_millis(10), Duration::from_millis(100))
        .no_gc()
        .build()
        .expect("engine");
    println!("ready");
    std::future::pending::<()>().await;
}
