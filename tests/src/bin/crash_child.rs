//! A process that increments a counter in a SQLite file as fast as it can and prints every
//! acknowledged value, to be killed with SIGKILL by the crash test.

use durable_runtime::{Runtime, durable_object};

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

    let path = std::env::args()
        .nth(1)
        .expect("usage: crash_child <database file>");
    let store = durable_sqlx::SqliteStore::open(&path)
        .await
        .expect("open SQLite");
    let rt = Runtime::new(store);
    let mut out = std::io::stdout().lock();
    loop {
        let value = CrashCounter::increment(&rt, "crash")
            .await
            .expect("increment");
        writeln!(out, "{value}").expect("stdout");
        out.flush().expect("stdout");
    }
}
