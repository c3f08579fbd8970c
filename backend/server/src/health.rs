//! Liveness and readiness for load balancers and orchestrators.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use gantry_core::error::{ApiError, ApiResult, ProblemResponses};
use gantry_core::state::AppState;

#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// `ok`
    pub status: String,
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(healthz))
        .routes(routes!(readyz))
}

/// The process is up.
#[utoipa::path(get, path = "/healthz", tag = "health", responses((status = 200, body = Health)))]
async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
    })
}

/// The database answers and every migration is applied.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "health",
    responses((status = 200, body = Health), ProblemResponses)
)]
async fn readyz(State(state): State<AppState>) -> ApiResult<Json<Health>> {
    match gantry_core::db::is_ready(&state.db).await {
        Ok(()) => Ok(Json(Health {
            status: "ok".into(),
        })),
        Err(error) => {
            tracing::warn!(error = %error, "not ready");
            Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "not_ready",
                "the database is unreachable or its schema is not current",
            ))
        }
    }
}
