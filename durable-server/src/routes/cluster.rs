//! The cluster's admin routes: the nodes with their shard counts, and the shards with a
//! summary, read from the database through the runtime. On a server whose runtime is not in
//! cluster mode they answer `404 cluster_not_enabled`.
//!
//! Authorization: both need `admin` on the server (`types = ["*"]`), like the other
//! server-wide operator routes.

use axum::Json;
use axum::extract::State;
use durable_runtime::cluster::{ClusterView, ClusterViewError};
use durable_runtime::storage::StorageErrorKind;
use serde::Deserialize;
use utoipa::IntoParams;

use super::{ApiQuery, AppState, Caller};
use crate::auth::{Action, Op};
use crate::error::{ApiError, ErrorCode, ErrorEnvelope};
use crate::model::cluster::{ClusterNodes, ClusterShards};

/// The cluster as the database records it, once the caller may administer the server.
async fn view(state: &AppState, caller: &crate::auth::Principal) -> Result<ClusterView, ApiError> {
    state
        .authorized(caller, &Action::on_server(Op::Admin), async {
            state.runtime.cluster_view().await.map_err(view_error)
        })
        .await
}

/// The answer to a failed read of the cluster.
fn view_error(error: ClusterViewError) -> ApiError {
    match error {
        ClusterViewError::NotEnabled => ApiError::new(
            ErrorCode::ClusterNotEnabled,
            "this server's runtime does not run in cluster mode",
        ),
        ClusterViewError::Storage(source) if source.kind() == StorageErrorKind::Unavailable => {
            tracing::warn!(error = %source, "storage unavailable");
            ApiError::new(ErrorCode::Unavailable, "storage is unavailable")
        }
        other => {
            tracing::error!(error = %other, "could not read the cluster");
            ApiError::internal("the cluster could not be read")
        }
    }
}

/// List the cluster's nodes.
///
/// The nodes that have not left, by id, each with how many shards it holds a current lease
/// on, read from the database (its clock judges heartbeats and leases).
#[utoipa::path(
    get,
    path = "/v1/cluster/nodes",
    operation_id = "list_cluster_nodes",
    tag = "cluster",
    responses(
        (status = 200, description = "The nodes", body = ClusterNodes),
        (status = 404, description = "`cluster_not_enabled`: the server's runtime does not run in cluster mode", body = ErrorEnvelope),
        (status = 503, description = "`unavailable`: the database cannot be reached", body = ErrorEnvelope),
    ),
)]
pub(crate) async fn nodes(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Json<ClusterNodes>, ApiError> {
    let view = view(&state, &caller).await?;
    Ok(Json(ClusterNodes::from_view(
        &view,
        state.runtime.node_id(),
    )))
}

/// The query of `GET /cluster/shards`.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ShardsQuery {
    /// Only the shards this node holds a current lease on; without it, every shard.
    owner: Option<String>,
}

/// List the cluster's shards.
///
/// Every shard (or those one node holds) with its owner and epoch, and a summary of the whole
/// cluster: shards per node, shards nobody holds, the highest epoch.
#[utoipa::path(
    get,
    path = "/v1/cluster/shards",
    operation_id = "list_cluster_shards",
    tag = "cluster",
    params(ShardsQuery),
    responses(
        (status = 200, description = "The shards and the summary", body = ClusterShards),
        (status = 404, description = "`cluster_not_enabled`: the server's runtime does not run in cluster mode", body = ErrorEnvelope),
        (status = 503, description = "`unavailable`: the database cannot be reached", body = ErrorEnvelope),
    ),
)]
pub(crate) async fn shards(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiQuery(query): ApiQuery<ShardsQuery>,
) -> Result<Json<ClusterShards>, ApiError> {
    let view = view(&state, &caller).await?;
    Ok(Json(ClusterShards::from_view(
        &view,
        query.owner.as_deref(),
    )))
}
