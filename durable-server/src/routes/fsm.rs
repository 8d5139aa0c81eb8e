//! FSM instances: insert an instance of a registered FSM from JSON, signal one, read one,
//! list them. These routes work with the engine the server was given
//! ([`ServerConfig::with_fsm`](crate::ServerConfig::with_fsm)); without one they answer
//! `404 fsm_not_enabled`.
//!
//! Authorization uses the grant's `types` as FSM names: `fsm_write` for insert and signal
//! (checked against the FSM of the instance a signal resolves to), `fsm_read` for reads and
//! listings of one FSM; a listing across every FSM needs a grant for `"*"`.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use durable_runtime::fsm::{Engine, InstanceId, InstanceRecord, ListFilter, Status};
use serde::Deserialize;
use utoipa::IntoParams;

use super::{ApiPath, ApiQuery, AppState, Audited, BodyTooLarge, Caller, json_body, page_limit};
use crate::auth::{Action, Op};
use crate::error::{ApiError, ErrorCode, ErrorEnvelope};
use crate::model::fsm::{
    FsmInstance, FsmInstanceList, InboxSignal, InsertInstance, Inserted, SendSignal, SignalSent,
};

/// The engine, or `404 fsm_not_enabled`.
pub(super) fn engine(state: &AppState) -> Result<&Engine, ApiError> {
    state.fsm.as_ref().ok_or_else(|| {
        ApiError::new(
            ErrorCode::FsmNotEnabled,
            "this server runs no FSM engine, so the /fsm routes are off",
        )
    })
}

/// The instance `id`, or `404 instance_not_found`.
pub(super) async fn instance(engine: &Engine, id: InstanceId) -> Result<InstanceRecord, ApiError> {
    engine
        .get(id)
        .await?
        .ok_or_else(|| ApiError::new(ErrorCode::InstanceNotFound, format!("no instance {id}")))
}

/// Insert an FSM instance.
///
/// `args` is the instance's first state, decoded into the FSM's state type (fields left out
/// take their defaults): `400 invalid_arguments` when it does not fit. The instance runs on
/// its FSM's queue once a worker picks it. With a `correlation_key` an instance occupying the
/// key makes it `409 duplicate_instance`, and nothing is inserted.
#[utoipa::path(
    post,
    path = "/v1/fsm/{name}",
    operation_id = "insert_fsm_instance",
    tag = "fsm",
    params(("name" = String, Path, description = "The FSM, as registered with the server's engine")),
    request_body(content = InsertInstance, content_type = "application/json"),
    responses(
        (status = 200, description = "The new instance's id", body = Inserted),
        (status = 400, description = "`invalid_arguments`: `args` is not a state of the FSM", body = ErrorEnvelope),
        (status = 404, description = "`unknown_fsm`: no FSM of that name is registered; `fsm_not_enabled`: the server runs no FSM engine", body = ErrorEnvelope),
        (status = 409, description = "`duplicate_instance`: the correlation key is occupied; nothing was inserted", body = ErrorEnvelope),
        BodyTooLarge,
    ),
)]
pub(crate) async fn insert(
    State(state): State<AppState>,
    audited: Audited,
    ApiPath(name): ApiPath<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Inserted>, ApiError> {
    let mut inserted = String::new();
    let result = async {
        state.authorize(&audited.caller, &Action::on_type(Op::FsmWrite, &name))?;
        let engine = engine(&state)?;
        let body: InsertInstance = json_body(body)?;
        let instance = engine
            .instance_from_json(&name, body.args)?
            .with_correlation_key(body.correlation_key);
        state
            .bounded(async {
                let id = engine.insert(instance).await?;
                inserted = id.to_string();
                Ok(Json(Inserted { id: id.get() }))
            })
            .await
    }
    .await;
    audited
        .mutation("fsm_insert", &name, &inserted, None)
        .record(&result);
    result
}

/// Signal an FSM instance.
///
/// Addressed by exactly one of `id` and `correlation_key`; the signal is stored in the
/// instance's inbox and wakes it if it awaits this name. `404 instance_not_found` when no live
/// instance has the id or occupies the key: nothing is stored.
#[utoipa::path(
    post,
    path = "/v1/fsm/signal",
    operation_id = "signal_fsm_instance",
    tag = "fsm",
    request_body(content = SendSignal, content_type = "application/json"),
    responses(
        (status = 200, description = "Where the signal went", body = SignalSent),
        (status = 400, description = "`invalid_request`: not exactly one of `id` and `correlation_key`", body = ErrorEnvelope),
        (status = 404, description = "`instance_not_found`: no live instance is addressed; `fsm_not_enabled`: the server runs no FSM engine", body = ErrorEnvelope),
        BodyTooLarge,
    ),
)]
pub(crate) async fn signal(
    State(state): State<AppState>,
    audited: Audited,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<SignalSent>, ApiError> {
    let mut target = (String::new(), String::new());
    let mut name = None;
    let result = async {
        let engine = engine(&state)?;
        let body: SendSignal = json_body(body)?;
        name = Some(body.name.clone());
        state
            .bounded(async {
                // Resolved to an id first, so that the grant is checked against the FSM of
                // the instance the signal reaches.
                let id = match (body.id, &body.correlation_key) {
                    (Some(id), None) => InstanceId::new(id),
                    (None, Some(key)) => engine.find(key).await?.ok_or_else(|| {
                        ApiError::new(
                            ErrorCode::InstanceNotFound,
                            format!("no live instance occupies the correlation key {key:?}"),
                        )
                    })?,
                    _ => {
                        return Err(ApiError::invalid_request(
                            "give exactly one of `id` and `correlation_key`",
                        ));
                    }
                };
                let record = instance(engine, id).await?;
                target = (record.fsm.clone(), id.to_string());
                state.authorize(&audited.caller, &Action::on_type(Op::FsmWrite, &record.fsm))?;
                let delivered = engine
                    .signal(id, &body.name, &body.payload, body.dedup_key.as_deref())
                    .await?;
                Ok(Json(SignalSent::from(delivered)))
            })
            .await
    }
    .await;
    audited
        .mutation("fsm_signal", &target.0, &target.1, name.as_deref())
        .record(&result);
    result
}

/// Read an FSM instance.
///
/// Its status, step, state, result or error, attempts, times and inbox.
#[utoipa::path(
    get,
    path = "/v1/fsm/{id}",
    operation_id = "get_fsm_instance",
    tag = "fsm",
    params(("id" = i64, Path, description = "The instance id")),
    responses(
        (status = 200, description = "The instance", body = FsmInstance),
        (status = 400, description = "`invalid_request`: the id is not a 64-bit integer", body = ErrorEnvelope),
        (status = 404, description = "`instance_not_found`; `fsm_not_enabled`: the server runs no FSM engine", body = ErrorEnvelope),
    ),
)]
pub(crate) async fn get(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(id): ApiPath<i64>,
) -> Result<Json<FsmInstance>, ApiError> {
    let engine = engine(&state)?;
    state
        .bounded(async {
            let record = instance(engine, InstanceId::new(id)).await?;
            state.authorize(&caller, &Action::on_type(Op::FsmRead, &record.fsm))?;
            let inbox = engine.inbox(record.id).await?;
            let mut instance = FsmInstance::from(&record);
            instance.inbox = Some(inbox.iter().map(InboxSignal::from).collect());
            Ok(Json(instance))
        })
        .await
}

/// The query of `GET /v1/fsm`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListQuery {
    /// Only instances of this FSM
    name: Option<String>,
    /// Only instances in this status: `runnable`, `executing`, `awaiting_signal`,
    /// `awaiting_children`, `done` or `failed`
    status: Option<String>,
    /// Only instances with a greater id: the previous page's `next_after`
    after: Option<i64>,
    /// Page size, 1 to 1000 (default 100)
    limit: Option<usize>,
}

/// List FSM instances.
///
/// By id, optionally of one FSM and in one status, a page at a time.
#[utoipa::path(
    get,
    path = "/v1/fsm",
    operation_id = "list_fsm_instances",
    tag = "fsm",
    params(ListQuery),
    responses(
        (status = 200, description = "A page of instances", body = FsmInstanceList),
        (status = 400, description = "`invalid_request`: an unknown status or a limit out of range", body = ErrorEnvelope),
        (status = 404, description = "`fsm_not_enabled`: the server runs no FSM engine", body = ErrorEnvelope),
    ),
)]
pub(crate) async fn list(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiQuery(query): ApiQuery<ListQuery>,
) -> Result<Json<FsmInstanceList>, ApiError> {
    let action = match &query.name {
        Some(name) => Action::on_type(Op::FsmRead, name),
        None => Action::on_server(Op::FsmRead),
    };
    state.authorize(&caller, &action)?;
    let engine = engine(&state)?;
    let limit = page_limit(query.limit)?;
    let mut filter = ListFilter::default().limit(limit);
    filter.fsm = query.name;
    if let Some(status) = &query.status {
        filter.status = Some(status.parse::<Status>().map_err(|_| {
            ApiError::invalid_request(format!(
                "`status` must be one of {}, not {status:?}",
                Status::ALL.map(Status::as_str).join(", ")
            ))
        })?);
    }
    filter.after = query.after.map(InstanceId::new);
    state
        .bounded(async {
            let records = engine.list(&filter).await?;
            let next_after = (records.len() == limit)
                .then(|| records.last().map(|record| record.id.get()))
                .flatten();
            Ok(Json(FsmInstanceList {
                instances: records.iter().map(FsmInstance::from).collect(),
                next_after,
            }))
        })
        .await
}
