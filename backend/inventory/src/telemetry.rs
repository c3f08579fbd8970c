//! GPU telemetry as node agents report it: what operators look at beside
//! allocation (a held GPU is not necessarily a busy one).

use axum::Json;
use axum::extract::{RawPathParams, State};
use chrono::{DateTime, TimeDelta, Utc};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use gantry_core::auth::principal::Operator;
use gantry_core::error::{ApiError, ApiResult, ProblemResponses};
use gantry_core::http::extract::ApiQuery;
use gantry_core::state::AppState;
use gantry_entities::gpu_telemetry;

const DEFAULT_MINUTES: i64 = 15;
const MAX_MINUTES: i64 = 24 * 60;

/// How long raw readings are kept: the longest window this endpoint
/// serves, with a day to spare for metering that fell behind. The fleet
/// history keeps utilization per model for longer.
pub const KEPT: TimeDelta = TimeDelta::days(2);

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct Window {
    /// How far back, 1 to 1440 minutes; 15 when absent.
    #[param(minimum = 1, maximum = 1440)]
    pub minutes: Option<i64>,
}

/// One GPU's measurements at one time.
#[derive(Debug, Serialize, ToSchema)]
pub struct GpuReading {
    pub gpu_index: i32,
    pub sampled_at: DateTime<Utc>,
    pub utilization_pct: i16,
    pub memory_used_mib: i64,
    pub temperature_c: i16,
    pub power_w: i32,
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(node_telemetry))
}

/// A node's GPU readings over the last minutes, oldest first. Simulated
/// nodes report none.
#[utoipa::path(
    get,
    path = "/admin/nodes/{node_id}/telemetry",
    tag = "admin",
    params(("node_id" = Uuid, Path, description = "Node id"), Window),
    responses((status = 200, description = "Readings, oldest first", body = Vec<GpuReading>), ProblemResponses),
    security(("bearer" = []))
)]
async fn node_telemetry(
    State(state): State<AppState>,
    _operator: Operator,
    params: RawPathParams,
    ApiQuery(window): ApiQuery<Window>,
) -> ApiResult<Json<Vec<GpuReading>>> {
    let node = super::nodes::find(&state.db, &params).await?;
    let minutes = window.minutes.unwrap_or(DEFAULT_MINUTES);
    if !(1..=MAX_MINUTES).contains(&minutes) {
        return Err(ApiError::bad_request(
            "invalid_window",
            format!("minutes must be between 1 and {MAX_MINUTES}"),
        ));
    }
    let since = state.clock.now() - TimeDelta::minutes(minutes);
    let rows = gpu_telemetry::Entity::find()
        .filter(gpu_telemetry::Column::NodeId.eq(node.id))
        .filter(gpu_telemetry::Column::SampledAt.gte(since))
        .order_by_asc(gpu_telemetry::Column::SampledAt)
        .order_by_asc(gpu_telemetry::Column::GpuIndex)
        .all(&state.db)
        .await?;
    Ok(Json(
        rows.into_iter()
            .map(|r| GpuReading {
                gpu_index: r.gpu_index,
                sampled_at: r.sampled_at,
                utilization_pct: r.utilization_pct,
                memory_used_mib: r.memory_used_mib,
                temperature_c: r.temperature_c,
                power_w: r.power_w,
            })
            .collect(),
    ))
}

/// Drops readings older than `KEPT`; returns how many.
pub async fn prune(
    db: &impl sea_orm::ConnectionTrait,
    now: DateTime<Utc>,
) -> Result<u64, sea_orm::DbErr> {
    Ok(gpu_telemetry::Entity::delete_many()
        .filter(gpu_telemetry::Column::SampledAt.lt(now - KEPT))
        .exec(db)
        .await?
        .rows_affected)
}
