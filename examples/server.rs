//! The example objects served over HTTP: the counter and the patterns (rate limiter, lock,
//! sessions, sharded counter, alarm queue), exposed on a gateway, state in an SQLite file.
//!
//! ```text
//! cargo run -p durable-examples --example server -- serve --config examples/server.toml
//! curl -X POST http://127.0.0.1:8080/v1/objects/Counter/user-1/call/increment \
//!     -H 'Authorization: Bearer dev-token' -d '{"by": 5}'
//! ```
//!
//! The same binary is the command line of its objects, through the gateway or directly on the
//! database (`server.db` in the working directory unless `--database-url` says otherwise):
//!
//! ```text
//! cargo run -p durable-examples --example server -- types
//! cargo run -p durable-examples --example server -- objects get Counter user-1
//! cargo run -p durable-examples --example server -- objects list Counter \
//!     --gateway http://127.0.0.1:8080 --token dev-token --output json
//! ```

use std::process::ExitCode;

use durable_runtime::Runtime;

// The objects of the other examples, each file included whole; their own `main`s and helpers
// are not used here.
#[allow(dead_code)]
#[path = "alarm_queue.rs"]
mod alarm_queue;
#[allow(dead_code)]
#[path = "counter.rs"]
mod counter;
#[allow(dead_code)]
#[path = "lock.rs"]
mod lock;
#[allow(dead_code)]
#[path = "rate_limiter.rs"]
mod rate_limiter;
#[allow(dead_code)]
#[path = "sessions.rs"]
mod sessions;
#[allow(dead_code)]
#[path = "sharded_counter.rs"]
mod sharded_counter;

fn main() -> ExitCode {
    durable_server::cli::App::new(|store| {
        Runtime::builder(store)
            .expose::<counter::Counter>()
            .expose::<rate_limiter::RateLimiter>()
            .expose::<lock::Lock>()
            .expose::<sessions::Session>()
            .expose::<sharded_counter::CounterShard>()
            .expose::<sharded_counter::ShardedCounter>()
            .expose::<alarm_queue::EventQueue>()
    })
    .default_database_url("sqlite://server.db")
    .run()
}
