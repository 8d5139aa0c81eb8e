//! Stand-in for the gateway's `ServerConfig`, `router`, `serve` and `serve_with_shutdown`,
//! with their signatures, so that the command line's `serve`, the client's tests and the
//! example server run before the gateway's own modules are in this tree. The gateway's modules
//! replace this file whole.
//!
//! It answers the `/v1` routes through the command line's direct operations (so an object's
//! status is always `stored`), checks bearer tokens against `tokens_sha256` with per-type and
//! per-op grants, and serves a minimal OpenAPI document.

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path as UrlPath, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use durable_runtime::Runtime;
use serde::Deserialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::cli::args::{AlarmsCommand, ObjectsCommand, Operation, OutputFormat};
use crate::cli::direct::Direct;
use crate::client::{ApiErrorBody, ErrorReply, ObjectStatus};

/// The gateway's configuration (stand-in: `bind`, `call_timeout`, `body_limit`,
/// `shutdown_grace`, `public`, `[[principals]]`, `auth.disabled`).
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Where `serve` listens.
    pub bind: SocketAddr,
    /// The longest a call may take.
    pub call_timeout: Duration,
    /// The largest request body.
    pub body_limit: usize,
    /// How long in-flight requests may finish after a shutdown signal.
    pub shutdown_grace: Duration,
    auth: Auth,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Auth {
    #[serde(default)]
    disabled: bool,
    #[serde(default)]
    public: Vec<String>,
    #[serde(default)]
    principals: Vec<Principal>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Principal {
    #[allow(dead_code)]
    name: String,
    tokens_sha256: Vec<String>,
    #[serde(default)]
    grants: Vec<Grant>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Grant {
    types: Vec<String>,
    #[serde(default)]
    handlers: Vec<String>,
    ops: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    bind: Option<SocketAddr>,
    call_timeout: Option<String>,
    body_limit: Option<usize>,
    shutdown_grace: Option<String>,
    #[serde(default)]
    public: Vec<String>,
    #[serde(default)]
    principals: Vec<Principal>,
    #[serde(default)]
    auth: RawAuth,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAuth {
    #[serde(default)]
    disabled: bool,
}

/// Why a configuration was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The TOML is invalid.
    #[error("invalid configuration: {0}")]
    Invalid(String),
}

impl ServerConfig {
    /// Parses a configuration; every key is optional.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Invalid`] for bad TOML or values.
    pub fn from_toml_str(text: &str) -> Result<Self, ConfigError> {
        let raw: RawConfig =
            toml::from_str(text).map_err(|error| ConfigError::Invalid(error.to_string()))?;
        let duration = |text: Option<String>, default| match text {
            Some(text) => humantime::parse_duration(&text)
                .map_err(|error| ConfigError::Invalid(error.to_string())),
            None => Ok(default),
        };
        Ok(Self {
            bind: raw.bind.unwrap_or(SocketAddr::from(([127, 0, 0, 1], 8080))),
            call_timeout: duration(raw.call_timeout, Duration::from_secs(30))?,
            body_limit: raw.body_limit.unwrap_or(1 << 20),
            shutdown_grace: duration(raw.shutdown_grace, Duration::from_secs(30))?,
            auth: Auth {
                disabled: raw.auth.disabled,
                public: raw.public,
                principals: raw.principals,
            },
        })
    }

    /// Reads and parses a configuration file.
    ///
    /// # Errors
    ///
    /// [`ConfigError`].
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_toml_str(&text)
    }
}

struct Gateway {
    runtime: Runtime,
    auth: Auth,
    call_timeout: Duration,
}

type Shared = State<Arc<Gateway>>;

/// The gateway's routes over `runtime`.
pub fn router(runtime: Runtime, config: &ServerConfig) -> Router {
    let gateway = Arc::new(Gateway {
        runtime,
        auth: config.auth.clone(),
        call_timeout: config.call_timeout,
    });
    Router::new()
        .route("/v1/objects/{type}/{id}/call/{handler}", post(call))
        .route(
            "/v1/objects/{type}/{id}",
            get(get_object).delete(delete_object),
        )
        .route("/v1/objects", get(list_objects))
        .route(
            "/v1/objects/{type}/{id}/alarms",
            get(list_alarms).post(set_alarm),
        )
        .route(
            "/v1/objects/{type}/{id}/alarms/{name}",
            delete(cancel_alarm),
        )
        .route("/v1/alarms/dead", get(dead_alarms))
        .route("/v1/alarms/dead/requeue", post(requeue))
        .route("/v1/types", get(types))
        .route("/openapi.json", get(openapi))
        .route("/v1/openapi.json", get(openapi))
        .route(
            "/healthz",
            get(|| async { axum::Json(json!({"status": "ok"})) }),
        )
        .route(
            "/readyz",
            get(|| async { axum::Json(json!({"status": "ready"})) }),
        )
        .fallback(|| async { error(404, "not_found", "no such route") })
        .layer(DefaultBodyLimit::max(config.body_limit))
        .with_state(gateway)
}

/// Binds `config.bind` and serves until SIGTERM or Ctrl-C.
///
/// # Errors
///
/// When the address cannot be bound or serving fails.
pub async fn serve(runtime: Runtime, config: ServerConfig) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(config.bind).await?;
    tracing::info!(address = %listener.local_addr()?, "gateway listening");
    serve_with_shutdown(runtime, config, listener, shutdown_signal()).await
}

/// Serves on `listener` until `shutdown` completes, then shuts the runtime down.
///
/// # Errors
///
/// When serving fails.
pub async fn serve_with_shutdown(
    runtime: Runtime,
    config: ServerConfig,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = router(runtime.clone(), &config);
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await;
    runtime.shutdown().await;
    served
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
}

/// Runs one operation as the command line runs it on a database, with writes allowed.
async fn run(runtime: Runtime, operation: Operation) -> Result<Value, (u16, ApiErrorBody)> {
    let store = Arc::clone(runtime.storage());
    let direct = Direct {
        runtime: Some(runtime),
        database: None,
        store,
        offline: true,
    };
    match direct.run(operation).await {
        Ok(reply) => {
            let mut json = Vec::new();
            reply
                .write(OutputFormat::Json, &mut json)
                .map_err(|error| (500, body("internal", &error.to_string())))?;
            serde_json::from_slice(&json)
                .map_err(|error| (500, body("internal", &error.to_string())))
        }
        Err(failure) => Err((failure.status.unwrap_or(500), *failure.error)),
    }
}

fn body(code: &str, message: &str) -> ApiErrorBody {
    ApiErrorBody {
        code: code.to_owned(),
        message: message.to_owned(),
        retryable: false,
        details: Value::Null,
    }
}

fn error(status: u16, code: &str, message: &str) -> Response {
    let body = ErrorReply {
        error: body(code, message),
    };
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, axum::Json(body)).into_response();
    if status == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            "www-authenticate",
            "Bearer".parse().expect("a valid header"),
        );
    }
    response
}

impl Gateway {
    /// Checks the bearer token's grant for `op` on `type_name` (and `handler` for calls).
    #[allow(clippy::result_large_err)]
    fn authorize(
        &self,
        headers: &HeaderMap,
        op: &str,
        type_name: Option<&str>,
        handler: Option<&str>,
    ) -> Result<(), Response> {
        if self.auth.disabled || (op == "openapi" && self.auth.public.iter().any(|p| p == op)) {
            return Ok(());
        }
        let op = if op == "openapi" { "admin" } else { op };
        let token = headers
            .get("authorization")
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "));
        let Some(token) = token else {
            return Err(error(401, "unauthenticated", "a bearer token is required"));
        };
        let hash: String = Sha256::digest(token.as_bytes())
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        let Some(principal) = self
            .auth
            .principals
            .iter()
            .find(|principal| principal.tokens_sha256.contains(&hash))
        else {
            return Err(error(401, "unauthenticated", "unknown token"));
        };
        let any = |list: &[String], name: Option<&str>| {
            name.is_none_or(|name| list.iter().any(|item| item == "*" || item == name))
        };
        let granted = principal.grants.iter().any(|grant| {
            grant.ops.iter().any(|granted| granted == op)
                && any(&grant.types, type_name)
                && any(&grant.handlers, handler)
        });
        if granted {
            Ok(())
        } else {
            Err(error(403, "forbidden", "the token has no grant for this"))
        }
    }

    async fn run(&self, operation: Operation) -> Response {
        match tokio::time::timeout(self.call_timeout, run(self.runtime.clone(), operation)).await {
            Ok(Ok(value)) => axum::Json(value).into_response(),
            Ok(Err((status, body))) => {
                let status =
                    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                (status, axum::Json(ErrorReply { error: body })).into_response()
            }
            Err(_) => error(504, "timeout", "the call timed out: its outcome is unknown"),
        }
    }
}

async fn call(
    State(gateway): Shared,
    UrlPath((type_name, id, handler)): UrlPath<(String, String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(refused) = gateway.authorize(&headers, "call", Some(&type_name), Some(&handler)) {
        return refused;
    }
    let arguments = if body.is_empty() {
        "{}".to_owned()
    } else {
        String::from_utf8_lossy(&body).into_owned()
    };
    gateway
        .run(Operation::Objects(ObjectsCommand::Call {
            type_name,
            id,
            handler,
            arguments: Some(arguments),
        }))
        .await
}

async fn get_object(
    State(gateway): Shared,
    UrlPath((type_name, id)): UrlPath<(String, String)>,
    headers: HeaderMap,
) -> Response {
    if let Err(refused) = gateway.authorize(&headers, "read", Some(&type_name), None) {
        return refused;
    }
    gateway
        .run(Operation::Objects(ObjectsCommand::Get { type_name, id }))
        .await
}

async fn delete_object(
    State(gateway): Shared,
    UrlPath((type_name, id)): UrlPath<(String, String)>,
    headers: HeaderMap,
) -> Response {
    if let Err(refused) = gateway.authorize(&headers, "delete", Some(&type_name), None) {
        return refused;
    }
    gateway
        .run(Operation::Objects(ObjectsCommand::Delete { type_name, id }))
        .await
}

#[derive(Deserialize)]
struct ListQuery {
    #[serde(alias = "class", rename = "type")]
    type_name: Option<String>,
    status: Option<String>,
    cursor: Option<String>,
    limit: Option<usize>,
}

async fn list_objects(
    State(gateway): Shared,
    Query(query): Query<ListQuery>,
    headers: HeaderMap,
) -> Response {
    let Some(type_name) = query.type_name else {
        return error(
            400,
            "invalid_request",
            "the query parameter `type` is required",
        );
    };
    if let Err(refused) = gateway.authorize(&headers, "list", Some(&type_name), None) {
        return refused;
    }
    let status = match query
        .status
        .map(|status| status.parse::<ObjectStatus>())
        .transpose()
    {
        Ok(status) => status,
        Err(unknown) => return error(400, "invalid_request", &format!("{unknown}")),
    };
    gateway
        .run(Operation::Objects(ObjectsCommand::List {
            type_name,
            status,
            cursor: query.cursor,
            limit: query.limit.unwrap_or(100),
        }))
        .await
}

async fn list_alarms(
    State(gateway): Shared,
    UrlPath((type_name, id)): UrlPath<(String, String)>,
    headers: HeaderMap,
) -> Response {
    if let Err(refused) = gateway.authorize(&headers, "read", Some(&type_name), None) {
        return refused;
    }
    gateway
        .run(Operation::Alarms(AlarmsCommand::List { type_name, id }))
        .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SetAlarm {
    name: String,
    fire_at: Option<String>,
    delay: Option<String>,
}

async fn set_alarm(
    State(gateway): Shared,
    UrlPath((type_name, id)): UrlPath<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(refused) = gateway.authorize(&headers, "alarms", Some(&type_name), None) {
        return refused;
    }
    let Ok(body) = serde_json::from_slice::<SetAlarm>(&body) else {
        return error(
            400,
            "invalid_request",
            "expected {\"name\", \"fire_at\" | \"delay\"}",
        );
    };
    let when = match (body.fire_at, body.delay) {
        (Some(time), None) => humantime::parse_rfc3339_weak(&time)
            .ok()
            .map(|time| (Some(time), None)),
        (None, Some(delay)) => humantime::parse_duration(&delay)
            .ok()
            .map(|delay| (None, Some(delay))),
        _ => None,
    };
    let Some(when) = when else {
        return error(
            400,
            "invalid_request",
            "give exactly one of fire_at and delay",
        );
    };
    gateway
        .run(Operation::Alarms(AlarmsCommand::Set {
            type_name,
            id,
            name: body.name,
            fire_at: when.0,
            delay: when.1,
        }))
        .await
}

async fn cancel_alarm(
    State(gateway): Shared,
    UrlPath((type_name, id, name)): UrlPath<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    if let Err(refused) = gateway.authorize(&headers, "alarms", Some(&type_name), None) {
        return refused;
    }
    gateway
        .run(Operation::Alarms(AlarmsCommand::Cancel {
            type_name,
            id,
            name,
        }))
        .await
}

#[derive(Deserialize)]
struct DeadQuery {
    #[serde(rename = "type")]
    type_name: Option<String>,
    cursor: Option<String>,
    limit: Option<usize>,
}

async fn dead_alarms(
    State(gateway): Shared,
    Query(query): Query<DeadQuery>,
    headers: HeaderMap,
) -> Response {
    if let Err(refused) = gateway.authorize(&headers, "admin", query.type_name.as_deref(), None) {
        return refused;
    }
    gateway
        .run(Operation::Alarms(AlarmsCommand::Dead {
            type_name: query.type_name,
            cursor: query.cursor,
            limit: query.limit.unwrap_or(100),
        }))
        .await
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RequeueBody {
    #[serde(rename = "type")]
    type_name: String,
    id: String,
    name: String,
}

async fn requeue(State(gateway): Shared, headers: HeaderMap, body: Bytes) -> Response {
    let Ok(body) = serde_json::from_slice::<RequeueBody>(&body) else {
        return error(
            400,
            "invalid_request",
            "expected {\"type\", \"id\", \"name\"}",
        );
    };
    if let Err(refused) = gateway.authorize(&headers, "admin", Some(&body.type_name), None) {
        return refused;
    }
    gateway
        .run(Operation::Alarms(AlarmsCommand::Requeue {
            type_name: body.type_name,
            id: body.id,
            name: body.name,
        }))
        .await
}

async fn types(State(gateway): Shared, headers: HeaderMap) -> Response {
    if let Err(refused) = gateway.authorize(&headers, "list", None, None) {
        return refused;
    }
    gateway.run(Operation::Types).await
}

async fn openapi(State(gateway): Shared, headers: HeaderMap) -> Response {
    if let Err(refused) = gateway.authorize(&headers, "openapi", None, None) {
        return refused;
    }
    let mut paths = serde_json::Map::new();
    for exposed in gateway.runtime.exposed_types() {
        for handler in exposed.handlers {
            let path = format!("/v1/objects/{}/{{id}}/call/{}", exposed.name, handler.name);
            paths.insert(
                path,
                json!({"post": {"operationId": format!("{}_{}", exposed.name, handler.name),
                    "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}],
                    "responses": {"200": {"description": "the handler's output"}}}}),
            );
        }
    }
    axum::Json(json!({
        "openapi": "3.1.0",
        "info": {"title": "durable gateway", "version": env!("CARGO_PKG_VERSION")},
        "paths": paths,
    }))
    .into_response()
}
