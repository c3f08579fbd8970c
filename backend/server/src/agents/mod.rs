//! Node agents: operators mint join tokens, an agent registers its node and
//! GPUs with one and gets a node credential, then heartbeats telemetry,
//! fetches its assignments and reports what its workloads do. A node whose
//! heartbeats stop becomes unhealthy and its work moves on.

pub mod api;
pub mod health;
pub mod join_tokens;
pub mod node_auth;

use utoipa_axum::router::OpenApiRouter;

use crate::app::AppState;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .merge(join_tokens::routes())
        .merge(api::routes())
}
