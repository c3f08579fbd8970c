//! Join tokens: an operator mints one per region; agents register with it
//! until it expires or is revoked. The secret is shown once.

use axum::Json;
use axum::extract::{RawPathParams, State};
use axum::http::StatusCode;
use chrono::{DateTime, Duration, Utc};
use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, QueryOrder, Set};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use gantry_core::audit;
use gantry_core::auth::api_key_secret::{self, JOIN_PREFIX};
use gantry_core::auth::principal::{Actor, Operator};
use gantry_core::error::{ApiError, ApiResult, ProblemResponses, Resource};
use gantry_core::http::extract::{ApiJson, path_uuid};
use gantry_core::state::AppState;
use gantry_core::validate::Fields;
use gantry_entities::{join_token, node};

const TTL_MAX: i64 = 30 * 24 * 3600;

#[derive(Debug, Serialize, ToSchema)]
pub struct JoinTokenInfo {
    pub id: Uuid,
    pub region: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
    /// The one node it registers (again), when issued for one; such a
    /// token is spent by that registration.
    pub node: Option<String>,
    /// The token itself: returned once, when created.
    pub token: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateJoinToken {
    /// The region nodes joining with it belong to (name or id).
    #[schema(min_length = 1, max_length = 64)]
    pub region: String,
    /// Lifetime, 60 s to 30 days; one day when absent.
    #[schema(minimum = 60, maximum = 2592000)]
    pub expires_in_seconds: Option<i64>,
    /// Issue it for one node by name: needed to register a node that is
    /// registered already (a reinstall, a revoked credential). It must be
    /// the node's region.
    #[schema(pattern = "^[a-z0-9][a-z0-9-]{0,62}$")]
    pub node: Option<String>,
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_join_tokens, create_join_token))
        .routes(routes!(revoke_join_token))
}

/// Every join token, newest first, without secrets.
#[utoipa::path(
    get,
    path = "/admin/join-tokens",
    tag = "admin",
    responses((status = 200, description = "Join tokens", body = Vec<JoinTokenInfo>), ProblemResponses),
    security(("bearer" = []))
)]
async fn list_join_tokens(
    State(state): State<AppState>,
    _operator: Operator,
) -> ApiResult<Json<Vec<JoinTokenInfo>>> {
    let regions = gantry_catalog::region_names(&state.db).await?;
    let rows = join_token::Entity::find()
        .order_by_desc(join_token::Column::Id)
        .all(&state.db)
        .await?;
    Ok(Json(
        rows.into_iter()
            .map(|t| JoinTokenInfo {
                id: t.id,
                region: regions.get(&t.region_id).cloned().unwrap_or_default(),
                created_at: t.created_at,
                expires_at: t.expires_at,
                revoked_at: t.revoked_at,
                node: t.node_name,
                token: None,
            })
            .collect(),
    ))
}

/// Mints a join token for a region.
#[utoipa::path(
    post,
    path = "/admin/join-tokens",
    tag = "admin",
    request_body = CreateJoinToken,
    responses((status = 201, description = "The token, shown once", body = JoinTokenInfo), ProblemResponses),
    security(("bearer" = []))
)]
async fn create_join_token(
    State(state): State<AppState>,
    operator: Operator,
    actor: Actor,
    ApiJson(request): ApiJson<CreateJoinToken>,
) -> ApiResult<(StatusCode, Json<JoinTokenInfo>)> {
    let ttl = request.expires_in_seconds.unwrap_or(24 * 3600);
    let mut fields = Fields::default();
    fields.range("expires_in_seconds", ttl, 60, TTL_MAX);
    if let Some(node) = &request.node {
        fields.slug("node", node);
    }
    fields.finish()?;
    let txn = gantry_core::db::write(&state.db).await?;
    let region = gantry_catalog::region_in_body(&txn, &request.region).await?;
    if let Some(name) = &request.node
        && let Some(existing) = node::Entity::find()
            .filter(node::Column::Name.eq(name))
            .one(&txn)
            .await?
        && existing.region_id != region.id
    {
        return Err(ApiError::unprocessable(
            "region_mismatch",
            format!("node {name} is not in region {}", region.name),
        ));
    }
    let id = Uuid::now_v7();
    let secret = api_key_secret::generate_with(JOIN_PREFIX, id);
    let now = Utc::now();
    let row = join_token::ActiveModel {
        id: Set(id),
        secret_hash: Set(secret.secret_hash),
        region_id: Set(region.id),
        created_by: Set(Some(operator.user.id)),
        created_at: Set(now),
        expires_at: Set(now + Duration::seconds(ttl)),
        revoked_at: Set(None),
        node_name: Set(request.node.clone()),
    }
    .insert(&txn)
    .await?;
    audit::platform(
        &txn,
        &actor,
        "join_token.create",
        "join_token",
        id,
        serde_json::json!({ "region": region.name, "expires_at": row.expires_at, "node": row.node_name }),
    )
    .await?;
    txn.commit().await?;
    Ok((
        StatusCode::CREATED,
        Json(JoinTokenInfo {
            id,
            region: region.name,
            created_at: row.created_at,
            expires_at: row.expires_at,
            revoked_at: None,
            node: row.node_name,
            token: Some(secret.token),
        }),
    ))
}

/// Revokes a join token; nodes that joined with it stay.
#[utoipa::path(
    delete,
    path = "/admin/join-tokens/{token_id}",
    tag = "admin",
    params(("token_id" = Uuid, Path, description = "Join token id")),
    responses((status = 204, description = "Revoked"), ProblemResponses),
    security(("bearer" = []))
)]
async fn revoke_join_token(
    State(state): State<AppState>,
    _operator: Operator,
    actor: Actor,
    params: RawPathParams,
) -> ApiResult<StatusCode> {
    let id = path_uuid(&params, "token_id", Resource::JoinToken)?;
    let txn = gantry_core::db::write(&state.db).await?;
    let current = join_token::Entity::find_by_id(id)
        .one(&txn)
        .await?
        .ok_or_else(|| ApiError::not_found(Resource::JoinToken, id))?;
    if current.revoked_at.is_none() {
        let mut row: join_token::ActiveModel = current.into();
        row.revoked_at = Set(Some(Utc::now()));
        row.update(&txn).await?;
        let details = serde_json::json!({});
        audit::platform(&txn, &actor, "join_token.revoke", "join_token", id, details).await?;
    }
    txn.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}
