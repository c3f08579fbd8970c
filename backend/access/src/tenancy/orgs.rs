//! Organizations: the tenants of the platform.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, JoinType, QueryFilter,
    QuerySelect, RelationTrait, Set,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::access::{OrgAccess, need};
use super::roles::OrgRole;
use gantry_core::audit::{self, Change};
use gantry_core::auth::principal::{Actor, Operator, UserSession};
use gantry_core::error::{ApiError, ApiResult, ProblemResponses, Resource};
use gantry_core::http::extract::{ApiJson, ApiQuery};
use gantry_core::http::pagination::{Page, PageQuery, PageRequest};
use gantry_core::state::AppState;
use gantry_core::validate::Fields;
use gantry_entities::{membership, organization};

pub const NAME_MAX: usize = 200;

#[derive(Debug, Serialize, ToSchema)]
pub struct Organization {
    pub id: Uuid,
    pub name: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<organization::Model> for Organization {
    fn from(row: organization::Model) -> Self {
        Self {
            id: row.id,
            name: row.name,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateOrganization {
    #[schema(
        min_length = 1,
        max_length = 200,
        pattern = "^[^\\x00-\\x1f\\x7f-\\x9f]*[^\\s\\x00-\\x1f\\x7f-\\x9f][^\\x00-\\x1f\\x7f-\\x9f]*$"
    )]
    pub name: String,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateOrganization {
    #[schema(
        min_length = 1,
        max_length = 200,
        pattern = "^[^\\x00-\\x1f\\x7f-\\x9f]*[^\\s\\x00-\\x1f\\x7f-\\x9f][^\\x00-\\x1f\\x7f-\\x9f]*$"
    )]
    pub name: Option<String>,
}

/// Creates an organization owned by `owner`, inside the caller's transaction.
pub async fn create_in(
    db: &impl ConnectionTrait,
    actor: &Actor,
    owner: Uuid,
    name: String,
) -> Result<Organization, ApiError> {
    let now = Utc::now();
    let org = organization::ActiveModel {
        id: Set(Uuid::now_v7()),
        name: Set(name),
        created_at: Set(now),
        updated_at: Set(now),
    }
    .insert(db)
    .await?;
    membership::ActiveModel {
        org_id: Set(org.id),
        user_id: Set(owner),
        role: Set(OrgRole::Owner),
        created_at: Set(now),
        updated_at: Set(now),
    }
    .insert(db)
    .await?;
    audit::record(
        db,
        Change {
            org_id: Some(org.id),
            action: "organization.create",
            target_type: "organization",
            target_id: Some(org.id.to_string()),
            details: serde_json::json!({ "name": org.name, "owner": owner }),
            actor,
        },
    )
    .await?;
    Ok(org.into())
}

/// Takes the organization's write lock for the rest of the transaction, so
/// that checks such as "the last owner stays" cannot race with another
/// change to the same organization (a row lock on PostgreSQL, the database
/// write lock on SQLite).
/// The organization named by the `{org_id}` path parameter, for operator
/// routes (tenant routes go through `OrgAccess`).
pub async fn from_path(
    db: &impl ConnectionTrait,
    params: &axum::extract::RawPathParams,
) -> ApiResult<organization::Model> {
    let id = gantry_core::http::extract::path_uuid(params, "org_id", Resource::Organization)?;
    by_id(db, id).await
}

pub async fn by_id(db: &impl ConnectionTrait, id: Uuid) -> ApiResult<organization::Model> {
    organization::Entity::find_by_id(id)
        .one(db)
        .await?
        .ok_or_else(|| ApiError::not_found(Resource::Organization, id))
}

pub async fn lock(db: &impl ConnectionTrait, org_id: Uuid) -> Result<(), ApiError> {
    let touched = organization::Entity::update_many()
        .col_expr(
            organization::Column::UpdatedAt,
            sea_orm::sea_query::Expr::col(organization::Column::UpdatedAt),
        )
        .filter(organization::Column::Id.eq(org_id))
        .exec(db)
        .await?;
    if touched.rows_affected == 0 {
        return Err(ApiError::not_found(Resource::Organization, org_id));
    }
    Ok(())
}

async fn page_of(
    db: &impl ConnectionTrait,
    select: sea_orm::Select<organization::Entity>,
    request: PageRequest,
) -> ApiResult<Page<Organization>> {
    let rows = request
        .ascending(select, organization::Column::Id)
        .all(db)
        .await?;
    Ok(Page::from_rows(rows, request, |o| o.id, Organization::from))
}

/// The names of the organizations `ids`, for labels and logs; no query
/// for none (agents and the leader ask on every round, mostly for none).
pub async fn names(
    db: &impl sea_orm::ConnectionTrait,
    ids: impl IntoIterator<Item = Uuid>,
) -> Result<std::collections::HashMap<Uuid, String>, sea_orm::DbErr> {
    let ids: std::collections::HashSet<Uuid> = ids.into_iter().collect();
    if ids.is_empty() {
        return Ok(std::collections::HashMap::new());
    }
    Ok(organization::Entity::find()
        .filter(organization::Column::Id.is_in(ids))
        .select_only()
        .columns([organization::Column::Id, organization::Column::Name])
        .into_tuple::<(Uuid, String)>()
        .all(db)
        .await?
        .into_iter()
        .collect())
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_orgs, create_org))
        .routes(routes!(get_org, update_org))
        .routes(routes!(list_all_orgs))
}

/// The organizations the signed-in user belongs to.
#[utoipa::path(
    get,
    path = "/orgs",
    tag = "organizations",
    params(PageQuery),
    responses((status = 200, description = "A page of organizations", body = Page<Organization>), ProblemResponses),
    security(("bearer" = []))
)]
async fn list_orgs(
    State(state): State<AppState>,
    session: UserSession,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Json<Page<Organization>>> {
    let request = query.validate()?;
    let select = organization::Entity::find()
        .join(
            JoinType::InnerJoin,
            organization::Relation::Membership.def(),
        )
        .filter(membership::Column::UserId.eq(session.user_id));
    Ok(Json(page_of(&state.db, select, request).await?))
}

/// Creates an organization owned by the signed-in user.
#[utoipa::path(
    post,
    path = "/orgs",
    tag = "organizations",
    request_body = CreateOrganization,
    params(("Idempotency-Key" = Option<String>, Header, description = "Makes a retry return the first response", max_length = 255, pattern = "^[\\x21-\\x7e]{1,255}$")),
    responses((status = 201, description = "The new organization", body = Organization), ProblemResponses),
    security(("bearer" = []))
)]
async fn create_org(
    State(state): State<AppState>,
    session: UserSession,
    actor: Actor,
    ApiJson(request): ApiJson<CreateOrganization>,
) -> ApiResult<(StatusCode, Json<Organization>)> {
    let mut fields = Fields::default();
    let name = fields.name("name", &request.name, NAME_MAX);
    fields.finish()?;
    let txn = gantry_core::db::write(&state.db).await?;
    let org = create_in(&txn, &actor, session.user_id, name).await?;
    txn.commit().await?;
    state.identities.forget_user(session.user_id);
    Ok((StatusCode::CREATED, Json(org)))
}

/// One organization.
#[utoipa::path(
    get,
    path = "/orgs/{org_id}",
    tag = "organizations",
    params(("org_id" = Uuid, Path, description = "Organization id")),
    responses((status = 200, description = "The organization", body = Organization), ProblemResponses),
    security(("bearer" = []))
)]
async fn get_org(
    State(state): State<AppState>,
    access: OrgAccess<need::AnyRole>,
) -> ApiResult<Json<Organization>> {
    let org = organization::Entity::find_by_id(access.scope.org_id)
        .one(&state.db)
        .await?
        .ok_or_else(|| ApiError::not_found(Resource::Organization, access.scope.org_id))?;
    Ok(Json(org.into()))
}

/// Renames an organization.
#[utoipa::path(
    patch,
    path = "/orgs/{org_id}",
    tag = "organizations",
    params(("org_id" = Uuid, Path, description = "Organization id")),
    request_body = UpdateOrganization,
    responses((status = 200, description = "The updated organization", body = Organization), ProblemResponses),
    security(("bearer" = []))
)]
async fn update_org(
    State(state): State<AppState>,
    access: OrgAccess<need::Admin>,
    ApiJson(request): ApiJson<UpdateOrganization>,
) -> ApiResult<Json<Organization>> {
    let mut fields = Fields::default();
    let name = request
        .name
        .map(|name| fields.name("name", &name, NAME_MAX));
    fields.finish()?;
    let org_id = access.scope.org_id;
    let txn = gantry_core::db::write(&state.db).await?;
    let current = organization::Entity::find_by_id(org_id)
        .one(&txn)
        .await?
        .ok_or_else(|| ApiError::not_found(Resource::Organization, org_id))?;
    let mut row: organization::ActiveModel = current.clone().into();
    if let Some(name) = &name {
        row.name = Set(name.clone());
    }
    row.updated_at = Set(Utc::now());
    let updated = row.update(&txn).await?;
    audit::record(
        &txn,
        Change {
            org_id: Some(org_id),
            action: "organization.update",
            target_type: "organization",
            target_id: Some(org_id.to_string()),
            details: serde_json::json!({ "name": { "from": current.name, "to": updated.name } }),
            actor: &access.actor,
        },
    )
    .await?;
    txn.commit().await?;
    state.identities.forget_all_users();
    Ok(Json(updated.into()))
}

/// Every organization on the platform.
#[utoipa::path(
    get,
    path = "/admin/orgs",
    tag = "admin",
    params(PageQuery),
    responses((status = 200, description = "A page of organizations", body = Page<Organization>), ProblemResponses),
    security(("bearer" = []))
)]
async fn list_all_orgs(
    State(state): State<AppState>,
    _operator: Operator,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Json<Page<Organization>>> {
    let request = query.validate()?;
    Ok(Json(
        page_of(&state.db, organization::Entity::find(), request).await?,
    ))
}
