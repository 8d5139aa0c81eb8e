//! Key-value storage: a paged dump of an object's keys, and one key read, written or deleted.
//! Each operation goes through the object, ordered with its calls.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::value::RawValue;
use utoipa::IntoParams;

use super::{
    ApiPath, ApiQuery, AppState, Audited, BodyTooLarge, Caller, ObjectPath, WriteRefusals,
    page_limit,
};
use crate::auth::{Action, Op};
use crate::error::{ApiError, ErrorCode, ErrorEnvelope};
use crate::model::{KvDeleted, KvEntry, KvPage, KvWritten};

/// The query of `GET /v1/objects/{type}/{id}/storage`.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct StorageQuery {
    /// Only keys starting with this.
    prefix: Option<String>,
    /// Where the page starts: the `next_cursor` of the previous page.
    cursor: Option<String>,
    /// How many entries per page, 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<usize>,
}

/// The responses a key-value write may add.
#[derive(utoipa::IntoResponses)]
#[expect(dead_code, reason = "documents the responses; never built")]
pub(crate) enum KvRefusals {
    #[response(
        status = 413,
        description = "`kv_value_too_large`: the value is over the type's limit (1 MiB by default)"
    )]
    TooLarge(ErrorEnvelope),
    #[response(
        status = 422,
        description = "`kv_key_limit` or `kv_object_quota`: the object's key count or bytes would pass its limit"
    )]
    Limit(ErrorEnvelope),
}

/// List an object's key-value storage.
///
/// A page of entries in the order of the keys' bytes, with the changes of calls not yet
/// committed. It goes through the object, ordered with its calls.
#[utoipa::path(
    get,
    path = "/v1/objects/{type}/{id}/storage",
    operation_id = "list_storage",
    tag = "storage",
    params(ObjectPath, StorageQuery),
    responses(
        (status = 200, description = "A page of entries", body = KvPage),
    ),
)]
pub(crate) async fn list(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath((type_name, id)): ApiPath<(String, String)>,
    ApiQuery(query): ApiQuery<StorageQuery>,
) -> Result<Json<KvPage>, ApiError> {
    let limit = page_limit(query.limit)?;
    let action = Action::on_type(Op::KvRead, &type_name);
    state
        .authorized(&caller, &action, async {
            let prefix = query.prefix.as_deref().unwrap_or_default();
            let mut listed = state
                .runtime
                .kv_list_by_name(&type_name, &id, prefix, query.cursor.as_deref(), limit + 1)
                .await?;
            let next_cursor = if listed.len() > limit {
                listed.truncate(limit);
                listed.last().map(|(key, _)| key.clone())
            } else {
                None
            };
            let entries = listed
                .into_iter()
                .map(|(key, value)| {
                    Ok(KvEntry {
                        value: raw(value)?,
                        key,
                    })
                })
                .collect::<Result<_, ApiError>>()?;
            Ok(Json(KvPage {
                entries,
                next_cursor,
            }))
        })
        .await
}

/// A stored value as JSON, byte for byte.
fn raw(value: Vec<u8>) -> Result<Box<RawValue>, ApiError> {
    String::from_utf8(value)
        .ok()
        .and_then(|text| RawValue::from_string(text).ok())
        .ok_or_else(|| ApiError::internal("a stored value is not JSON"))
}

/// Read one key.
///
/// The body is the stored JSON value, byte for byte. It goes through the object, ordered
/// with its calls.
#[utoipa::path(
    get,
    path = "/v1/objects/{type}/{id}/storage/{key}",
    operation_id = "get_storage_key",
    tag = "storage",
    params(
        ObjectPath,
        ("key" = String, Path, description = "The key"),
    ),
    responses(
        (status = 200, description = "The value", body = Object),
        (status = 404, description = "`kv_key_not_found`", body = ErrorEnvelope),
    ),
)]
pub(crate) async fn get(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath((type_name, id, key)): ApiPath<(String, String, String)>,
) -> Result<Response, ApiError> {
    let action = Action::on_type(Op::KvRead, &type_name);
    state
        .authorized(&caller, &action, async {
            match state.runtime.kv_get_by_name(&type_name, &id, &key).await? {
                Some(value) => Ok(([(CONTENT_TYPE, "application/json")], value).into_response()),
                None => Err(ApiError::new(
                    ErrorCode::KvKeyNotFound,
                    "no value is stored under this key",
                )),
            }
        })
        .await
}

/// Write one key.
///
/// The body is the JSON value to store. The write commits through the object, ordered with
/// its calls, under the type's limits.
#[utoipa::path(
    put,
    path = "/v1/objects/{type}/{id}/storage/{key}",
    operation_id = "put_storage_key",
    tag = "storage",
    params(
        ObjectPath,
        ("key" = String, Path, description = "The key"),
    ),
    request_body(content = Object, content_type = "application/json"),
    responses(
        (status = 200, description = "The key written", body = KvWritten),
        WriteRefusals,
        KvRefusals,
        BodyTooLarge,
    ),
)]
pub(crate) async fn put(
    State(state): State<AppState>,
    audited: Audited,
    ApiPath((type_name, id, key)): ApiPath<(String, String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<KvWritten>, ApiError> {
    let result = async {
        state.authorize(&audited.caller, &Action::on_type(Op::KvWrite, &type_name))?;
        let body = body?;
        let bytes = body.len() as u64;
        state
            .bounded(async {
                state
                    .runtime
                    .kv_put_by_name(&type_name, &id, &key, body.to_vec())
                    .await?;
                Ok(Json(KvWritten {
                    key: key.clone(),
                    bytes,
                }))
            })
            .await
    }
    .await;
    audited
        .mutation("kv_put", &type_name, &id, Some(&key))
        .record(&result);
    result
}

/// Delete one key.
///
/// It goes through the object, ordered with its calls.
#[utoipa::path(
    delete,
    path = "/v1/objects/{type}/{id}/storage/{key}",
    operation_id = "delete_storage_key",
    tag = "storage",
    params(
        ObjectPath,
        ("key" = String, Path, description = "The key"),
    ),
    responses(
        (status = 200, description = "Whether the key held a value", body = KvDeleted),
        WriteRefusals,
    ),
)]
pub(crate) async fn delete(
    State(state): State<AppState>,
    audited: Audited,
    ApiPath((type_name, id, key)): ApiPath<(String, String, String)>,
) -> Result<Json<KvDeleted>, ApiError> {
    let action = Action::on_type(Op::KvWrite, &type_name);
    let result = state
        .authorized(&audited.caller, &action, async {
            let runtime = &state.runtime;
            let deleted = runtime
                .kv_get_by_name(&type_name, &id, &key)
                .await?
                .is_some();
            runtime.kv_delete_by_name(&type_name, &id, &key).await?;
            Ok(Json(KvDeleted { deleted }))
        })
        .await;
    audited
        .mutation("kv_delete", &type_name, &id, Some(&key))
        .record(&result);
    result
}
