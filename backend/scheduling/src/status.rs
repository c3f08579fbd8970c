//! Which replica runs the scheduling loop, for operators.

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::{LEASE, lease};
use gantry_core::auth::principal::Operator;
use gantry_core::error::{ApiResult, ProblemResponses};
use gantry_core::state::AppState;

#[derive(Debug, Serialize, ToSchema)]
pub struct SchedulerStatus {
    /// This replica's name on the scheduler lease.
    pub replica: String,
    /// Whether this replica runs the loop now.
    pub leading: bool,
    /// The replica holding the lease, if any holds it.
    pub lease_holder: Option<String>,
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(scheduler_status))
}

/// Which replica runs the scheduling loop.
#[utoipa::path(
    get,
    path = "/admin/scheduler",
    tag = "admin",
    responses((status = 200, description = "The scheduler lease", body = SchedulerStatus), ProblemResponses),
    security(("bearer" = []))
)]
async fn scheduler_status(
    State(state): State<AppState>,
    _operator: Operator,
) -> ApiResult<Json<SchedulerStatus>> {
    Ok(Json(SchedulerStatus {
        replica: state.scheduler.holder().to_owned(),
        leading: state.scheduler.is_leader(),
        lease_holder: lease::holder(&state.db, LEASE).await?,
    }))
}
