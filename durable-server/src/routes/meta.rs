//! The server itself: exposed types, the OpenAPI document, metrics, health and readiness,
//! and the answers to unknown routes and methods.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};

use super::{AppState, Caller};
use crate::auth::{Action, Op};
use crate::error::{ApiError, ErrorCode, ErrorEnvelope};
use crate::model::{Health, TypeList, TypeView};

/// List the exposed types.
///
/// Those the caller may list, with their handlers (argument names and types, output and error
/// types), alarms, options and state fields (types and defaults).
#[utoipa::path(
    get,
    path = "/v1/types",
    operation_id = "list_types",
    tag = "types",
    responses(
        (status = 200, description = "The exposed types", body = TypeList),
    ),
)]
pub(crate) async fn types(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Json<TypeList>, ApiError> {
    let types: Vec<TypeView> = state
        .catalog
        .types()
        .iter()
        .filter(|exposed| {
            state
                .authorize(&caller, &Action::on_type(Op::List, exposed.name))
                .is_ok()
        })
        .map(|exposed| TypeView::described(exposed, state.catalog.description(exposed.name)))
        .collect();
    // Nothing listable: allowed only to a caller who may list every type.
    if types.is_empty() {
        state.authorize(&caller, &Action::on_server(Op::List))?;
    }
    Ok(Json(TypeList { types }))
}

/// This document.
///
/// The OpenAPI 3.1 document of this server: the fixed routes, and one path per exposed type
/// and handler.
#[utoipa::path(
    get,
    path = "/v1/openapi.json",
    operation_id = "openapi",
    tag = "server",
    responses(
        (status = 200, description = "The OpenAPI document", content_type = "application/json",
            body = Object),
    ),
)]
pub(crate) async fn openapi(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    state
        .admin_unless_public(&headers, state.public_openapi)
        .await?;
    Ok(with_content_type(state.openapi.clone(), "application/json"))
}

/// Metrics.
///
/// In the Prometheus text format.
#[utoipa::path(
    get,
    path = "/metrics",
    operation_id = "metrics",
    tag = "server",
    responses(
        (status = 200, description = "Prometheus text exposition format",
            content_type = "text/plain; version=0.0.4", body = String),
    ),
)]
pub(crate) async fn metrics(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    state
        .admin_unless_public(&headers, state.public_metrics)
        .await?;
    let handle = state.metrics.as_ref().ok_or_else(|| {
        ApiError::new(
            ErrorCode::NotFound,
            "metrics are off: the application installed another metrics recorder",
        )
    })?;
    handle.run_upkeep();
    Ok(with_content_type(
        handle.render(),
        "text/plain; version=0.0.4; charset=utf-8",
    ))
}

/// `body` as a response of the media type `content_type`.
fn with_content_type(body: impl IntoResponse, content_type: &'static str) -> Response {
    let mut response = body.into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// Liveness.
///
/// The process answers.
#[utoipa::path(
    get,
    path = "/healthz",
    operation_id = "healthz",
    tag = "server",
    security(()),
    responses(
        (status = 200, description = "The server is up", body = Health),
    ),
)]
pub(crate) async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".to_owned(),
    })
}

/// Readiness.
///
/// The server takes requests (`503 shutting_down` once it is stopping).
#[utoipa::path(
    get,
    path = "/readyz",
    operation_id = "readyz",
    tag = "server",
    security(()),
    responses(
        (status = 200, description = "The server takes requests", body = Health),
        (status = 503, description = "`shutting_down`", body = ErrorEnvelope,
            headers(("Retry-After" = u64, description = "Seconds to wait"))),
    ),
)]
pub(crate) async fn readyz(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    if state.shutdown.is_cancelled() {
        return Err(ApiError::shutting_down());
    }
    Ok(Json(Health {
        status: "ready".to_owned(),
    }))
}

/// Any path that is no route.
pub(crate) async fn not_found() -> ApiError {
    ApiError::not_found()
}

/// A route asked with a method it does not take.
pub(crate) async fn method_not_allowed() -> ApiError {
    ApiError::method_not_allowed()
}
