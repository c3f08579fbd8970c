//! Node agents: operators mint join tokens, an agent registers its node and
//! GPUs with one and gets a node credential, then heartbeats telemetry,
//! fetches its assignments and reports what its workloads do. A node whose
//! heartbeats stop becomes unhealthy and its work moves on.

pub mod api;
pub mod credentials;
pub mod health;
pub mod join_tokens;
pub mod logs;
pub mod node_auth;
pub mod reports;

use utoipa_axum::router::OpenApiRouter;

use gantry_core::state::AppState;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .merge(join_tokens::routes())
        .merge(api::routes())
        .merge(reports::routes())
        .merge(credentials::routes())
}

/// An agent speaks only for orders that hold GPUs on its own node; any
/// other order is unknown to it.
pub async fn holds_on(
    db: &impl sea_orm::ConnectionTrait,
    order_id: uuid::Uuid,
    node_id: uuid::Uuid,
) -> gantry_core::error::ApiResult<()> {
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};

    use gantry_entities::allocation;
    let holds = allocation::Entity::find()
        .filter(allocation::Column::NodeId.eq(node_id))
        .filter(allocation::Column::OrderId.eq(order_id))
        .filter(allocation::Column::State.ne(gantry_types::classes::AllocationState::Released))
        .one(db)
        .await?
        .is_some();
    if holds {
        Ok(())
    } else {
        Err(gantry_core::error::ApiError::not_found(
            gantry_core::error::Resource::Order,
            order_id,
        ))
    }
}
