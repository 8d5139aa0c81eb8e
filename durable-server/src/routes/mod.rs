//! The gateway's routes: the shared state, the extractors that turn every failure into the
//! one error body, and the router that puts the handlers under `/v1` and the unversioned
//! aliases.

pub(crate) mod alarms;
pub(crate) mod cluster;
pub(crate) mod fsm;
pub(crate) mod fsm_control;
pub(crate) mod kv;
pub(crate) mod meta;
pub(crate) mod objects;
pub(crate) mod operate;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, FromRequestParts, MatchedPath};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use durable_runtime::{CallByNameError, ExposedHandler, ExposedType, Runtime, TypeDescription};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio_util::sync::CancellationToken;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;
use tower_http::trace::TraceLayer;

use crate::audit::Mutation;
use crate::auth::{Action, Authorizer, Op, Principal, PublicEndpoint};
use crate::config::ServerConfig;
use crate::drain::Drain;
use crate::error::{ApiError, ErrorEnvelope};

/// What every handler reaches: the runtime and the gateway's settings.
#[derive(Clone)]
pub(crate) struct AppState(Arc<Shared>);

pub(crate) struct Shared {
    pub(crate) runtime: Runtime,
    pub(crate) catalog: Catalog,
    /// The FSM engine of the `/fsm` routes, if the server was given one.
    pub(crate) fsm: Option<durable_runtime::fsm::Engine>,
    authorizer: Arc<dyn Authorizer>,
    pub(crate) public_metrics: bool,
    pub(crate) public_openapi: bool,
    call_timeout: Duration,
    /// The OpenAPI document, serialized once.
    pub(crate) openapi: Bytes,
    pub(crate) metrics: Option<PrometheusHandle>,
    /// Cancelled when the server starts shutting down.
    pub(crate) shutdown: CancellationToken,
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

impl Shared {
    /// `Ok` if `caller` may perform `action`, else `403 forbidden`.
    pub(crate) fn authorize(
        &self,
        caller: &Principal,
        action: &Action<'_>,
    ) -> Result<(), ApiError> {
        if self.authorizer.authorize(caller, action) {
            Ok(())
        } else {
            Err(ApiError::forbidden())
        }
    }

    /// `Ok` for a request to a server route that may be public: at once if it is, else once
    /// its caller is authenticated (`401`) and allowed to administer the server (`403`).
    pub(crate) async fn admin_unless_public(
        &self,
        headers: &axum::http::HeaderMap,
        public: bool,
    ) -> Result<(), ApiError> {
        if public {
            return Ok(());
        }
        let caller = self.authorizer.authenticate(headers).await?;
        self.authorize(&caller, &Action::on_server(Op::Admin))
    }

    /// Runs `work` once `caller` is allowed `action`: `403 forbidden` otherwise, `504 timeout`
    /// past the call timeout.
    pub(crate) async fn authorized<T>(
        &self,
        caller: &Principal,
        action: &Action<'_>,
        work: impl Future<Output = Result<T, ApiError>>,
    ) -> Result<T, ApiError> {
        self.authorize(caller, action)?;
        self.bounded(work).await
    }

    /// Runs `work` against the runtime, answering `504 timeout` if it takes longer than the
    /// configured call timeout.
    pub(crate) async fn bounded<T>(
        &self,
        work: impl Future<Output = Result<T, ApiError>>,
    ) -> Result<T, ApiError> {
        tokio::time::timeout(self.call_timeout, work)
            .await
            .unwrap_or_else(|_| Err(ApiError::timeout(self.call_timeout)))
    }
}

/// The exposed types, looked up by name on every request.
pub(crate) struct Catalog {
    types: Vec<ExposedType>,
    /// What the runtime describes of its types (the exposed ones among them).
    descriptions: Vec<TypeDescription>,
}

impl Catalog {
    pub(crate) fn new(runtime: &Runtime) -> Self {
        Self {
            types: runtime.exposed_types(),
            descriptions: runtime.describe_types(),
        }
    }

    pub(crate) fn types(&self) -> &[ExposedType] {
        &self.types
    }

    /// The description of the type `name`, if the runtime has it.
    pub(crate) fn description(&self, name: &str) -> Option<&TypeDescription> {
        self.descriptions
            .iter()
            .find(|description| description.name == name)
    }

    /// The exposed type `name`, or `404 unknown_type`.
    pub(crate) fn get(&self, name: &str) -> Result<&ExposedType, ApiError> {
        self.types
            .iter()
            .find(|exposed| exposed.name == name)
            .ok_or_else(|| ApiError::unknown_type(name))
    }

    /// The exposed handler `handler` of `type_name`, or `404 unknown_type` /
    /// `404 unknown_handler`.
    pub(crate) fn handler(
        &self,
        type_name: &str,
        handler: &str,
    ) -> Result<&ExposedHandler, ApiError> {
        self.get(type_name)?
            .handlers
            .iter()
            .find(|exposed| exposed.name == handler)
            .ok_or_else(|| {
                CallByNameError::UnknownHandler {
                    type_name: type_name.to_owned(),
                    handler: handler.to_owned(),
                }
                .into()
            })
    }
}

/// The principal a request is authenticated as (`401` otherwise).
pub(crate) struct Caller(pub(crate) Principal);

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        Ok(Self(state.authorizer.authenticate(&parts.headers).await?))
    }
}

/// The caller of a mutating request and the route it came by: what its audit event names
/// besides the object.
pub(crate) struct Audited {
    pub(crate) caller: Principal,
    route: MatchedPath,
}

impl Audited {
    /// The audit event of `action` on the object `(type_name, id)` (and its handler or alarm
    /// `name`).
    pub(crate) fn mutation<'a>(
        &'a self,
        action: &'static str,
        type_name: &'a str,
        id: &'a str,
        name: Option<&'a str>,
    ) -> Mutation<'a> {
        Mutation {
            action,
            principal: self.caller.name(),
            route: self.route.as_str(),
            type_name,
            id,
            name,
        }
    }
}

impl FromRequestParts<AppState> for Audited {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let Caller(caller) = Caller::from_request_parts(parts, state).await?;
        let route = MatchedPath::from_request_parts(parts, state)
            .await
            .map_err(|_| ApiError::internal("the request matched no route"))?;
        Ok(Self { caller, route })
    }
}

/// `axum::extract::Path` answering a bad path with the gateway's error body.
#[derive(axum::extract::FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub(crate) struct ApiPath<T>(pub(crate) T);

/// `axum::extract::Query` answering a bad query with the gateway's error body.
#[derive(axum::extract::FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub(crate) struct ApiQuery<T>(pub(crate) T);

/// A request body as JSON of type `T`: `400 invalid_request` if it does not decode, `413`
/// past the body limit.
pub(crate) fn json_body<T: serde::de::DeserializeOwned>(
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<T, ApiError> {
    let body = body?;
    serde_json::from_slice(&body)
        .map_err(|error| ApiError::invalid_request(format!("invalid request body: {error}")))
}

/// The path parameters naming an object, as the API documents them.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Path)]
#[expect(
    dead_code,
    reason = "documents the parameters; the routes take them as a tuple"
)]
pub(crate) struct ObjectPath {
    /// The object type
    #[param(rename = "type")]
    type_name: String,
    /// The object id
    id: String,
}

/// The refusals of a write through an object, as the API documents them.
#[derive(utoipa::IntoResponses)]
#[expect(dead_code, reason = "documents the responses; never built")]
pub(crate) enum WriteRefusals {
    /// Another writer committed first.
    #[response(
        status = 409,
        description = "`conflict`: another writer committed first"
    )]
    Conflict(ErrorEnvelope),
    /// The object's queue is full.
    #[response(
        status = 429,
        description = "`overloaded`",
        headers(("Retry-After" = u64, description = "Seconds to wait"))
    )]
    Overloaded(ErrorEnvelope),
}

/// The refusal of a request body past the body limit, as the API documents it.
#[derive(utoipa::IntoResponses)]
#[response(status = 413, description = "`body_too_large`")]
#[expect(dead_code, reason = "documents the response; never built")]
pub(crate) struct BodyTooLarge(ErrorEnvelope);

/// The default page size of the listings.
const DEFAULT_LIMIT: usize = 100;
/// The largest page size of the listings.
const MAX_LIMIT: usize = 1000;

/// The page size a listing's `limit` asks for: 1 to 1000, 100 if absent; `400
/// invalid_request` otherwise.
pub(crate) fn page_limit(limit: Option<usize>) -> Result<usize, ApiError> {
    let limit = limit.unwrap_or(DEFAULT_LIMIT);
    if (1..=MAX_LIMIT).contains(&limit) {
        Ok(limit)
    } else {
        Err(ApiError::invalid_request(format!(
            "`limit` must be between 1 and {MAX_LIMIT}"
        )))
    }
}

/// The routes of the API, mounted under `/v1` and at the root.
fn api() -> Router<AppState> {
    Router::new()
        .route("/objects", get(objects::list))
        .route("/objects/definitions", get(meta::types))
        .route(
            "/objects/{type}/{id}",
            get(objects::get).delete(objects::delete),
        )
        .route("/objects/{type}/{id}/call/{handler}", post(objects::call))
        .route("/objects/{type}/{id}/stop", post(operate::stop))
        .route("/objects/{type}/{id}/reload", post(operate::reload))
        .route("/objects/{type}/{id}/state", put(operate::replace_state))
        .route(
            "/objects/{type}/{id}/alarms",
            get(alarms::list).post(alarms::set),
        )
        .route("/objects/{type}/{id}/alarms/{name}", delete(alarms::cancel))
        .route("/objects/{type}/{id}/storage", get(kv::list))
        .route(
            "/objects/{type}/{id}/storage/{key}",
            get(kv::get).put(kv::put).delete(kv::delete),
        )
        .route("/alarms/dead", get(alarms::dead))
        .route("/alarms/dead/requeue", post(alarms::requeue))
        .route("/fsm", get(fsm::list))
        .route("/fsm/signal", post(fsm::signal))
        // One segment: an FSM name to insert into, an instance id to read.
        .route("/fsm/{segment}", get(fsm::get).post(fsm::insert))
        .route("/fsm/{segment}/cancel", post(fsm_control::cancel))
        .route("/fsm/queues/paused", get(fsm_control::paused))
        .route("/fsm/queues/{queue}/pause", post(fsm_control::pause))
        .route("/fsm/queues/{queue}/resume", post(fsm_control::resume))
        .route("/cluster/nodes", get(cluster::nodes))
        .route("/cluster/shards", get(cluster::shards))
        .route("/types", get(meta::types))
        .route("/openapi.json", get(meta::openapi))
        .method_not_allowed_fallback(meta::method_not_allowed)
}

/// The whole router over `runtime`.
pub(crate) fn build(
    runtime: Runtime,
    config: &ServerConfig,
    authorizer: Arc<dyn Authorizer>,
    drain: Drain,
) -> Router {
    let catalog = Catalog::new(&runtime);
    let openapi = crate::openapi::document(&catalog, config);
    let openapi = serde_json::to_vec(&openapi).expect("an OpenAPI document serializes to JSON");
    let state = AppState(Arc::new(Shared {
        runtime,
        catalog,
        fsm: config.fsm.clone(),
        authorizer,
        public_metrics: config.auth.is_public(PublicEndpoint::Metrics),
        public_openapi: config.auth.is_public(PublicEndpoint::Openapi),
        call_timeout: config.call_timeout,
        openapi: Bytes::from(openapi),
        metrics: crate::metrics::prometheus(),
        shutdown: drain.stopping().clone(),
    }));
    let console = if config.console {
        crate::console::routes()
    } else {
        Router::new()
    };
    Router::new()
        .nest("/v1", api())
        .merge(api())
        .merge(console)
        .route("/metrics", get(meta::metrics))
        .route("/healthz", get(meta::healthz))
        .route("/readyz", get(meta::readyz))
        .fallback(meta::not_found)
        .method_not_allowed_fallback(meta::method_not_allowed)
        .layer(DefaultBodyLimit::max(config.body_limit))
        // Inside `to_completion`: a request is waited for until it ends, even if its client
        // hung up; inside the metrics and traces, which count refusals too.
        .layer(axum::middleware::from_fn_with_state(
            drain,
            crate::drain::admit,
        ))
        .layer(CatchPanicLayer::custom(panicked))
        .layer(axum::middleware::from_fn(crate::metrics::track))
        .layer(TraceLayer::new_for_http())
        .layer(axum::middleware::from_fn(to_completion))
        .layer(SetSensitiveRequestHeadersLayer::new([AUTHORIZATION]))
        .with_state(state)
}

/// Runs each request to its end in a task of its own. A client that hangs up makes hyper
/// drop the request's future; a call it already queued still runs and commits in the object,
/// and without this its audit event, request metrics and trace would be lost with the future.
async fn to_completion(request: axum::extract::Request, next: axum::middleware::Next) -> Response {
    match tokio::spawn(next.run(request)).await {
        Ok(response) => response,
        // Panics are caught inside (`CatchPanicLayer`); one escaping it is re-raised here.
        Err(error) => std::panic::resume_unwind(error.into_panic()),
    }
}

/// A panic in the gateway's own code: the error body, without the panic's message.
fn panicked(_: Box<dyn std::any::Any + Send + 'static>) -> Response {
    tracing::error!("a request handler panicked");
    ApiError::internal("the server failed to handle the request").into_response()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use durable_runtime::{MemoryStorage, Runtime};
    use tokio_util::sync::CancellationToken;
    use tower::ServiceExt;

    use crate::ServerConfig;
    use crate::auth::TokenAuthorizer;

    #[tokio::test]
    async fn readiness_fails_once_the_server_is_stopping() {
        let config = ServerConfig::default();
        let stopping = CancellationToken::new();
        let authorizer = Arc::new(TokenAuthorizer::new(&config.auth));
        let runtime = Runtime::new(MemoryStorage::new());
        let app = super::build(
            runtime,
            &config,
            authorizer,
            crate::drain::Drain::new(stopping.clone()),
        );
        let readyz = || Request::get("/readyz").body(Body::empty()).unwrap();
        let ready = app.clone().oneshot(readyz()).await.unwrap();
        assert_eq!(ready.status(), StatusCode::OK);

        stopping.cancel();
        let stopping = app.oneshot(readyz()).await.unwrap();
        assert_eq!(stopping.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(stopping.headers()["retry-after"], "1");
        let body = axum::body::to_bytes(stopping.into_body(), 1024)
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["error"]["code"], "shutting_down");
    }
}
