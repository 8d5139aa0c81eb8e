//! Counters that survive restarts.
//!
//! Increments a `Counter` for a few ids and prints the values. State lives in `counter.db`
//! (embedded SQLite) in the working directory, so a second run continues the counts.
//!
//! ```text
//! cargo run -p durable-examples --example counter
//! cargo run -p durable-examples --example counter -- --postgres                # DATABASE_URL
//! cargo run -p durable-examples --example counter -- --database-url postgres://postgres@127.0.0.1/test
//! ```

// ANCHOR: object
use durable_runtime::{Runtime, durable_object};

/// A counter per id.
#[durable_object(hibernate_after = "5m")]
pub struct Counter {
    #[field(default = 0)]
    count: i64,
}

#[durable_object(expose)]
impl Counter {
    /// Adds `by` and returns the new count (which stops at the limits of `i64` rather than
    /// overflow: any `by` a caller sends over HTTP is answered).
    #[handler]
    fn handle_increment(&mut self, by: i64) -> i64 {
        self.count = self.count.saturating_add(by);
        self.count
    }

    /// The current count (read-only: never writes).
    #[handler]
    fn handle_get(&self) -> i64 {
        self.count
    }
}
// ANCHOR_END: object

/// Where the state lives, from the command line.
enum Backend {
    Sqlite(String),
    Postgres(String),
}

fn backend_from_args() -> Result<Backend, String> {
    let mut args = std::env::args().skip(1);
    let mut backend = Backend::Sqlite("counter.db".to_owned());
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--postgres" => {
                let url = std::env::var("DATABASE_URL")
                    .map_err(|_| "--postgres needs DATABASE_URL to be set".to_owned())?;
                backend = Backend::Postgres(url);
            }
            "--database-url" => {
                let url = args.next().ok_or("--database-url needs a URL")?;
                backend = if url.starts_with("postgres") {
                    Backend::Postgres(url)
                } else {
                    Backend::Sqlite(url)
                };
            }
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    Ok(backend)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // ANCHOR: runtime
    let rt = match backend_from_args()? {
        Backend::Sqlite(path) => {
            println!("storage: SQLite file {path}");
            Runtime::new(durable_sqlx::SqliteStore::open(&path).await?)
        }
        Backend::Postgres(url) => {
            println!("storage: Postgres");
            Runtime::new(durable_sqlx::PostgresStore::connect(&url).await?)
        }
    };
    for (id, by) in [("user:alice", 1), ("user:bob", 2), ("user:carol", 3)] {
        let count = Counter::increment(&rt, id, by).await?;
        println!("{id} -> {count}");
    }
    // ANCHOR_END: runtime
    let total = Counter::get(&rt, "user:alice").await?
        + Counter::get(&rt, "user:bob").await?
        + Counter::get(&rt, "user:carol").await?;
    println!("total across counters: {total}");
    rt.shutdown().await;
    Ok(())
}
