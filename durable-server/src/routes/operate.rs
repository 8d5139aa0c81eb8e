//! Operating one object (admin): stop it, reload it after a change made in the database by
//! hand, replace its state.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;

use super::{ApiPath, AppState, Audited, BodyTooLarge, ObjectPath, WriteRefusals, json_body};
use crate::auth::{Action, Op};
use crate::error::ApiError;
use crate::model::{Reloaded, ReplaceState, StateReplaced, Stopped};

/// Stop an object.
///
/// After the calls queued before it (their writes committed), the object leaves this server's
/// memory; the next call loads it from storage. Does nothing to an object that is not live here.
#[utoipa::path(
    post,
    path = "/v1/objects/{type}/{id}/stop",
    operation_id = "stop_object",
    tag = "objects",
    params(ObjectPath),
    responses(
        (status = 200, description = "Whether the object was live", body = Stopped),
        WriteRefusals,
    ),
)]
pub(crate) async fn stop(
    State(state): State<AppState>,
    audited: Audited,
    ApiPath((type_name, id)): ApiPath<(String, String)>,
) -> Result<Json<Stopped>, ApiError> {
    let action = Action::on_type(Op::Admin, &type_name);
    let result = state
        .authorized(&audited.caller, &action, async {
            let stopped = state.runtime.stop_by_name(&type_name, &id).await?;
            Ok(Json(Stopped { stopped }))
        })
        .await;
    audited
        .mutation("stop", &type_name, &id, None)
        .record(&result);
    result
}

/// Reload an object.
///
/// After the calls queued before it, the object drops its in-memory state: the next call reads
/// storage. For after a change made in the database by hand.
#[utoipa::path(
    post,
    path = "/v1/objects/{type}/{id}/reload",
    operation_id = "reload_object",
    tag = "objects",
    params(ObjectPath),
    responses(
        (status = 200, description = "Whether the object was live", body = Reloaded),
        WriteRefusals,
    ),
)]
pub(crate) async fn reload(
    State(state): State<AppState>,
    audited: Audited,
    ApiPath((type_name, id)): ApiPath<(String, String)>,
) -> Result<Json<Reloaded>, ApiError> {
    let action = Action::on_type(Op::Admin, &type_name);
    let result = state
        .authorized(&audited.caller, &action, async {
            let reloaded = state.runtime.reload_by_name(&type_name, &id).await?;
            Ok(Json(Reloaded { reloaded }))
        })
        .await;
    audited
        .mutation("reload", &type_name, &id, None)
        .record(&result);
    result
}

/// Replace an object's state.
///
/// Committed through the object, after the calls queued before it, if its stored version is
/// `expected_version` (`409 conflict` otherwise, naming the version found). The next call
/// loads the new state.
#[utoipa::path(
    put,
    path = "/v1/objects/{type}/{id}/state",
    operation_id = "replace_state",
    tag = "objects",
    params(ObjectPath),
    request_body(content = ReplaceState, content_type = "application/json"),
    responses(
        (status = 200, description = "The new version", body = StateReplaced),
        WriteRefusals,
        BodyTooLarge,
    ),
)]
pub(crate) async fn replace_state(
    State(state): State<AppState>,
    audited: Audited,
    ApiPath((type_name, id)): ApiPath<(String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<StateReplaced>, ApiError> {
    let result = async {
        state.authorize(&audited.caller, &Action::on_type(Op::Admin, &type_name))?;
        let body: ReplaceState = json_body(body)?;
        state
            .bounded(async {
                let version = state
                    .runtime
                    .replace_state_by_name(&type_name, &id, body.state, body.expected_version)
                    .await?;
                Ok(Json(StateReplaced { version }))
            })
            .await
    }
    .await;
    audited
        .mutation("replace_state", &type_name, &id, None)
        .record(&result);
    result
}
