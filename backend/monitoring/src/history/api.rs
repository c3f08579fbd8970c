//! `GET /admin/history`: the fleet's history for the operator's charts.

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{History, Range};
use gantry_core::auth::principal::Operator;
use gantry_core::error::{ApiResult, ProblemResponses};
use gantry_core::http::extract::ApiQuery;
use gantry_core::state::AppState;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct Window {
    /// `hour` (one-minute steps), `day` (15 minutes) or `week` (one hour);
    /// `hour` when absent.
    pub range: Option<Range>,
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(fleet_history))
}

/// The fleet over the last hour, day or week: GPUs allocated, free and
/// schedulable per model, waiting orders and the p95 admission wait,
/// GPU-hours per organization, and GPU utilization per model from agents'
/// telemetry. The same figures the scheduling leader publishes on
/// `/metrics`, folded into one point per interval and kept for the
/// configured retention.
#[utoipa::path(
    get,
    path = "/admin/history",
    tag = "admin",
    params(Window),
    responses((status = 200, description = "Series over the range", body = History), ProblemResponses),
    security(("bearer" = []))
)]
async fn fleet_history(
    State(state): State<AppState>,
    _operator: Operator,
    ApiQuery(window): ApiQuery<Window>,
) -> ApiResult<Json<History>> {
    let every = i64::try_from(state.config.history_interval_seconds).unwrap_or(60);
    let history = super::read(
        &state.db,
        window.range.unwrap_or(Range::Hour),
        state.clock.now(),
        every,
    )
    .await?;
    Ok(Json(history))
}
