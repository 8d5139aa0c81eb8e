//! Objects: call a handler, read, list and delete.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::HeaderMap;
use durable_runtime::{Access, CallOptions, LiveStatus, ObjectStatus, Runtime};
use futures_util::{StreamExt, TryStreamExt, stream};
use serde::Deserialize;
use utoipa::IntoParams;

use super::{
    ApiPath, ApiQuery, AppState, Audited, BodyTooLarge, Caller, ObjectPath, WriteRefusals,
    page_limit,
};
use crate::auth::{Action, Op};
use crate::error::{ApiError, ErrorCode, ErrorEnvelope};
use crate::model::{CallReply, Deleted, ObjectList, ObjectSummary, ObjectView, Status};

/// How many statuses of a page of stored ids are asked for at once.
const STATUS_CONCURRENCY: usize = 16;

/// Call a handler of an object.
///
/// The body is a JSON object of arguments by name; an empty body is `{}`. The object is
/// started (or woken) if it is not live. A write handler's changes are committed before the
/// reply. The server never retries a call.
///
/// With an `Idempotency-Key` header, the reply is stored with the call's commit (kept for the
/// runtime's retention, 24 hours by default), and a request with the same key for the same
/// object is answered from it without running the handler again; the same key with another
/// handler or other arguments is refused with `409 idempotency_key_reused`. A `504 timeout` of
/// such a call is retryable with the same key.
#[utoipa::path(
    post,
    path = "/v1/objects/{type}/{id}/call/{handler}",
    operation_id = "call",
    tag = "objects",
    params(
        ("type" = String, Path, description = "The object type"),
        ("id" = String, Path, description = "The object id (1 to 1024 bytes of UTF-8, no NUL)"),
        ("handler" = String, Path, description = "The handler"),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes the call safe to send again: its reply is stored with its commit and a request with the same key for the same object is answered from it"),
    ),
    request_body(
        content = Option<HashMap<String, Value>>,
        description = "The handler's arguments by name; an empty body is `{}`",
        content_type = "application/json",
    ),
    responses(
        (status = 200, description = "The handler's output", body = CallReply),
        (status = 409, description = "`conflict` (retryable), `call_cycle`, or `idempotency_key_reused`: the `Idempotency-Key` was used by a different call", body = ErrorEnvelope),
        BodyTooLarge,
        (status = 422, description = "`handler_error`: the handler's own error in `details`", body = ErrorEnvelope),
        (status = 504, description = "`timeout`: no reply in time, the call may still be applied; retryable only with an `Idempotency-Key`", body = ErrorEnvelope),
        (status = 429, description = "`overloaded`: the object's queue is full; retry after `Retry-After`", body = ErrorEnvelope,
            headers(("Retry-After" = u64, description = "Seconds to wait"))),
    ),
)]
pub(crate) async fn call(
    State(state): State<AppState>,
    audited: Audited,
    ApiPath((type_name, id, handler)): ApiPath<(String, String, String)>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<CallReply>, ApiError> {
    let idempotency_key = idempotency_key(&headers);
    let keyed = matches!(idempotency_key, Ok(Some(_)));
    let exposed = state.catalog.handler(&type_name, &handler);
    let writes = exposed
        .as_ref()
        .is_ok_and(|exposed| exposed.access == Access::Write);
    let result = async {
        state.authorize(&audited.caller, &Action::call(&type_name, &handler))?;
        let exposed = exposed?;
        let body = body?;
        let options = match idempotency_key? {
            Some(key) => CallOptions::new().with_idempotency_key(key),
            None => CallOptions::new(),
        };
        // An empty body is a call without arguments; anything else is decoded (and refused
        // unless it is a JSON object) by the runtime.
        let arguments: &[u8] = if body.iter().all(u8::is_ascii_whitespace) {
            b"{}"
        } else {
            &body
        };
        let call = state.runtime.call_by_name_json_with(
            &type_name,
            &id,
            exposed.name,
            arguments,
            &options,
        );
        state
            .bounded(async { call.await.map_err(ApiError::from) })
            .await
    }
    .await
    // A retry with the same key gets the first call's reply if it was applied.
    .map_err(|error| match error.code() {
        ErrorCode::Timeout => error.with_retryable(keyed),
        _ => error,
    });
    if writes {
        audited
            .mutation("call", &type_name, &id, Some(&handler))
            .record(&result);
    }
    result.map(|result| Json(CallReply { result }))
}

/// The `Idempotency-Key` header's value, if any: any text, refused if it is not UTF-8.
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get(IDEMPOTENCY_KEY) else {
        return Ok(None);
    };
    match value.to_str() {
        Ok(key) => Ok(Some(key.to_owned())),
        Err(_) => Err(ApiError::invalid_request(
            "the Idempotency-Key header must be visible ASCII text",
        )),
    }
}

/// The header carrying a call's idempotency key.
pub(crate) const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// Read an object.
///
/// Its status, its committed state and version, and its alarms. Does not start the object.
#[utoipa::path(
    get,
    path = "/v1/objects/{type}/{id}",
    operation_id = "get_object",
    tag = "objects",
    params(ObjectPath),
    responses(
        (status = 200, description = "The object", body = ObjectView),
    ),
)]
pub(crate) async fn get(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath((type_name, id)): ApiPath<(String, String)>,
) -> Result<Json<ObjectView>, ApiError> {
    let action = Action::on_type(Op::Read, &type_name);
    state
        .authorized(&caller, &action, async {
            let not_found = || {
                ApiError::new(
                    ErrorCode::ObjectNotFound,
                    format!("no object `{id}` of type `{type_name}`"),
                )
            };
            let view = state
                .runtime
                .inspect_by_name(&type_name, &id)
                .await?
                .ok_or_else(not_found)?;
            let status = Status::of(view.status).ok_or_else(not_found)?;
            Ok(Json(ObjectView {
                type_name: type_name.clone(),
                id: id.clone(),
                status,
                state: view.state,
                version: view.version,
                alarms: view.alarms.iter().map(Into::into).collect(),
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
    params(ObjectPath),
    responses(
        (status = 200, description = "Whether a stored state existed", body = Deleted),
        WriteRefusals,
    ),
)]
pub(crate) async fn delete(
    State(state): State<AppState>,
    audited: Audited,
    ApiPath((type_name, id)): ApiPath<(String, String)>,
) -> Result<Json<Deleted>, ApiError> {
    let action = Action::on_type(Op::Delete, &type_name);
    let result = state
        .authorized(&audited.caller, &action, async {
            let deleted = state.runtime.delete_by_name(&type_name, &id).await?;
            Ok(Json(Deleted { deleted }))
        })
        .await;
    audited
        .mutation("delete", &type_name, &id, None)
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
    /// Only objects in this status: `active` and `hibernated` are the objects live in this
    /// server, `stored` the stored ones not live in it; without it, every stored object.
    status: Option<Status>,
    /// Where the page starts: the `next_cursor` of the previous page.
    cursor: Option<String>,
    /// How many objects per page, 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<usize>,
}

/// List the objects of a type.
///
/// By id, a page at a time: every stored object, the live ones in one status (`active`,
/// `hibernated`), or the ones only stored (`stored`). A page holds `limit` objects unless it
/// is the last one.
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
    let limit = page_limit(query.limit)?;
    state.authorize(&caller, &Action::on_type(Op::List, type_name))?;
    let exposed = state.catalog.get(type_name)?;
    let runtime = &state.runtime;
    let cursor = query.cursor.as_deref();
    let live = match query.status {
        Some(Status::Active) => Some((Status::Active, LiveStatus::Active)),
        Some(Status::Hibernated) => Some((Status::Hibernated, LiveStatus::Hibernated)),
        Some(Status::Stored) | None => None,
    };
    let list = match live {
        // The live objects are the runtime's own: listed from its registry, in id order.
        Some((status, live)) => {
            let page = runtime.list_live_by_name(exposed.name, live, cursor, limit)?;
            ObjectList {
                objects: summaries(exposed.name, page.ids, status),
                next_cursor: page.next,
            }
        }
        None => {
            let page = stored_page(runtime, exposed.name, query.status, cursor, limit);
            state.bounded(page).await?
        }
    };
    Ok(Json(list))
}

fn summaries(type_name: &str, ids: Vec<String>, status: Status) -> Vec<ObjectSummary> {
    ids.into_iter()
        .map(|id| ObjectSummary {
            type_name: type_name.to_owned(),
            id,
            status,
        })
        .collect()
}

/// A page of the stored objects of `type_name` with their statuses: all of them, or (with
/// `only` = `stored`) those not live in this runtime. Pages of stored ids are read until the
/// page is full or the ids run out; the ids passed over are those of live objects, so the
/// extra reading is bounded by how many objects are live.
async fn stored_page(
    runtime: &Runtime,
    type_name: &'static str,
    only: Option<Status>,
    cursor: Option<&str>,
    limit: usize,
) -> Result<ObjectList, ApiError> {
    let mut objects = Vec::new();
    let mut cursor = cursor.map(str::to_owned);
    loop {
        let page = runtime
            .list_ids_by_name(type_name, cursor.as_deref(), limit)
            .await?;
        let statuses: Vec<(String, ObjectStatus)> = stream::iter(page.ids)
            .map(|id| async move {
                let status = runtime.status_by_name(type_name, &id).await?;
                Ok::<_, ApiError>((id, status))
            })
            .buffered(STATUS_CONCURRENCY)
            .try_collect()
            .await?;
        let mut statuses = statuses.into_iter();
        for (id, status) in statuses.by_ref() {
            // An object deleted since it was listed is left out.
            let Some(status) = Status::of(status) else {
                continue;
            };
            if only.is_none_or(|wanted| wanted == status) {
                objects.push(ObjectSummary {
                    type_name: type_name.to_owned(),
                    id,
                    status,
                });
                if objects.len() == limit {
                    break;
                }
            }
        }
        // Full before the end of the ids read: the next page starts after the last object
        // listed (the ids passed over did not match).
        if !statuses.as_slice().is_empty() {
            let next_cursor = objects.last().map(|object| object.id.clone());
            return Ok(ObjectList {
                objects,
                next_cursor,
            });
        }
        cursor = page.next;
        if cursor.is_none() || objects.len() == limit {
            return Ok(ObjectList {
                objects,
                next_cursor: cursor,
            });
        }
    }
}
