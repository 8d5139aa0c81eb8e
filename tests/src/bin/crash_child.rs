//! A process that increments a counter in a SQLite file as fast as it can and prints every
//! acknowledged value, to be killed with SIGKILL by the crash test. Its first line is
//! `pid <id>`, so that the test can kill it when it runs under a tracer.
//!
//! Usage: `crash_child <database file> [full|normal]` (the store's `synchronous` level,
//! `full` by default).

use durable_runtime::{Runtime, durable_object};
use durable_sqlx::{SqliteStore, Synchronous};

#[durable_object]
pub struct CrashCounter {
    count: u64,
}

#[durable_object]
impl CrashCounter {
    #[handler]
    fn handle_increment(&mut self) -> u64 {
        self.count += 1;
        self.count
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    use std::io::Write;

    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .expect("usage: crash_child <database file> [full|normal]");
    let synchronous = match args.next().as_deref() {
        None | Some("full") => Synchronous::Full,
        Some("normal") => Synchronous::Normal,
        Some(other) => panic!("unknown synchronous level {other}: use full or normal"),
    };
    let store = SqliteStore::builder(&path)
        .synchronous(synchronous)
        .open()
        .await
        .expect("open SQLite");
    let rt = Runtime::new(store);
    let mut out = std::io::stdout().lock();
    writeln!(out, "pid {}", std::process::id()).expect("stdout");
    loop {
        let value = CrashCounter::increment(&rt, "crash")
            .await
            .expect("increment");
        writeln!(out, "{value}").expect("stdout");
        out.flush().expect("stdout");
    }
}
