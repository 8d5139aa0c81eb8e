//! A process to be killed with SIGKILL by the idempotency kill loop: `idem_child <database
//! file> <round>` runs four callers against one `Tally` of a SQLite file, each making calls
//! with idempotency keys of its own (`r{round}c{caller}s{seq}`), and prints `start {key}
//! {amount}` before each call and `ack {key} {amount} {reply}` once it is acknowledged.

#[path = "../../shared/tally.rs"]
mod tally;
use tally::Tally;

use std::io::Write;

use durable_runtime::Runtime;
use durable_sqlx::SqliteStore;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut args = std::env::args().skip(1);
    let (path, round) = match (args.next(), args.next()) {
        (Some(path), Some(round)) => (path, round),
        _ => panic!("usage: idem_child <database file> <round>"),
    };
    let store = SqliteStore::open(&path).await.expect("open SQLite");
    let rt = Runtime::new(store);
    let mut callers = tokio::task::JoinSet::new();
    for caller in 0..4u64 {
        let (rt, round) = (rt.clone(), round.clone());
        callers.spawn(async move {
            for seq in 0u64.. {
                let key = format!("r{round}c{caller}s{seq}");
                let amount = 1 + caller * 1_000 + seq;
                print_line(&format!("start {key} {amount}"));
                let reply = Tally::with(&rt)
                    .idempotency_key(&key)
                    .add("t", key.clone(), amount)
                    .await;
                match reply {
                    Ok(reply) => print_line(&format!("ack {key} {amount} {reply}")),
                    Err(error) => return error.to_string(),
                }
            }
            unreachable!("the sequence never ends")
        });
    }
    // Callers stop only on an error, which ends the run.
    if let Some(stopped) = callers.join_next().await {
        panic!("a caller stopped: {stopped:?}");
    }
}

fn print_line(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").expect("stdout");
    out.flush().expect("stdout");
}
