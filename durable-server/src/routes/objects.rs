//! Objects: call a handler, read, list and delete.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{MatchedPath, State};
use durable_runtime::storage::ObjectKey;
use durable_runtime::{Access, CallByNameError, Error, ObjectStatus, validate_id};
use futures_util::{StreamExt, TryStreamExt, stream};
use serde::Deserialize;
use serde_json::Value;
use utoipa::IntoParams;

use super::{ApiPath, ApiQuery, AppState, Caller};
use crate::audit::Mutation;
use crate::auth::{Action, Op};
use crate::error::{ApiError, ErrorCode, ErrorEnvelope};
use crate::model::{CallReply, Deleted, ObjectList, ObjectSummary, ObjectView, Status};

/// The default page size of `GET /objects`.
const DEFAULT_LIMIT: usize = 100;
/// The largest page size of `GET /objects`.
const MAX_LIMIT: usize = 1000;
/// How many stored ids one filtered listing examines at most: a filter that matches few
/// objects answers a short page and a cursor rather than scanning the whole table.
const SCAN_BUDGET: usize = 1000;
/// How many statuses of a page are asked for at once.
const STATUS_CONCURRENCY: usize = 16;

/// Call a handler of an object.
///
/// The body is a JSON object of arguments by name; an empty body is `{}`. The object is
/// started (or woken) if it is not live. A write handler's changes are committed before the
/// reply. The server never retries a call.
#[utoipa::path(
    post,
    path = "/v1/objects/{type}/{id}/call/{handler}",
    operation_id = "call",
    tag = "objects",
    params(
        ("type" = String, Path, description = "The object type"),
        ("id" = String, Path, description = "The object id (1 to 1024 bytes of UTF-8, no NUL)"),
        ("handler" = String, Path, description = "The handler"),
    ),
    request_body(
        content = Option<HashMap<String, Value>>,
        description = "The handler's arguments by name; an empty body is `{}`",
        content_type = "application/json",
    ),
    responses(
        (status = 200, description = "The handler's output", body = CallReply),
        (status = 409, description = "`conflict` (retryable) or `call_cycle`", body = ErrorEnvelope),
        (status = 413, description = "`body_too_large`", body = ErrorEnvelope),
        (status = 422, description = "`handler_error`: the handler's own error in `details`", body = ErrorEnvelope),
        (status = 429, description = "`overloaded`: the object's queue is full; retry after `Retry-After`", body = ErrorEnvelope,
            headers(("Retry-After" = u64, description = "Seconds to wait"))),
    ),
)]
pub(crate) async fn call(
    State(state): State<AppState>,
    Caller(caller): Caller,
    route: MatchedPath,
    ApiPath((type_name, id, handler)): ApiPath<(String, String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<CallReply>, ApiError> {
    let exposed = state.catalog.handler(&type_name, &handler);
    let writes = exposed
        .as_ref()
        .is_ok_and(|exposed| exposed.access == Access::Write);
    let audit = Mutation {
        action: "call",
        principal: caller.name(),
        route: route.as_str(),
        type_name: &type_name,
        id: &id,
        name: Some(&handler),
    };
    let result = async {
        state.authorize(&caller, &Action::call(&type_name, &handler))?;
        let exposed = exposed?;
        let arguments = arguments(exposed.name, &body?)?;
        let call = state
            .runtime
            .call_by_name(&type_name, &id, exposed.name, arguments);
        state
            .bounded(async { call.await.map_err(ApiError::from) })
            .await
    }
    .await;
    if writes {
        audit.record(&result);
    }
    result.map(|result| Json(CallReply { result }))
}

/// The JSON arguments object of a call: an empty body is `{}`, anything but an object is
/// refused (serde would take an array as positional arguments).
fn arguments(handler: &'static str, body: &[u8]) -> Result<Value, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Object(serde_json::Map::new()));
    }
    let bad = |message: String| {
        ApiError::from(CallByNameError::BadArguments {
            handler,
            path: ".".to_owned(),
            message,
        })
    };
    match serde_json::from_slice(body) {
        Ok(arguments @ Value::Object(_)) => Ok(arguments),
        Ok(_) => Err(bad("the arguments must be a JSON object".to_owned())),
        Err(error) => Err(bad(error.to_string())),
    }
}

/// Read an object.
///
/// Its status, its committed state and version, and its alarms. Does not start the object.
#[utoipa::path(
    get,
    path = "/v1/objects/{type}/{id}",
    operation_id = "get_object",
    tag = "objects",
    params(
        ("type" = String, Path, description = "The object type"),
        ("id" = String, Path, description = "The object id"),
    ),
    responses(
        (status = 200, description = "The object", body = ObjectView),
    ),
)]
pub(crate) async fn get(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath((type_name, id)): ApiPath<(String, String)>,
) -> Result<Json<ObjectView>, ApiError> {
    state.authorize(&caller, &Action::on_type(Op::Read, &type_name))?;
    let exposed = state.catalog.get(&type_name)?;
    validate_id(&id).map_err(Error::from)?;
    state
        .bounded(async {
            let runtime = &state.runtime;
            let status = runtime.status_by_name(exposed.name, &id).await?;
            let status = Status::of(status).ok_or_else(|| {
                ApiError::new(
                    ErrorCode::ObjectNotFound,
                    format!("no object `{id}` of type `{type_name}`"),
                )
            })?;
            let key = ObjectKey::new(exposed.name, id.as_str());
            let loaded = runtime.storage().load(&key).await;
            let stored = loaded
                .map_err(|source| Error::Storage { key, source })?
                .object();
            let (state_json, version) = match stored {
                Some(stored) => {
                    let json = serde_json::from_slice(&stored.state).map_err(|error| {
                        tracing::error!(%error, "a stored state is not JSON");
                        ApiError::new(
                            ErrorCode::StateDecodeFailed,
                            "the object's stored state could not be decoded",
                        )
                    })?;
                    (json, Some(stored.version))
                }
                None => (Value::Null, None),
            };
            let alarms = runtime.list_alarms_by_name(exposed.name, &id).await?;
            Ok(Json(ObjectView {
                type_name: exposed.name.to_owned(),
                id: id.clone(),
                status,
                state: state_json,
                version,
                alarms: alarms.iter().map(Into::into).collect(),
            }))
        })
        .await
}

/// Delete an object.
///
/// Its state and alarms go in one transaction, after the calls queued before it.
#[utoipa::path(
    delete,
    path = "/v1/objects/{type}/{id}",
    operation_id = "delete_object",
    tag = "objects",
    params(
        ("type" = String, Path, description = "The object type"),
        ("id" = String, Path, description = "The object id"),
    ),
    responses(
        (status = 200, description = "Whether a stored state existed", body = Deleted),
        (status = 409, description = "`conflict`: another writer committed first", body = ErrorEnvelope),
        (status = 429, description = "`overloaded`", body = ErrorEnvelope,
            headers(("Retry-After" = u64, description = "Seconds to wait"))),
    ),
)]
pub(crate) async fn delete(
    State(state): State<AppState>,
    Caller(caller): Caller,
    route: MatchedPath,
    ApiPath((type_name, id)): ApiPath<(String, String)>,
) -> Result<Json<Deleted>, ApiError> {
    let result = async {
        state.authorize(&caller, &Action::on_type(Op::Delete, &type_name))?;
        state
            .bounded(async {
                let deleted = state.runtime.delete_by_name(&type_name, &id).await?;
                Ok(Json(Deleted { deleted }))
            })
            .await
    }
    .await;
    Mutation {
        action: "delete",
        principal: caller.name(),
        route: route.as_str(),
        type_name: &type_name,
        id: &id,
        name: None,
    }
    .record(&result);
    result
}

/// The query of `GET /objects`.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListQuery {
    /// The object type (required; `class` is an alias).
    #[serde(rename = "type")]
    #[param(rename = "type")]
    type_name: Option<String>,
    /// Alias of `type`.
    class: Option<String>,
    /// Only objects in this status; without it, every stored object.
    status: Option<Status>,
    /// Where the page starts: the `next_cursor` of the previous page.
    cursor: Option<String>,
    /// How many objects per page, 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<usize>,
}

/// List the objects of a type.
///
/// By id, a page at a time: every stored object, or those in one status. A page filtered by
/// status may hold fewer objects than `limit` (even none) and still have a `next_cursor`.
#[utoipa::path(
    get,
    path = "/v1/objects",
    operation_id = "list_objects",
    tag = "objects",
    params(ListQuery),
    responses(
        (status = 200, description = "A page of objects", body = ObjectList),
    ),
)]
pub(crate) async fn list(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Json<ObjectList>, ApiError> {
    let type_name = match (&query.type_name, &query.class) {
        (Some(a), Some(b)) if a != b => {
            return Err(ApiError::invalid_request(
                "`type` and `class` name different types",
            ));
        }
        (Some(name), _) | (None, Some(name)) => name.as_str(),
        (None, None) => {
            return Err(ApiError::invalid_request(
                "the `type` query parameter is required",
            ));
        }
    };
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(ApiError::invalid_request(format!(
            "`limit` must be between 1 and {MAX_LIMIT}"
        )));
    }
    state.authorize(&caller, &Action::on_type(Op::List, type_name))?;
    let exposed = state.catalog.get(type_name)?;
    let runtime = &state.runtime;
    state
        .bounded(async {
            let mut objects = Vec::new();
            let mut cursor = query.cursor.clone();
            let mut scanned = 0;
            // Unfiltered: one page of ids. Filtered: pages of ids until the page is full,
            // the ids run out or the scan budget is spent.
            loop {
                let want = match query.status {
                    None => limit,
                    Some(_) => (limit - objects.len()).min(SCAN_BUDGET - scanned).max(1),
                };
                let page = runtime
                    .list_ids_by_name(exposed.name, cursor.as_deref(), want)
                    .await?;
                scanned += page.ids.len();
                let statuses: Vec<(String, ObjectStatus)> = stream::iter(page.ids)
                    .map(|id| async move {
                        let status = runtime.status_by_name(exposed.name, &id).await?;
                        Ok::<_, ApiError>((id, status))
                    })
                    .buffered(STATUS_CONCURRENCY)
                    .try_collect()
                    .await?;
                for (id, status) in statuses {
                    // An object deleted since it was listed is left out.
                    let Some(status) = Status::of(status) else {
                        continue;
                    };
                    if query.status.is_none_or(|wanted| wanted == status) {
                        objects.push(ObjectSummary {
                            type_name: exposed.name.to_owned(),
                            id,
                            status,
                        });
                    }
                }
                cursor = page.next;
                let done =
                    query.status.is_none() || objects.len() >= limit || scanned >= SCAN_BUDGET;
                if cursor.is_none() || done {
                    break;
                }
            }
            Ok(Json(ObjectList {
                objects,
                next_cursor: cursor,
            }))
        })
        .await
}
