//! A process to be killed with SIGKILL by the objects-with-FSMs kill loop:
//! `obj_fsm_child <database file>` (SQLite) or `obj_fsm_child <postgres URL> <schema>` runs
//! four callers against one object, each call advancing the object's step and inserting, in
//! the same commit, an FSM instance keyed `step:<n>`, and prints every acknowledged step number.

use std::io::Write;

use durable_runtime::fsm::{Instance, Outcome, StepContext, durable_fsm};
use durable_runtime::storage::Storage;
use durable_runtime::{Context, Runtime, durable_object};
use durable_sqlx::{PostgresStore, SqliteStore};

#[durable_fsm(name = "kill_step")]
pub struct KillStep {
    n: u64,
}

#[durable_fsm]
impl KillStep {
    #[step(initial)]
    fn start(&mut self, _ctx: &StepContext) -> Outcome<Self> {
        Outcome::done(())
    }
}

#[durable_object]
pub struct FsmSteps {
    n: u64,
}

#[durable_object]
impl FsmSteps {
    #[handler]
    fn handle_step(&mut self, ctx: &Context) -> Result<u64, durable_runtime::fsm::Error> {
        self.n += 1;
        let n = self.n;
        ctx.fsm()
            .insert(Instance::new(KillStep { n }).correlation_key(format!("step:{n}")))?;
        Ok(n)
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut args = std::env::args().skip(1);
    let location = args
        .next()
        .expect("usage: obj_fsm_child <database file> | <postgres URL> <schema>");
    let store: std::sync::Arc<dyn Storage> = match args.next() {
        Some(schema) => std::sync::Arc::new(
            PostgresStore::builder(&location)
                .schema(&schema)
                .connect()
                .await
                .expect("connect to Postgres"),
        ),
        None => std::sync::Arc::new(SqliteStore::open(&location).await.expect("open SQLite")),
    };
    let rt = Runtime::new(store);
    let mut callers = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let rt = rt.clone();
        callers.spawn(async move {
            loop {
                let n = match FsmSteps::step(&rt, "steps").await {
                    Ok(n) => n,
                    Err(error) => return error.to_string(),
                };
                let mut out = std::io::stdout().lock();
                writeln!(out, "{n}").expect("stdout");
                out.flush().expect("stdout");
            }
        });
    }
    // Callers stop only on an error, which ends the run.
    if let Some(stopped) = callers.join_next().await {
        panic!("a caller stopped: {stopped:?}");
    }
}
