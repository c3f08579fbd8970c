//! Node credentials after registration: an operator asks for a rotation
//! (the agent learns of it from its next heartbeat and fetches a new one,
//! the old one working until the new one is first used) or revokes one
//! (the agent is refused and its node needs a new join token for itself).

use axum::Json;
use axum::extract::{RawPathParams, State};
use axum::http::StatusCode;
use sea_orm::sea_query::Expr;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::api::Registered;
use super::node_auth::NodeAgent;
use gantry_core::audit;
use gantry_core::auth::api_key_secret::{self, NODE_PREFIX};
use gantry_core::auth::principal::{Actor, Operator};
use gantry_core::error::{ApiError, ApiResult, ProblemResponses, Resource};
use gantry_core::http::extract::path_uuid;
use gantry_core::state::AppState;
use gantry_entities::node;
use gantry_types::classes::DriverKind;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(rotate_own_credential))
        .routes(routes!(request_rotation))
        .routes(routes!(revoke_credential))
}

/// Applies `change` to the agent node named by the path, with its audit
/// row, in one transaction.
async fn change_node(
    state: &AppState,
    actor: &Actor,
    params: &RawPathParams,
    action: &'static str,
    change: sea_orm::UpdateMany<node::Entity>,
) -> ApiResult<()> {
    let id = path_uuid(params, "node_id", Resource::Node)?;
    let txn = gantry_core::db::write(&state.db).await?;
    let current = node::Entity::find_by_id(id)
        .one(&txn)
        .await?
        .filter(|n| n.driver == DriverKind::Agent)
        .ok_or_else(|| ApiError::not_found(Resource::Node, id))?;
    change
        .filter(node::Column::Id.eq(current.id))
        .exec(&txn)
        .await?;
    let details = serde_json::json!({ "name": current.name });
    audit::platform(&txn, actor, action, "node", current.id, details).await?;
    txn.commit().await?;
    Ok(())
}

/// Issues the calling node a new credential. The current one keeps working
/// until the new one is first used, so an agent that crashes before saving
/// it loses nothing.
#[utoipa::path(
    post,
    path = "/agent/credential",
    tag = "agent",
    responses((status = 201, description = "The new credential, shown once", body = Registered), ProblemResponses),
    security(("bearer" = []))
)]
async fn rotate_own_credential(
    State(state): State<AppState>,
    agent: NodeAgent,
) -> ApiResult<(StatusCode, Json<Registered>)> {
    let secret = api_key_secret::generate_with(NODE_PREFIX, agent.node.id);
    node::Entity::update_many()
        .col_expr(
            node::Column::CredentialNextHash,
            Expr::value(Some(secret.secret_hash)),
        )
        .col_expr(node::Column::CredentialRotate, Expr::value(false))
        .filter(node::Column::Id.eq(agent.node.id))
        .exec(&state.db)
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(Registered {
            node_id: agent.node.id,
            credential: secret.token,
            heartbeat_deadline_seconds: state.config.agent_heartbeat_deadline_seconds,
        }),
    ))
}

/// Asks a node's agent to fetch a new credential at its next heartbeat.
#[utoipa::path(
    post,
    path = "/admin/nodes/{node_id}/credential/rotate",
    tag = "admin",
    params(("node_id" = Uuid, Path, description = "Node id")),
    responses((status = 202, description = "The agent rotates at its next heartbeat"), ProblemResponses),
    security(("bearer" = []))
)]
async fn request_rotation(
    State(state): State<AppState>,
    _operator: Operator,
    actor: Actor,
    params: RawPathParams,
) -> ApiResult<StatusCode> {
    let change =
        node::Entity::update_many().col_expr(node::Column::CredentialRotate, Expr::value(true));
    change_node(&state, &actor, &params, "node.credential_rotate", change).await?;
    Ok(StatusCode::ACCEPTED)
}

/// Revokes a node's credential at once: its agent is refused from its next
/// call, and the node registers again only with a join token issued for it.
#[utoipa::path(
    post,
    path = "/admin/nodes/{node_id}/credential/revoke",
    tag = "admin",
    params(("node_id" = Uuid, Path, description = "Node id")),
    responses((status = 204, description = "Revoked"), ProblemResponses),
    security(("bearer" = []))
)]
async fn revoke_credential(
    State(state): State<AppState>,
    _operator: Operator,
    actor: Actor,
    params: RawPathParams,
) -> ApiResult<StatusCode> {
    let change = node::Entity::update_many()
        .col_expr(node::Column::CredentialHash, Expr::value(None::<String>))
        .col_expr(
            node::Column::CredentialNextHash,
            Expr::value(None::<String>),
        )
        .col_expr(node::Column::CredentialRotate, Expr::value(false));
    change_node(&state, &actor, &params, "node.credential_revoke", change).await?;
    Ok(StatusCode::NO_CONTENT)
}
