//! The internal listener's route: calls forwarded by other nodes, authenticated with the
//! cluster's shared secret, run here only if this node serves the object.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use durable_runtime::cluster::Route;
use durable_runtime::{CallByNameError, CallOptions, Error, Runtime};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::headers::{CallHeaders, SECRET};
use super::{ClusterSettings, INTERNAL_CALL_PATH};
use crate::error::{ApiError, ErrorCode};
use crate::model::CallReply;

/// The body of a forwarded call.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct InternalCall {
    /// The object's type.
    #[serde(rename = "type")]
    pub(crate) type_name: String,
    /// The object's id.
    pub(crate) id: String,
    /// The exposed handler.
    pub(crate) handler: String,
    /// The arguments by name.
    pub(crate) arguments: Value,
}

struct Internal {
    runtime: Runtime,
    settings: ClusterSettings,
}

/// The internal listener's router over `runtime`: `POST` [`INTERNAL_CALL_PATH`] runs a call
/// forwarded by another node if this node serves its object.
///
/// - A missing or wrong secret ([`SECRET_HEADER`](super::SECRET_HEADER)) is `401
///   unauthenticated`; nothing runs.
/// - A hop count ([`HOPS_HEADER`](super::HOPS_HEADER)) over `settings.hop_limit` is `508
///   hop_limit_exceeded`; nothing runs.
/// - An object this node does not serve is `421 misdirected`, with `details.owner` the address
///   of the owner this node believes in (or `null`); nothing runs.
/// - Otherwise the call runs here, waiting at most the caller's time left
///   ([`DEADLINE_HEADER`](super::DEADLINE_HEADER)), and is answered as the public call route
///   answers: `{"result": ...}` or its error body.
///
/// Serve it on its own address, reachable by the nodes only, over HTTP/2 (cleartext, prior
/// knowledge): [`serve`](crate::serve) does when [`ServerConfig::cluster`](crate::ServerConfig::cluster)
/// is set.
///
/// # Examples
///
/// ```
/// use durable_runtime::{MemoryStorage, Runtime};
/// use durable_server::cluster::{ClusterSecret, ClusterSettings, internal_router};
///
/// let runtime = Runtime::new(MemoryStorage::new());
/// let settings = ClusterSettings::new("node-1", "127.0.0.1:7100".parse().unwrap(), ClusterSecret::new("s"));
/// let app = internal_router(runtime, &settings);
/// # drop(app);
/// ```
pub fn internal_router(runtime: Runtime, settings: &ClusterSettings) -> Router {
    let state = Arc::new(Internal {
        runtime,
        settings: settings.clone(),
    });
    Router::new()
        .route(INTERNAL_CALL_PATH, post(call))
        .fallback(|| async { ApiError::not_found() })
        .with_state(state)
}

async fn call(State(state): State<Arc<Internal>>, headers: HeaderMap, body: Bytes) -> Response {
    let secret = headers
        .get(SECRET)
        .map_or(&[][..], |value| value.as_bytes());
    if !state.settings.secret.matches(secret) {
        return ApiError::new(
            ErrorCode::Unauthenticated,
            "the cluster secret is missing or wrong",
        )
        .into_response();
    }
    let meta = match CallHeaders::parse(&headers) {
        Ok(meta) => meta,
        Err(error) => return ApiError::invalid_request(error.to_string()).into_response(),
    };
    let limit = state.settings.hop_limit;
    if meta.hops > limit {
        tracing::warn!(
            hops = meta.hops,
            limit,
            "a forwarded call exceeded the hop limit"
        );
        return ApiError::new(
            ErrorCode::HopLimitExceeded,
            format!(
                "the call crossed {} nodes, more than the hop limit of {limit}; nothing was applied",
                meta.hops
            ),
        )
        .with_details(json!({"hops": meta.hops, "limit": limit}))
        .into_response();
    }
    let call: InternalCall = match serde_json::from_slice(&body) {
        Ok(call) => call,
        Err(error) => {
            return ApiError::invalid_request(format!("not a forwarded call: {error}"))
                .into_response();
        }
    };
    match state.runtime.route(&call.type_name, &call.id) {
        Route::Local => {}
        Route::Remote(owner) => return misdirected(Some(owner.to_string())),
        Route::Unavailable => return misdirected(None),
    }
    let mut options = CallOptions::new();
    if let Some(deadline) = meta.deadline {
        options = options.with_timeout(deadline);
    }
    if let Some(key) = meta.idempotency_key {
        options = options.with_idempotency_key(key);
    }
    let reply = state
        .runtime
        .call_here_by_name(
            &call.type_name,
            &call.id,
            &call.handler,
            call.arguments,
            &options,
        )
        .await;
    match reply {
        Ok(result) => Json(CallReply { result }).into_response(),
        // Admission raced a shard move: nothing ran.
        Err(CallByNameError::Runtime(Error::NotOwner { owner, .. })) => misdirected(owner),
        Err(error) => {
            let keyed = options.idempotency_key.is_some();
            let error = ApiError::from(error);
            match error.code() {
                ErrorCode::Timeout => error.with_retryable(keyed),
                _ => error,
            }
            .into_response()
        }
    }
}

/// `421 misdirected`, naming the owner this node believes in.
fn misdirected(owner: Option<String>) -> Response {
    ApiError::new(
        ErrorCode::Misdirected,
        "this node does not serve the object; nothing was applied",
    )
    .with_details(json!({"owner": owner}))
    .into_response()
}
