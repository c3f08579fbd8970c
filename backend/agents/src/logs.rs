//! Workloads' output as node agents upload it, kept up to each job's size
//! limit; tenants read it through the order's logs.

use axum::Json;
use axum::extract::State;
use sea_orm::EntityTrait;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::node_auth::NodeAgent;
use gantry_core::error::{ApiError, ApiResult, ProblemResponses, Resource};
use gantry_core::http::extract::ApiJson;
use gantry_core::state::AppState;
use gantry_entities::order;
use gantry_workload::jobs::logs::{self, Stream};

const LINES_PER_UPLOAD: usize = 1000;
const LINE_MAX: usize = 16 * 1024;

/// Lines a node agent read from one workload since its last upload.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LogUpload {
    pub order_id: Uuid,
    #[schema(max_items = 1000)]
    pub lines: Vec<UploadedLine>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UploadedLine {
    pub stream: Stream,
    #[schema(max_length = 16384)]
    pub line: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct LogKept {
    /// Lines stored from this upload.
    pub kept: usize,
    /// Whether the job's output reached its size limit (later lines are
    /// dropped).
    pub truncated: bool,
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(upload))
}

/// Output of a workload on this node, kept up to the job's size limit.
#[utoipa::path(
    post,
    path = "/agent/logs",
    tag = "agent",
    request_body = LogUpload,
    responses((status = 200, description = "What was kept", body = LogKept), ProblemResponses),
    security(("bearer" = []))
)]
async fn upload(
    State(state): State<AppState>,
    agent: NodeAgent,
    ApiJson(upload): ApiJson<LogUpload>,
) -> ApiResult<Json<LogKept>> {
    if upload.lines.len() > LINES_PER_UPLOAD {
        return Err(ApiError::unprocessable(
            "too_many_lines",
            format!("at most {LINES_PER_UPLOAD} lines per upload"),
        ));
    }
    if upload.lines.iter().any(|l| l.line.len() > LINE_MAX) {
        return Err(ApiError::unprocessable(
            "line_too_long",
            format!("a line may hold at most {LINE_MAX} bytes"),
        ));
    }
    let txn = gantry_core::db::write(&state.db).await?;
    super::holds_on(&txn, upload.order_id, agent.node.id).await?;
    let job = order::Entity::find_by_id(upload.order_id)
        .one(&txn)
        .await?
        .ok_or_else(|| ApiError::not_found(Resource::Order, upload.order_id))?;
    let limit = i64::try_from(state.config.job_log_limit_bytes).unwrap_or(i64::MAX);
    let lines = upload.lines.into_iter().map(|l| (l.stream, l.line));
    let (kept, truncated) =
        logs::keep(&txn, &job, agent.node.id, lines, limit, state.clock.now()).await?;
    txn.commit().await?;
    Ok(Json(LogKept { kept, truncated }))
}
