//! An HTTP gateway for durable objects: the handlers of the types a runtime exposes
//! (`#[durable_object(expose)]`, [`RuntimeBuilder::expose`](durable_runtime::RuntimeBuilder::expose))
//! become callable from any language, and their objects can be inspected, listed, deleted and
//! given alarms over HTTP.
//!
//! ```no_run
//! use durable_runtime::{durable_object, MemoryStorage, Runtime};
//! use durable_server::ServerConfig;
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
//! # #[tokio::main] async fn main() -> std::io::Result<()> {
//! let runtime = Runtime::builder(MemoryStorage::new()).expose::<Counter>().build();
//! let config = ServerConfig::load("durable.toml").expect("a valid configuration");
//! // curl -X POST localhost:8080/v1/objects/Counter/u1/call/increment \
//! //      -H "Authorization: Bearer $TOKEN" -d '{"by": 5}'   →   {"result":5}
//! durable_server::serve(runtime, config).await
//! # }
//! ```
//!
//! - [`router`]: the gateway as an `axum` [`Router`](axum::Router), to serve yourself or
//!   merge into your own application;
//! - [`serve`] / [`serve_with_shutdown`]: serve it, stopping gracefully;
//! - [`ServerConfig`]: bind address, timeouts, body limit and [`auth`] (deny by default);
//! - [`ApiError`] / [`ErrorCode`]: the one error body and the mapping table of every failure;
//! - [`model`]: the JSON bodies, shared with clients;
//! - [`audit`], [`metrics`]: the audit trail and `/metrics`;
//! - [`client`]: a Rust client of the gateway;
//! - [`cluster`]: cluster mode: the internal listener calls are forwarded to, and the HTTP/2
//!   client that forwards them;
//! - [`cli`]: the command line of your own server binary (`serve`, `objects`, `alarms`, ...),
//!   which is three lines: `durable_server::cli::run(|store| Runtime::builder(store).expose::<Counter>())`.
//!
//! Routes (all under `/v1`, and without the prefix as aliases):
//!
//! | route | reply |
//! |---|---|
//! | `POST /v1/objects/{type}/{id}/call/{handler}` | `{"result": ...}` |
//! | `GET /v1/objects/{type}/{id}` | status, state, version, alarms |
//! | `GET /v1/objects?type=&status=&cursor=&limit=` | a page of objects |
//! | `DELETE /v1/objects/{type}/{id}` | `{"deleted": bool}` |
//! | `GET`/`POST /v1/objects/{type}/{id}/alarms` | the alarms / the alarm set |
//! | `DELETE /v1/objects/{type}/{id}/alarms/{name}` | `{"cancelled": bool}` |
//! | `GET /v1/alarms/dead`, `POST /v1/alarms/dead/requeue` | dead alarms |
//! | `GET /v1/types` (or `/v1/objects/definitions`) | the exposed types |
//! | `POST /v1/fsm/{name}`, `POST /v1/fsm/signal` | FSM instances inserted and signalled (with [`ServerConfig::with_fsm`]) |
//! | `GET /v1/fsm/{id}`, `GET /v1/fsm?name=&status=&after=&limit=` | an FSM instance, a page of them |
//! | `GET /openapi.json`, `/metrics`, `/healthz`, `/readyz` | the server |
//! | `GET /console/` | the operators' console (a page over the routes above) |
#![deny(missing_docs)]

pub mod audit;
pub mod auth;
pub mod cli;
pub mod client;
pub mod cluster;
mod config;
mod console;
mod drain;
mod error;
pub mod metrics;
pub mod model;
mod openapi;
mod routes;
mod serve;

use std::sync::Arc;

use durable_runtime::Runtime;

pub use config::{ConfigError, ServerConfig};
pub use error::{ApiError, ApiErrorBody, ErrorCode, ErrorEnvelope, RETRY_AFTER};
pub use serve::{serve, serve_cluster_with_shutdown, serve_with_shutdown, shutdown_signal};

use crate::auth::{Authorizer, TokenAuthorizer};

/// The gateway over `runtime` as an `axum` router, authorizing requests with the
/// configuration's principals ([`TokenAuthorizer`]).
///
/// Serve it yourself or merge it into your own application; [`serve`] does both the serving
/// and the graceful shutdown. Also start
/// [`audit::spawn_lifecycle_audit`] once per runtime if you do not use `serve`. The routes
/// are fixed when the router is built: expose every type before.
///
/// # Examples
///
/// ```
/// use durable_runtime::{MemoryStorage, Runtime};
/// use durable_server::ServerConfig;
///
/// let runtime = Runtime::new(MemoryStorage::new());
/// let app = axum::Router::new()
///     .route("/hello", axum::routing::get(|| async { "hello" }))
///     .merge(durable_server::router(runtime, &ServerConfig::default()));
/// # drop(app);
/// ```
pub fn router(runtime: Runtime, config: &ServerConfig) -> axum::Router {
    router_with_authorizer(
        runtime,
        config,
        Arc::new(TokenAuthorizer::new(&config.auth)),
    )
}

/// [`router`] with another [`Authorizer`] (JWT, a proxy's header...) instead of the
/// configuration's principals. `config.auth.public` still decides which of `/metrics` and
/// `/openapi.json` are public.
///
/// # Examples
///
/// ```
/// use std::sync::Arc;
/// use durable_runtime::{MemoryStorage, Runtime};
/// use durable_server::auth::{AuthConfig, TokenAuthorizer};
/// use durable_server::ServerConfig;
///
/// let authorizer = TokenAuthorizer::new(&AuthConfig { disabled: true, ..AuthConfig::default() });
/// let runtime = Runtime::new(MemoryStorage::new());
/// let app = durable_server::router_with_authorizer(runtime, &ServerConfig::default(), Arc::new(authorizer));
/// # drop(app);
/// ```
pub fn router_with_authorizer(
    runtime: Runtime,
    config: &ServerConfig,
    authorizer: Arc<dyn Authorizer>,
) -> axum::Router {
    routes::build(runtime, config, authorizer, drain::Drain::default())
}

/// The OpenAPI 3.1 document of a gateway over `runtime` with `config`, as `/openapi.json`
/// serves it: the fixed routes and one path per exposed type and handler, its request body,
/// output and error described by the handler's JSON schemas (`schemars`: a type that does not
/// implement `JsonSchema` is described as any JSON).
///
/// # Examples
///
/// ```
/// use durable_runtime::{MemoryStorage, Runtime};
/// use durable_server::ServerConfig;
///
/// let runtime = Runtime::new(MemoryStorage::new());
/// let document = durable_server::openapi_document(&runtime, &ServerConfig::default());
/// assert_eq!(document["openapi"], "3.1.0");
/// assert!(document["paths"]["/v1/objects/{type}/{id}/call/{handler}"]["post"].is_object());
/// ```
pub fn openapi_document(runtime: &Runtime, config: &ServerConfig) -> serde_json::Value {
    openapi::document(&routes::Catalog::new(runtime), config)
}
