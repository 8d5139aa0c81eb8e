//! Alarms: list, set and cancel an object's alarms; dead alarms.

use std::time::SystemTime;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use durable_runtime::storage::truncate_to_micros;
use serde::Deserialize;
use utoipa::IntoParams;

use super::{
    ApiPath, ApiQuery, AppState, Audited, BodyTooLarge, Caller, ObjectPath, WriteRefusals,
    json_body, page_limit,
};
use crate::auth::{Action, Op};
use crate::error::ApiError;
use crate::error::ErrorEnvelope;
use crate::model::{
    AlarmList, Cancelled, DeadAlarmList, Requeue, Requeued, ScheduledAlarm, SetAlarm, format_time,
    parse_time,
};

/// List an object's alarms.
///
/// Dead ones included, by due time. Does not start the object.
#[utoipa::path(
    get,
    path = "/v1/objects/{type}/{id}/alarms",
    operation_id = "list_alarms",
    tag = "alarms",
    params(ObjectPath),
    responses(
        (status = 200, description = "The object's alarms", body = AlarmList),
    ),
)]
pub(crate) async fn list(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath((type_name, id)): ApiPath<(String, String)>,
) -> Result<Json<AlarmList>, ApiError> {
    let action = Action::on_type(Op::Read, &type_name);
    state
        .authorized(&caller, &action, async {
            let alarms = state.runtime.list_alarms_by_name(&type_name, &id).await?;
            Ok(Json(AlarmList {
                alarms: alarms.iter().map(Into::into).collect(),
            }))
        })
        .await
}

/// When an alarm body asks the alarm to fire.
fn due_time(body: &SetAlarm, now: SystemTime) -> Result<SystemTime, ApiError> {
    match (&body.fire_at, &body.delay) {
        (Some(at), None) => parse_time(at).map_err(|error| {
            ApiError::invalid_request(format!(
                "`fire_at` must be an RFC 3339 time in UTC such as 2026-11-25T18:00:00Z: {error}"
            ))
        }),
        (None, Some(delay)) => {
            let delay = humantime::parse_duration(delay).map_err(|error| {
                ApiError::invalid_request(format!(
                    "`delay` must be a duration such as \"30s\" or \"1h 30m\": {error}"
                ))
            })?;
            now.checked_add(delay)
                .ok_or_else(|| ApiError::invalid_request("`delay` is too long"))
        }
        _ => Err(ApiError::invalid_request(
            "give exactly one of `fire_at` and `delay`",
        )),
    }
}

/// Set an alarm of an object.
///
/// It replaces a pending (or dead) alarm of the same name, with its argument (`args`, checked
/// against the argument type of the alarm's handler: `400 invalid_arguments` when it does not
/// fit). When the object is live it goes through the object, ordered with its calls; when it
/// is not, the alarm is written to storage without starting it. An object may have at most
/// 100 alarms by default: a new one beyond is `422 too_many_alarms`, and nothing is written.
#[utoipa::path(
    post,
    path = "/v1/objects/{type}/{id}/alarms",
    operation_id = "set_alarm",
    tag = "alarms",
    params(ObjectPath),
    request_body(content = SetAlarm, content_type = "application/json"),
    responses(
        (status = 200, description = "The alarm and when it is due", body = ScheduledAlarm),
        (status = 422, description = "`too_many_alarms`: the object has as many alarms as it may have; nothing was written", body = ErrorEnvelope),
        WriteRefusals,
        BodyTooLarge,
    ),
)]
pub(crate) async fn set(
    State(state): State<AppState>,
    audited: Audited,
    ApiPath((type_name, id)): ApiPath<(String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<ScheduledAlarm>, ApiError> {
    let mut name = None;
    let result = async {
        state.authorize(&audited.caller, &Action::on_type(Op::Alarms, &type_name))?;
        let body: SetAlarm = json_body(body)?;
        name = Some(body.name.clone());
        // Storage keeps microseconds: the reply shows the time as stored.
        let fire_at = truncate_to_micros(due_time(&body, state.runtime.now())?);
        state
            .bounded(async {
                let runtime = &state.runtime;
                runtime
                    .schedule_alarm_by_name_with(
                        &type_name,
                        &id,
                        &body.name,
                        body.args.clone(),
                        fire_at,
                    )
                    .await?;
                Ok(Json(ScheduledAlarm {
                    name: body.name.clone(),
                    fire_at: format_time(fire_at),
                }))
            })
            .await
    }
    .await;
    audited
        .mutation("alarm_set", &type_name, &id, name.as_deref())
        .record(&result);
    result
}

/// Cancel an alarm of an object.
///
/// It goes through the object when it is live, ordered with its calls; otherwise it is
/// written to storage without starting the object.
#[utoipa::path(
    delete,
    path = "/v1/objects/{type}/{id}/alarms/{name}",
    operation_id = "cancel_alarm",
    tag = "alarms",
    params(
        ObjectPath,
        ("name" = String, Path, description = "The alarm"),
    ),
    responses(
        (status = 200, description = "Whether the alarm was scheduled", body = Cancelled),
        WriteRefusals,
    ),
)]
pub(crate) async fn cancel(
    State(state): State<AppState>,
    audited: Audited,
    ApiPath((type_name, id, name)): ApiPath<(String, String, String)>,
) -> Result<Json<Cancelled>, ApiError> {
    let action = Action::on_type(Op::Alarms, &type_name);
    let result = state
        .authorized(&audited.caller, &action, async {
            let runtime = &state.runtime;
            let alarms = runtime.list_alarms_by_name(&type_name, &id).await?;
            runtime.cancel_alarm_by_name(&type_name, &id, &name).await?;
            let cancelled = alarms.iter().any(|alarm| alarm.name == name);
            Ok(Json(Cancelled { cancelled }))
        })
        .await;
    audited
        .mutation("alarm_cancel", &type_name, &id, Some(&name))
        .record(&result);
    result
}

/// The query of `GET /alarms/dead`.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct DeadQuery {
    /// Only the dead alarms of this type; without it, of every type (which needs a grant for
    /// every type).
    #[serde(rename = "type")]
    #[param(rename = "type")]
    type_name: Option<String>,
    /// Where the page starts: the `next_cursor` of the previous page.
    cursor: Option<String>,
    /// How many alarms per page, 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<usize>,
}

/// List dead alarms.
///
/// Alarms that exhausted their attempts, of one type or of every exposed type, read from
/// storage: by type, id, then name, a page at a time.
#[utoipa::path(
    get,
    path = "/v1/alarms/dead",
    operation_id = "list_dead_alarms",
    tag = "alarms",
    params(DeadQuery),
    responses(
        (status = 200, description = "A page of dead alarms", body = DeadAlarmList),
    ),
)]
pub(crate) async fn dead(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiQuery(query): ApiQuery<DeadQuery>,
) -> Result<Json<DeadAlarmList>, ApiError> {
    let limit = page_limit(query.limit)?;
    let action = match &query.type_name {
        Some(type_name) => Action::on_type(Op::Admin, type_name),
        None => Action::on_server(Op::Admin),
    };
    state
        .authorized(&caller, &action, async {
            let page = state
                .runtime
                .list_dead_alarms_by_name(
                    query.type_name.as_deref(),
                    query.cursor.as_deref(),
                    limit,
                )
                .await?;
            Ok(Json(DeadAlarmList {
                alarms: page.alarms.iter().map(Into::into).collect(),
                next_cursor: page.next_cursor,
            }))
        })
        .await
}

/// Re-queue a dead alarm.
///
/// It fires again now, its attempts counted afresh. Answers `requeued: false` if the object
/// has no dead alarm of that name (a pending alarm of that name is left as it is).
#[utoipa::path(
    post,
    path = "/v1/alarms/dead/requeue",
    operation_id = "requeue_dead_alarm",
    tag = "alarms",
    request_body(content = Requeue, content_type = "application/json"),
    responses(
        (status = 200, description = "Whether a dead alarm was re-queued", body = Requeued),
        WriteRefusals,
        BodyTooLarge,
    ),
)]
pub(crate) async fn requeue(
    State(state): State<AppState>,
    audited: Audited,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Requeued>, ApiError> {
    let body: Requeue = json_body(body)?;
    let action = Action::on_type(Op::Admin, &body.type_name);
    let result = state
        .authorized(&audited.caller, &action, async {
            // Through the object: the check that the alarm is dead and its new schedule are
            // one step, ordered with the object's calls.
            let requeued = state
                .runtime
                .requeue_dead_alarm_by_name(&body.type_name, &body.id, &body.name)
                .await?;
            Ok(Json(Requeued { requeued }))
        })
        .await;
    audited
        .mutation("alarm_requeue", &body.type_name, &body.id, Some(&body.name))
        .record(&result);
    result
}
