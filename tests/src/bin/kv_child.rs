//! A process to be killed with SIGKILL by the key-value kill loop: `kv_child <database file>`
//! runs four callers against one object of a SQLite file, each call changing the object's state
//! and its keys together, and prints every acknowledged step number.
//!
//! Step `n` sets the state to `n`, puts `last = n` and `slot{n % 10} = n`, and replaces the key
//! `step{n - 1}` with `step{n}`: after any crash, the state and the keys name the same step.

use std::io::Write;

use durable_runtime::{Context, KvError, Runtime, durable_object};
use durable_sqlx::SqliteStore;

#[durable_object]
pub struct KvSteps {
    n: u64,
}

#[durable_object]
impl KvSteps {
    #[handler]
    async fn handle_step(&mut self, ctx: &Context) -> Result<u64, KvError> {
        self.n += 1;
        let n = self.n;
        let storage = ctx.storage();
        storage.put("last", &n)?;
        storage.put(&format!("slot{}", n % 10), &n)?;
        storage.delete(&format!("step{:09}", n - 1))?;
        storage.put(&format!("step{n:09}"), &n)?;
        Ok(n)
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let path = std::env::args()
        .nth(1)
        .expect("usage: kv_child <database file>");
    let store = SqliteStore::open(&path).await.expect("open SQLite");
    let rt = Runtime::new(store);
    let mut callers = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let rt = rt.clone();
        callers.spawn(async move {
            loop {
                let n = match KvSteps::step(&rt, "steps").await {
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
