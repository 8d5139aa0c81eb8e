//! A worker process of the FSM kill loop: runs the `kill.five` FSM's steps from the Postgres
//! database at `DATABASE_URL`, in the schema `FSM_SCHEMA`, until it is killed. Each step
//! records its execution (a side effect outside the outcome's transaction, so re-executions
//! show) and moves on; the fifth ends the instance.

use std::sync::OnceLock;
use std::time::Duration;

use durable_runtime::fsm::{Engine, Outcome, StepContext, durable_fsm};
use durable_sqlx::PostgresStore;
use durable_sqlx::sqlx::{self, AssertSqlSafe, PgPool};

static EXECUTIONS: OnceLock<(PgPool, String)> = OnceLock::new();

/// Records that `step` of `ctx`'s instance ran.
async fn executed(ctx: &StepContext) -> Result<(), sqlx::Error> {
    let (pool, insert) = EXECUTIONS.get().expect("set in main");
    sqlx::query(AssertSqlSafe(insert.clone()))
        .bind(ctx.id().get())
        .bind(ctx.step())
        .execute(pool)
        .await
        .map(drop)
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

#[tokio::main]
async fn main() {
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
        .set((store.pool().clone(), insert))
        .expect("set once");
    let _engine = Engine::builder(store.fsm())
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
