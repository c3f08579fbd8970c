//! Members of an organization and their roles.

use axum::Json;
use axum::extract::{RawPathParams, State};
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter, Set,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::access::{OrgAccess, OrgScope, need};
use super::orgs;
use super::roles::{OrgRole, Requirement};
use crate::auth::accounts::normalize_email;
use gantry_core::audit::{self, Change};
use gantry_core::auth::principal::Principal;
use gantry_core::error::{ApiError, ApiResult, ProblemResponses, Resource};
use gantry_core::http::extract::{ApiJson, ApiQuery, path_uuid};
use gantry_core::http::pagination::{Page, PageQuery};
use gantry_core::state::AppState;
use gantry_core::validate::Fields;
use gantry_entities::{membership, user};

#[derive(Debug, Serialize, ToSchema)]
pub struct Member {
    pub user_id: Uuid,
    pub email: String,
    pub name: String,
    pub role: OrgRole,
    pub joined_at: DateTime<Utc>,
}

impl Member {
    fn new(m: membership::Model, u: user::Model) -> Self {
        Self {
            user_id: u.id,
            email: u.email,
            name: u.name,
            role: m.role,
            joined_at: m.created_at,
        }
    }
}

/// Adds an existing user, found by email, to the organization.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddMember {
    #[schema(format = "email", max_length = 254)]
    pub email: String,
    pub role: OrgRole,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChangeRole {
    pub role: OrgRole,
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_members, add_member))
        .routes(routes!(change_role, remove_member))
}

/// Only an owner may make an owner or touch one.
pub(super) fn check_owner_rule(scope: &OrgScope, roles: &[OrgRole]) -> Result<(), ApiError> {
    if roles.contains(&OrgRole::Owner) && !scope.role.satisfies(Requirement::Owner) {
        return Err(ApiError::forbidden(
            "only an owner may grant, change or remove the owner role",
        ));
    }
    Ok(())
}

/// Refuses a change that would leave the organization without an owner.
/// Call with the organization locked (see [`orgs::lock`]).
async fn keep_an_owner(
    db: &impl ConnectionTrait,
    scope: &OrgScope,
    target: &membership::Model,
) -> Result<(), ApiError> {
    if target.role != OrgRole::Owner {
        return Ok(());
    }
    let owners = scope
        .select::<membership::Entity>()
        .filter(membership::Column::Role.eq(OrgRole::Owner))
        .count(db)
        .await?;
    if owners <= 1 {
        return Err(ApiError::conflict(
            "last_owner",
            "the organization's last owner cannot be removed or demoted; make someone else owner first",
        ));
    }
    Ok(())
}

async fn find_member(
    db: &impl ConnectionTrait,
    scope: &OrgScope,
    user_id: Uuid,
) -> ApiResult<membership::Model> {
    scope
        .select::<membership::Entity>()
        .filter(membership::Column::UserId.eq(user_id))
        .one(db)
        .await?
        .ok_or_else(|| ApiError::not_found(Resource::Member, user_id))
}

/// The organization's members.
#[utoipa::path(
    get,
    path = "/orgs/{org_id}/members",
    tag = "members",
    params(("org_id" = Uuid, Path, description = "Organization id"), PageQuery),
    responses((status = 200, description = "A page of members", body = Page<Member>), ProblemResponses),
    security(("bearer" = []))
)]
async fn list_members(
    State(state): State<AppState>,
    access: OrgAccess<need::AnyRole>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Json<Page<Member>>> {
    let request = query.validate()?;
    let rows = request
        .ascending(
            access.scope.select::<membership::Entity>(),
            membership::Column::UserId,
        )
        .find_also_related(user::Entity)
        .all(&state.db)
        .await?;
    let rows: Vec<(membership::Model, user::Model)> = rows
        .into_iter()
        .filter_map(|(m, u)| u.map(|u| (m, u)))
        .collect();
    Ok(Json(Page::from_rows(
        rows,
        request,
        |(m, _)| m.user_id,
        |(m, u)| Member::new(m, u),
    )))
}

/// Adds an existing user to the organization.
#[utoipa::path(
    post,
    path = "/orgs/{org_id}/members",
    tag = "members",
    params(
        ("org_id" = Uuid, Path, description = "Organization id"),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes a retry return the first response"),
    ),
    request_body = AddMember,
    responses((status = 201, description = "The new member", body = Member), ProblemResponses),
    security(("bearer" = []))
)]
async fn add_member(
    State(state): State<AppState>,
    access: OrgAccess<need::Admin>,
    ApiJson(request): ApiJson<AddMember>,
) -> ApiResult<(StatusCode, Json<Member>)> {
    let email = checked_email(&request.email)?;
    let scope = &access.scope;
    check_owner_rule(scope, &[request.role])?;
    let account = user::Entity::find()
        .filter(user::Column::Email.eq(email))
        .one(&state.db)
        .await?
        .ok_or_else(|| {
            ApiError::unprocessable(
                "user_not_found",
                "no user has this email; invite them instead (POST /orgs/{org_id}/invitations)",
            )
        })?;

    let txn = gantry_core::db::write(&state.db).await?;
    orgs::lock(&txn, scope.org_id).await?;
    if find_member(&txn, scope, account.id).await.is_ok() {
        return Err(ApiError::conflict(
            "already_member",
            "this user is already a member",
        ));
    }
    let now = Utc::now();
    let row = membership::ActiveModel {
        org_id: Set(scope.org_id),
        user_id: Set(account.id),
        role: Set(request.role),
        created_at: Set(now),
        updated_at: Set(now),
    }
    .insert(&txn)
    .await?;
    audit::record(
        &txn,
        Change {
            org_id: Some(scope.org_id),
            action: "member.add",
            target_type: "user",
            target_id: Some(account.id.to_string()),
            details: serde_json::json!({ "email": account.email, "role": request.role }),
            actor: &access.actor,
        },
    )
    .await?;
    txn.commit().await?;
    state.identities.forget_user(account.id);
    Ok((StatusCode::CREATED, Json(Member::new(row, account))))
}

/// The email a member is added or invited by, normalized, or a 422.
pub(super) fn checked_email(email: &str) -> Result<String, ApiError> {
    let normalized = normalize_email(email);
    let mut fields = Fields::default();
    if normalized.is_none() {
        fields.push("email", "must be a valid email address");
    }
    fields.finish()?;
    Ok(normalized.unwrap_or_default())
}

fn member_path(params: &RawPathParams) -> Result<Uuid, ApiError> {
    path_uuid(params, "user_id", Resource::Member)
}

/// Changes a member's role.
#[utoipa::path(
    patch,
    path = "/orgs/{org_id}/members/{user_id}",
    tag = "members",
    params(
        ("org_id" = Uuid, Path, description = "Organization id"),
        ("user_id" = Uuid, Path, description = "The member's user id"),
    ),
    request_body = ChangeRole,
    responses((status = 200, description = "The member with the new role", body = Member), ProblemResponses),
    security(("bearer" = []))
)]
async fn change_role(
    State(state): State<AppState>,
    access: OrgAccess<need::Admin>,
    params: RawPathParams,
    ApiJson(request): ApiJson<ChangeRole>,
) -> ApiResult<Json<Member>> {
    let user_id = member_path(&params)?;
    let scope = &access.scope;
    let txn = gantry_core::db::write(&state.db).await?;
    orgs::lock(&txn, scope.org_id).await?;
    let current = find_member(&txn, scope, user_id).await?;
    check_owner_rule(scope, &[current.role, request.role])?;
    if request.role != OrgRole::Owner {
        keep_an_owner(&txn, scope, &current).await?;
    }
    let from = current.role;
    let mut row: membership::ActiveModel = current.into();
    row.role = Set(request.role);
    row.updated_at = Set(Utc::now());
    let updated = row.update(&txn).await?;
    audit::record(
        &txn,
        Change {
            org_id: Some(scope.org_id),
            action: "member.role_change",
            target_type: "user",
            target_id: Some(user_id.to_string()),
            details: serde_json::json!({ "from": from, "to": request.role }),
            actor: &access.actor,
        },
    )
    .await?;
    let account = user::Entity::find_by_id(user_id)
        .one(&txn)
        .await?
        .ok_or_else(|| ApiError::not_found(Resource::Member, user_id))?;
    txn.commit().await?;
    state.identities.forget_user(user_id);
    Ok(Json(Member::new(updated, account)))
}

/// Removes a member from the organization. Anyone may remove themselves.
#[utoipa::path(
    delete,
    path = "/orgs/{org_id}/members/{user_id}",
    tag = "members",
    params(
        ("org_id" = Uuid, Path, description = "Organization id"),
        ("user_id" = Uuid, Path, description = "The member's user id"),
    ),
    responses((status = 204, description = "Removed"), ProblemResponses),
    security(("bearer" = []))
)]
async fn remove_member(
    State(state): State<AppState>,
    access: OrgAccess<need::AnyRole>,
    params: RawPathParams,
) -> ApiResult<StatusCode> {
    let user_id = member_path(&params)?;
    let scope = &access.scope;
    let leaving = matches!(scope.principal, Principal::User { user_id: me } if me == user_id);
    if !leaving && !scope.role.satisfies(Requirement::Admin) {
        return Err(ApiError::forbidden(format!(
            "removing another member needs {}; the caller is {}",
            Requirement::Admin.describe(),
            scope.role.as_str()
        )));
    }
    let txn = gantry_core::db::write(&state.db).await?;
    orgs::lock(&txn, scope.org_id).await?;
    let current = find_member(&txn, scope, user_id).await?;
    if !leaving {
        check_owner_rule(scope, &[current.role])?;
    }
    keep_an_owner(&txn, scope, &current).await?;
    membership::Entity::delete_by_id((scope.org_id, user_id))
        .exec(&txn)
        .await?;
    audit::record(
        &txn,
        Change {
            org_id: Some(scope.org_id),
            action: "member.remove",
            target_type: "user",
            target_id: Some(user_id.to_string()),
            details: serde_json::json!({ "role": current.role }),
            actor: &access.actor,
        },
    )
    .await?;
    txn.commit().await?;
    state.identities.forget_user(user_id);
    Ok(StatusCode::NO_CONTENT)
}
