//! Invitations: an admin invites someone by email before they have an
//! account; when that email signs up, the invitation is accepted and they
//! join with the invited role. Someone who already has an account is added
//! as a member instead (`POST /orgs/{org_id}/members`).

use axum::Json;
use axum::extract::{RawPathParams, State};
use axum::http::StatusCode;
use chrono::{DateTime, TimeDelta, Utc};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder, Set,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::access::{OrgAccess, need};
use super::orgs;
use super::roles::OrgRole;
use gantry_core::audit::{self, Change};
use gantry_core::auth::principal::Actor;
use gantry_core::error::{ApiError, ApiResult, ProblemResponses, Resource};
use gantry_core::http::extract::{ApiJson, path_uuid};
use gantry_core::state::AppState;
use gantry_entities::{invitation, membership, user};

/// How long an invitation waits for its sign-up.
const VALID_DAYS: i64 = 14;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Invite {
    #[schema(format = "email", max_length = 254)]
    pub email: String,
    pub role: OrgRole,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Invitation {
    pub id: Uuid,
    pub email: String,
    pub role: OrgRole,
    pub created_at: DateTime<Utc>,
    /// Signing up after this no longer joins the organization.
    pub expires_at: DateTime<Utc>,
}

impl From<invitation::Model> for Invitation {
    fn from(row: invitation::Model) -> Self {
        Self {
            id: row.id,
            email: row.email,
            role: row.role,
            created_at: row.created_at,
            expires_at: row.expires_at,
        }
    }
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_invitations, invite))
        .routes(routes!(revoke_invitation))
}

/// Invitations not yet accepted, revoked or lapsed.
fn pending(now: DateTime<Utc>) -> sea_orm::Condition {
    sea_orm::Condition::all()
        .add(invitation::Column::AcceptedAt.is_null())
        .add(invitation::Column::RevokedAt.is_null())
        .add(invitation::Column::ExpiresAt.gt(now))
}

/// The organization's pending invitations, oldest first.
#[utoipa::path(
    get,
    path = "/orgs/{org_id}/invitations",
    tag = "members",
    params(("org_id" = Uuid, Path, description = "Organization id")),
    responses((status = 200, description = "Pending invitations", body = Vec<Invitation>), ProblemResponses),
    security(("bearer" = []))
)]
async fn list_invitations(
    State(state): State<AppState>,
    access: OrgAccess<need::Admin>,
) -> ApiResult<Json<Vec<Invitation>>> {
    let rows = access
        .scope
        .select::<invitation::Entity>()
        .filter(pending(state.clock.now()))
        .order_by_asc(invitation::Column::Id)
        .all(&state.db)
        .await?;
    Ok(Json(rows.into_iter().map(Invitation::from).collect()))
}

/// Invites someone who has no account yet; they join when they sign up
/// with this email.
#[utoipa::path(
    post,
    path = "/orgs/{org_id}/invitations",
    tag = "members",
    params(("org_id" = Uuid, Path, description = "Organization id")),
    request_body = Invite,
    responses((status = 201, description = "The invitation", body = Invitation), ProblemResponses),
    security(("bearer" = []))
)]
async fn invite(
    State(state): State<AppState>,
    access: OrgAccess<need::Admin>,
    ApiJson(request): ApiJson<Invite>,
) -> ApiResult<(StatusCode, Json<Invitation>)> {
    let email = super::members::checked_email(&request.email)?;
    let scope = &access.scope;
    super::members::check_owner_rule(scope, &[request.role])?;
    if user::Entity::find()
        .filter(user::Column::Email.eq(&email))
        .one(&state.db)
        .await?
        .is_some()
    {
        return Err(ApiError::conflict(
            "user_exists",
            "this email already has an account: add them as a member",
        ));
    }
    let now = state.clock.now();
    let txn = gantry_core::db::write(&state.db).await?;
    orgs::lock(&txn, scope.org_id).await?;
    if scope
        .select::<invitation::Entity>()
        .filter(invitation::Column::Email.eq(&email))
        .filter(pending(now))
        .one(&txn)
        .await?
        .is_some()
    {
        return Err(ApiError::conflict(
            "already_invited",
            "this email has a pending invitation; revoke it to invite again",
        ));
    }
    let row = invitation::ActiveModel {
        id: Set(Uuid::now_v7()),
        org_id: Set(scope.org_id),
        email: Set(email.clone()),
        role: Set(request.role),
        invited_by: Set(access.actor.id),
        created_at: Set(now),
        expires_at: Set(now + TimeDelta::days(VALID_DAYS)),
        accepted_at: Set(None),
        revoked_at: Set(None),
    }
    .insert(&txn)
    .await?;
    audit::record(
        &txn,
        Change {
            org_id: Some(scope.org_id),
            action: "invitation.create",
            target_type: "invitation",
            target_id: Some(row.id.to_string()),
            details: serde_json::json!({ "email": email, "role": request.role }),
            actor: &access.actor,
        },
    )
    .await?;
    txn.commit().await?;
    Ok((StatusCode::CREATED, Json(row.into())))
}

/// Withdraws a pending invitation.
#[utoipa::path(
    delete,
    path = "/orgs/{org_id}/invitations/{invitation_id}",
    tag = "members",
    params(
        ("org_id" = Uuid, Path, description = "Organization id"),
        ("invitation_id" = Uuid, Path, description = "Invitation id"),
    ),
    responses((status = 204, description = "Revoked"), ProblemResponses),
    security(("bearer" = []))
)]
async fn revoke_invitation(
    State(state): State<AppState>,
    access: OrgAccess<need::Admin>,
    params: RawPathParams,
) -> ApiResult<StatusCode> {
    let id = path_uuid(&params, "invitation_id", Resource::Invitation)?;
    let now = state.clock.now();
    let txn = gantry_core::db::write(&state.db).await?;
    let row = access
        .scope
        .select::<invitation::Entity>()
        .filter(invitation::Column::Id.eq(id))
        .filter(pending(now))
        .one(&txn)
        .await?
        .ok_or_else(|| ApiError::not_found(Resource::Invitation, id))?;
    let email = row.email.clone();
    let mut revoked: invitation::ActiveModel = row.into();
    revoked.revoked_at = Set(Some(now));
    revoked.update(&txn).await?;
    audit::record(
        &txn,
        Change {
            org_id: Some(access.scope.org_id),
            action: "invitation.revoke",
            target_type: "invitation",
            target_id: Some(id.to_string()),
            details: serde_json::json!({ "email": email }),
            actor: &access.actor,
        },
    )
    .await?;
    txn.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Accepts every pending invitation for `email` inside the sign-up's
/// transaction: the new user joins each organization with its role.
/// Answers the organizations joined, oldest invitation first.
pub async fn accept(
    txn: &impl ConnectionTrait,
    actor: &Actor,
    user_id: Uuid,
    email: &str,
    now: DateTime<Utc>,
) -> Result<Vec<Uuid>, sea_orm::DbErr> {
    let rows = invitation::Entity::find()
        .filter(invitation::Column::Email.eq(email))
        .filter(pending(now))
        .order_by_asc(invitation::Column::CreatedAt)
        .all(txn)
        .await?;
    let mut joined = Vec::new();
    for row in rows {
        // One membership per organization, whatever was invited twice.
        if membership::Entity::find_by_id((row.org_id, user_id))
            .one(txn)
            .await?
            .is_none()
        {
            membership::ActiveModel {
                org_id: Set(row.org_id),
                user_id: Set(user_id),
                role: Set(row.role),
                created_at: Set(now),
                updated_at: Set(now),
            }
            .insert(txn)
            .await?;
            joined.push(row.org_id);
        }
        audit::record(
            txn,
            Change {
                org_id: Some(row.org_id),
                action: "invitation.accept",
                target_type: "user",
                target_id: Some(user_id.to_string()),
                details: serde_json::json!({ "email": email, "role": row.role, "invitation_id": row.id }),
                actor,
            },
        )
        .await?;
        let mut accepted: invitation::ActiveModel = row.into();
        accepted.accepted_at = Set(Some(now));
        accepted.update(txn).await?;
    }
    Ok(joined)
}
