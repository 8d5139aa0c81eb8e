//! The FSM scheduling controls: cancel an instance, pause and resume a queue, list the paused
//! queues. Like the other `/fsm` routes, they work with the server's engine; without one they
//! answer `404 fsm_not_enabled`.
//!
//! Authorization: cancel needs `fsm_write` on the instance's FSM; pausing and resuming a
//! queue (which holds back every FSM on it) need `fsm_write` on `"*"`, and listing the paused
//! queues `fsm_read` on `"*"`.

use axum::Json;
use axum::extract::State;
use durable_runtime::fsm::InstanceId;

use super::fsm::{engine, instance};
use super::{ApiPath, AppState, Audited, Caller};
use crate::auth::{Action, Op};
use crate::error::{ApiError, ErrorEnvelope};
use crate::model::fsm_control::{CancelledInstance, PausedQueueView, PausedQueues, QueueState};

/// Cancel an FSM instance.
///
/// The live instance ends `failed` with the error `cancelled`, and so do its live
/// descendants; a step of it executing now cannot commit its outcome any more. A parent
/// awaiting it counts it as a failed child. `409 instance_ended` when it had already ended
/// (nothing changes).
#[utoipa::path(
    post,
    path = "/v1/fsm/{id}/cancel",
    operation_id = "cancel_fsm_instance",
    tag = "fsm",
    params(("id" = i64, Path, description = "The instance id")),
    responses(
        (status = 200, description = "The instance was cancelled", body = CancelledInstance),
        (status = 400, description = "`invalid_request`: the id is not a 64-bit integer", body = ErrorEnvelope),
        (status = 404, description = "`instance_not_found`; `fsm_not_enabled`: the server runs no FSM engine", body = ErrorEnvelope),
        (status = 409, description = "`instance_ended`: the instance had already ended; nothing changed", body = ErrorEnvelope),
    ),
)]
pub(crate) async fn cancel(
    State(state): State<AppState>,
    audited: Audited,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<CancelledInstance>, ApiError> {
    let mut fsm = String::new();
    let result = async {
        let engine = engine(&state)?;
        state
            .bounded(async {
                let record = instance(engine, InstanceId::new(id)).await?;
                fsm.clone_from(&record.fsm);
                state.authorize(&audited.caller, &Action::on_type(Op::FsmWrite, &record.fsm))?;
                let cancelled = engine.cancel(record.id).await?;
                Ok(Json(CancelledInstance {
                    id: cancelled.id.get(),
                    instances: cancelled.instances,
                }))
            })
            .await
    }
    .await;
    audited
        .mutation("fsm_cancel", &fsm, &id.to_string(), None)
        .record(&result);
    result
}

/// Pause an FSM queue.
///
/// No engine on the database claims the queue's instances until it is resumed; steps
/// executing now finish. Inserts and signals still go in.
#[utoipa::path(
    post,
    path = "/v1/fsm/queues/{queue}/pause",
    operation_id = "pause_fsm_queue",
    tag = "fsm",
    params(("queue" = String, Path, description = "The queue")),
    responses(
        (status = 200, description = "The queue is paused", body = QueueState),
        (status = 400, description = "`invalid_request`: the queue is not a valid path segment", body = ErrorEnvelope),
        (status = 404, description = "`fsm_not_enabled`: the server runs no FSM engine", body = ErrorEnvelope),
    ),
)]
pub(crate) async fn pause(
    State(state): State<AppState>,
    audited: Audited,
    ApiPath(queue): ApiPath<String>,
) -> Result<Json<QueueState>, ApiError> {
    let result = set_paused(&state, &audited, &queue, true).await;
    audited
        .mutation("fsm_pause", "", &queue, None)
        .record(&result);
    result
}

/// Resume a paused FSM queue.
#[utoipa::path(
    post,
    path = "/v1/fsm/queues/{queue}/resume",
    operation_id = "resume_fsm_queue",
    tag = "fsm",
    params(("queue" = String, Path, description = "The queue")),
    responses(
        (status = 200, description = "The queue runs", body = QueueState),
        (status = 400, description = "`invalid_request`: the queue is not a valid path segment", body = ErrorEnvelope),
        (status = 404, description = "`fsm_not_enabled`: the server runs no FSM engine", body = ErrorEnvelope),
    ),
)]
pub(crate) async fn resume(
    State(state): State<AppState>,
    audited: Audited,
    ApiPath(queue): ApiPath<String>,
) -> Result<Json<QueueState>, ApiError> {
    let result = set_paused(&state, &audited, &queue, false).await;
    audited
        .mutation("fsm_resume", "", &queue, None)
        .record(&result);
    result
}

async fn set_paused(
    state: &AppState,
    audited: &Audited,
    queue: &str,
    paused: bool,
) -> Result<Json<QueueState>, ApiError> {
    state.authorize(&audited.caller, &Action::on_server(Op::FsmWrite))?;
    let engine = engine(state)?;
    state
        .bounded(async {
            let changed = if paused {
                engine.pause_queue(queue).await?
            } else {
                engine.resume_queue(queue).await?
            };
            Ok(Json(QueueState {
                queue: queue.to_owned(),
                paused,
                changed,
            }))
        })
        .await
}

/// List the paused FSM queues.
#[utoipa::path(
    get,
    path = "/v1/fsm/queues/paused",
    operation_id = "list_paused_fsm_queues",
    tag = "fsm",
    responses(
        (status = 200, description = "The paused queues, by name", body = PausedQueues),
        (status = 404, description = "`fsm_not_enabled`: the server runs no FSM engine", body = ErrorEnvelope),
    ),
)]
pub(crate) async fn paused(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Json<PausedQueues>, ApiError> {
    state.authorize(&caller, &Action::on_server(Op::FsmRead))?;
    let engine = engine(&state)?;
    state
        .bounded(async {
            let queues = engine.paused_queues().await?;
            Ok(Json(PausedQueues {
                queues: queues.iter().map(PausedQueueView::from).collect(),
            }))
        })
        .await
}
