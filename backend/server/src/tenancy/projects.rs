//! Projects: how an organization splits its work and, later, its quota.

use axum::Json;
use axum::extract::{RawPathParams, State};
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use sea_orm::{ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, Set};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::access::{OrgAccess, OrgScope, need};
use crate::app::AppState;
use crate::audit::{self, Change};
use crate::entities::project;
use crate::error::{ApiError, ApiResult, ProblemResponses, Resource};
use crate::http::extract::{ApiJson, ApiQuery, path_uuid};
use crate::http::pagination::{Page, PageQuery};
use crate::validate::Fields;

const NAME_MAX: usize = 100;
const DESCRIPTION_MAX: usize = 1000;

#[derive(Debug, Serialize, ToSchema)]
pub struct Project {
    pub id: Uuid,
    pub org_id: Uuid,
    pub name: String,
    pub description: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<project::Model> for Project {
    fn from(row: project::Model) -> Self {
        Self {
            id: row.id,
            org_id: row.org_id,
            name: row.name,
            description: row.description,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateProject {
    /// Unique within the organization.
    #[schema(
        min_length = 1,
        max_length = 100,
        pattern = "^[^\\x00-\\x1f\\x7f-\\x9f]*[^\\s\\x00-\\x1f\\x7f-\\x9f][^\\x00-\\x1f\\x7f-\\x9f]*$"
    )]
    pub name: String,
    #[serde(default)]
    #[schema(
        max_length = 1000,
        pattern = "^[^\\x00-\\x08\\x0b\\x0c\\x0e-\\x1f\\x7f-\\x9f]*$"
    )]
    pub description: String,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateProject {
    #[schema(
        min_length = 1,
        max_length = 100,
        pattern = "^[^\\x00-\\x1f\\x7f-\\x9f]*[^\\s\\x00-\\x1f\\x7f-\\x9f][^\\x00-\\x1f\\x7f-\\x9f]*$"
    )]
    pub name: Option<String>,
    #[schema(
        max_length = 1000,
        pattern = "^[^\\x00-\\x08\\x0b\\x0c\\x0e-\\x1f\\x7f-\\x9f]*$"
    )]
    pub description: Option<String>,
}

/// Refuses a project id that is not one of the organization's, as a body
/// names it (422: the request, not the path, is wrong).
pub async fn require_in(
    db: &impl ConnectionTrait,
    scope: &OrgScope,
    project_id: Option<Uuid>,
) -> ApiResult<()> {
    let Some(project_id) = project_id else {
        return Ok(());
    };
    let found = scope
        .select::<project::Entity>()
        .filter(project::Column::Id.eq(project_id))
        .one(db)
        .await?;
    match found {
        Some(_) => Ok(()),
        None => Err(ApiError::unprocessable(
            "unknown_project",
            format!("no project {project_id} in this organization"),
        )),
    }
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_projects, create_project))
        .routes(routes!(get_project, update_project, delete_project))
}

async fn find(
    db: &impl ConnectionTrait,
    scope: &OrgScope,
    params: &RawPathParams,
) -> ApiResult<project::Model> {
    let id = path_uuid(params, "project_id", Resource::Project)?;
    scope
        .select::<project::Entity>()
        .filter(project::Column::Id.eq(id))
        .one(db)
        .await?
        .ok_or_else(|| ApiError::not_found(Resource::Project, id))
}

async fn ensure_name_free(
    db: &impl ConnectionTrait,
    scope: &OrgScope,
    name: &str,
    except: Option<Uuid>,
) -> ApiResult<()> {
    let mut select = scope
        .select::<project::Entity>()
        .filter(project::Column::Name.eq(name));
    if let Some(id) = except {
        select = select.filter(project::Column::Id.ne(id));
    }
    if select.one(db).await?.is_some() {
        return Err(ApiError::conflict(
            "project_name_taken",
            format!("the organization already has a project named {name:?}"),
        ));
    }
    Ok(())
}

/// The organization's projects.
#[utoipa::path(
    get,
    path = "/orgs/{org_id}/projects",
    tag = "projects",
    params(("org_id" = Uuid, Path, description = "Organization id"), PageQuery),
    responses((status = 200, description = "A page of projects", body = Page<Project>), ProblemResponses),
    security(("bearer" = []))
)]
async fn list_projects(
    State(state): State<AppState>,
    access: OrgAccess<need::AnyRole>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Json<Page<Project>>> {
    let request = query.validate()?;
    let rows = request
        .ascending(
            access.scope.select::<project::Entity>(),
            project::Column::Id,
        )
        .all(&state.db)
        .await?;
    Ok(Json(Page::from_rows(
        rows,
        request,
        |p| p.id,
        Project::from,
    )))
}

/// Creates a project.
#[utoipa::path(
    post,
    path = "/orgs/{org_id}/projects",
    tag = "projects",
    params(
        ("org_id" = Uuid, Path, description = "Organization id"),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes a retry return the first response", max_length = 255, pattern = "^[\\x21-\\x7e]{1,255}$"),
    ),
    request_body = CreateProject,
    responses((status = 201, description = "The new project", body = Project), ProblemResponses),
    security(("bearer" = []))
)]
async fn create_project(
    State(state): State<AppState>,
    access: OrgAccess<need::Admin>,
    ApiJson(request): ApiJson<CreateProject>,
) -> ApiResult<(StatusCode, Json<Project>)> {
    let mut fields = Fields::default();
    let name = fields.name("name", &request.name, NAME_MAX);
    let description = fields.text("description", &request.description, DESCRIPTION_MAX);
    fields.finish()?;
    let scope = &access.scope;
    let txn = crate::db::write(&state.db).await?;
    ensure_name_free(&txn, scope, &name, None).await?;
    let now = Utc::now();
    let row = project::ActiveModel {
        id: Set(Uuid::now_v7()),
        org_id: Set(scope.org_id),
        name: Set(name),
        description: Set(description),
        created_at: Set(now),
        updated_at: Set(now),
    }
    .insert(&txn)
    .await?;
    audit::record(
        &txn,
        Change {
            org_id: Some(scope.org_id),
            action: "project.create",
            target_type: "project",
            target_id: Some(row.id.to_string()),
            details: serde_json::json!({ "name": row.name }),
            actor: &access.actor,
        },
    )
    .await?;
    txn.commit().await?;
    Ok((StatusCode::CREATED, Json(row.into())))
}

/// One project.
#[utoipa::path(
    get,
    path = "/orgs/{org_id}/projects/{project_id}",
    tag = "projects",
    params(
        ("org_id" = Uuid, Path, description = "Organization id"),
        ("project_id" = Uuid, Path, description = "Project id"),
    ),
    responses((status = 200, description = "The project", body = Project), ProblemResponses),
    security(("bearer" = []))
)]
async fn get_project(
    State(state): State<AppState>,
    access: OrgAccess<need::AnyRole>,
    params: RawPathParams,
) -> ApiResult<Json<Project>> {
    Ok(Json(find(&state.db, &access.scope, &params).await?.into()))
}

/// Renames a project or changes its description.
#[utoipa::path(
    patch,
    path = "/orgs/{org_id}/projects/{project_id}",
    tag = "projects",
    params(
        ("org_id" = Uuid, Path, description = "Organization id"),
        ("project_id" = Uuid, Path, description = "Project id"),
    ),
    request_body = UpdateProject,
    responses((status = 200, description = "The updated project", body = Project), ProblemResponses),
    security(("bearer" = []))
)]
async fn update_project(
    State(state): State<AppState>,
    access: OrgAccess<need::Admin>,
    params: RawPathParams,
    ApiJson(request): ApiJson<UpdateProject>,
) -> ApiResult<Json<Project>> {
    let mut fields = Fields::default();
    let name = request
        .name
        .map(|name| fields.name("name", &name, NAME_MAX));
    let description = request
        .description
        .map(|text| fields.text("description", &text, DESCRIPTION_MAX));
    fields.finish()?;
    let scope = &access.scope;
    let txn = crate::db::write(&state.db).await?;
    let current = find(&txn, scope, &params).await?;
    if let Some(name) = &name {
        ensure_name_free(&txn, scope, name, Some(current.id)).await?;
    }
    let mut row: project::ActiveModel = current.clone().into();
    if let Some(name) = name {
        row.name = Set(name);
    }
    if let Some(description) = description {
        row.description = Set(description);
    }
    row.updated_at = Set(Utc::now());
    let updated = row.update(&txn).await?;
    audit::record(
        &txn,
        Change {
            org_id: Some(scope.org_id),
            action: "project.update",
            target_type: "project",
            target_id: Some(updated.id.to_string()),
            details: serde_json::json!({
                "name": { "from": current.name, "to": updated.name },
                "description_changed": current.description != updated.description,
            }),
            actor: &access.actor,
        },
    )
    .await?;
    txn.commit().await?;
    Ok(Json(updated.into()))
}

/// Deletes a project.
#[utoipa::path(
    delete,
    path = "/orgs/{org_id}/projects/{project_id}",
    tag = "projects",
    params(
        ("org_id" = Uuid, Path, description = "Organization id"),
        ("project_id" = Uuid, Path, description = "Project id"),
    ),
    responses((status = 204, description = "Deleted"), ProblemResponses),
    security(("bearer" = []))
)]
async fn delete_project(
    State(state): State<AppState>,
    access: OrgAccess<need::Admin>,
    params: RawPathParams,
) -> ApiResult<StatusCode> {
    let scope = &access.scope;
    let txn = crate::db::write(&state.db).await?;
    let current = find(&txn, scope, &params).await?;
    project::Entity::delete_by_id(current.id).exec(&txn).await?;
    audit::record(
        &txn,
        Change {
            org_id: Some(scope.org_id),
            action: "project.delete",
            target_type: "project",
            target_id: Some(current.id.to_string()),
            details: serde_json::json!({ "name": current.name }),
            actor: &access.actor,
        },
    )
    .await?;
    txn.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}
