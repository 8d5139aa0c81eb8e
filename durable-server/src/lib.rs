//! Durable objects as a service: an HTTP gateway over a [`durable_runtime::Runtime`], a Rust
//! client of that gateway, and a command line for your own server binary and for the generic
//! `durable` binary.
//!
//! Your server binary is three lines:
//!
//! ```no_run
//! use std::process::ExitCode;
//! use durable_runtime::{durable_object, Runtime};
//!
//! #[durable_object]
//! pub struct Counter { count: i64 }
//!
//! #[durable_object(expose)]
//! impl Counter {
//!     #[handler]
//!     fn handle_increment(&mut self, by: i64) -> i64 { self.count += by; self.count }
//! }
//!
//! fn main() -> ExitCode {
//!     durable_server::cli::run(|store| Runtime::builder(store).expose::<Counter>())
//! }
//! ```
//!
//! and serves, calls, inspects and lists objects: `my-server serve --database-url
//! sqlite://app.db --config gateway.toml`, `my-server objects call Counter user-1 increment
//! '{"by": 5}' --gateway http://127.0.0.1:8080`.

#![deny(missing_docs)]

pub mod cli;
pub mod client;

// The gateway's `serve` and `ServerConfig` come from the server modules; until they are in
// this tree, a stand-in with the same signatures takes their place.
mod serve_standin;
pub use serve_standin::{ConfigError, ServerConfig, router, serve, serve_with_shutdown};
