//! Projects: how an organization splits its work and, later, its quota,
//! and which private network each project's work is on.

use axum::Json;
use axum::extract::{RawPathParams, State};
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, Set,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::access::{OrgAccess, OrgScope, need};
use gantry_core::audit::{self, Change};
use gantry_core::error::{ApiError, ApiResult, ProblemResponses, Resource};
use gantry_core::http::extract::{ApiJson, ApiQuery, path_uuid};
use gantry_core::http::pagination::{Page, PageQuery};
use gantry_core::state::AppState;
use gantry_core::validate::Fields;
use gantry_entities::project;
use gantry_types::classes::ProjectNetwork;

const NAME_MAX: usize = 100;
const DESCRIPTION_MAX: usize = 1000;

#[derive(Debug, Serialize, ToSchema)]
pub struct Project {
    pub id: Uuid,
    pub org_id: Uuid,
    pub name: String,
    pub description: String,
    /// Which private network its work is on; a change applies to work
    /// placed after it.
    pub network: ProjectNetwork,
    /// The project whose network it joins, for `joined`.
    pub network_project_id: Option<Uuid>,
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
            network: row.network,
            network_project_id: row.network_project_id,
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
    /// Which private network its work is on (default `organization`).
    #[serde(default)]
    pub network: Option<ProjectNetwork>,
    /// For `joined`: the project of the same organization, with a network
    /// of its own, whose network it joins.
    #[serde(default)]
    pub network_project_id: Option<Uuid>,
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
    /// Which private network its work is on; `network_project_id` goes
    /// with `joined` and is dropped with the others.
    pub network: Option<ProjectNetwork>,
    pub network_project_id: Option<Uuid>,
}

/// A project's choice of network, checked: `joined` names another project
/// of the organization that has a network of its own; the others name
/// none. `this` is the project choosing (none while it is being made).
async fn network_choice(
    db: &impl ConnectionTrait,
    scope: &OrgScope,
    this: Option<Uuid>,
    network: ProjectNetwork,
    joins: Option<Uuid>,
) -> ApiResult<Option<Uuid>> {
    let mut fields = Fields::default();
    match (network, joins) {
        (ProjectNetwork::Joined, None) => fields.push(
            "network_project_id",
            "name the project whose network this one joins",
        ),
        (ProjectNetwork::Joined, Some(target)) if Some(target) == this => {
            fields.push(
                "network_project_id",
                "a project cannot join its own network",
            );
        }
        (ProjectNetwork::Organization | ProjectNetwork::Own, Some(_)) => fields.push(
            "network_project_id",
            "only a project whose network is `joined` names another project's",
        ),
        _ => {}
    }
    fields.finish()?;
    let Some(target) = joins else {
        return Ok(None);
    };
    let found = scope
        .select::<project::Entity>()
        .filter(project::Column::Id.eq(target))
        .lock_exclusive()
        .one(db)
        .await?;
    match found {
        None => Err(ApiError::unprocessable(
            "unknown_project",
            format!(
                "no project {target} in this organization: a network is opened only to projects of its own organization"
            ),
        )),
        Some(p) if p.network != ProjectNetwork::Own => Err(ApiError::conflict(
            "network_not_own",
            format!(
                "project {} has no network of its own to join: set its network to `own` first",
                p.name
            ),
        )),
        Some(_) => Ok(Some(target)),
    }
}

/// Refuses to take away the network of `current` while other projects
/// join it (a change of its network, or its deletion).
async fn ensure_not_joined(
    db: &impl ConnectionTrait,
    scope: &OrgScope,
    current: &project::Model,
) -> ApiResult<()> {
    let joined: Vec<String> = scope
        .select::<project::Entity>()
        .filter(project::Column::NetworkProjectId.eq(current.id))
        .filter(project::Column::Network.eq(ProjectNetwork::Joined))
        .all(db)
        .await?
        .into_iter()
        .map(|p| p.name)
        .collect();
    if joined.is_empty() {
        return Ok(());
    }
    Err(ApiError::conflict(
        "network_joined",
        format!(
            "projects {} join the network of project {}: move them to another network first",
            joined.join(", "),
            current.name
        ),
    ))
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

/// The organization's project the path names.
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

/// Locks the organization's projects `ids` for the rest of the
/// transaction. Whether a project may give up its network depends on
/// whether others join it, and a project joining it locks it first (see
/// `network_choice`), so the two cannot both go ahead; the locks are
/// taken in one order, so two changes that each lock two projects never
/// wait on each other in a circle.
async fn lock(db: &impl ConnectionTrait, scope: &OrgScope, ids: &[Uuid]) -> ApiResult<()> {
    scope
        .select::<project::Entity>()
        .filter(project::Column::Id.is_in(ids.iter().copied()))
        .order_by_asc(project::Column::Id)
        .lock_exclusive()
        .all(db)
        .await?;
    Ok(())
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
    let txn = gantry_core::db::write(&state.db).await?;
    ensure_name_free(&txn, scope, &name, None).await?;
    let network = request.network.unwrap_or(ProjectNetwork::Organization);
    let joins = network_choice(&txn, scope, None, network, request.network_project_id).await?;
    let now = Utc::now();
    let row = project::ActiveModel {
        id: Set(Uuid::now_v7()),
        org_id: Set(scope.org_id),
        name: Set(name),
        description: Set(description),
        network: Set(network),
        network_project_id: Set(joins),
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
            details: serde_json::json!({
                "name": row.name,
                "network": row.network,
                "network_project_id": row.network_project_id,
            }),
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
    let txn = gantry_core::db::write(&state.db).await?;
    let id = path_uuid(&params, "project_id", Resource::Project)?;
    let locked: Vec<Uuid> = [Some(id), request.network_project_id]
        .into_iter()
        .flatten()
        .collect();
    lock(&txn, scope, &locked).await?;
    let current = find(&txn, scope, &params).await?;
    if let Some(name) = &name {
        ensure_name_free(&txn, scope, name, Some(current.id)).await?;
    }
    let network = match (request.network, request.network_project_id) {
        (Some(network), joins) => {
            let joins = network_choice(&txn, scope, Some(current.id), network, joins).await?;
            if current.network == ProjectNetwork::Own && network != ProjectNetwork::Own {
                ensure_not_joined(&txn, scope, &current).await?;
            }
            Some((network, joins))
        }
        (None, Some(_)) => {
            let mut fields = Fields::default();
            fields.push("network_project_id", "give it with `network: joined`");
            fields.finish()?;
            None
        }
        (None, None) => None,
    };
    let mut row: project::ActiveModel = current.clone().into();
    if let Some((network, joins)) = network {
        row.network = Set(network);
        row.network_project_id = Set(joins);
    }
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
                "network": { "from": current.network, "to": updated.network },
                "network_project_id": { "from": current.network_project_id, "to": updated.network_project_id },
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
    let txn = gantry_core::db::write(&state.db).await?;
    lock(
        &txn,
        scope,
        &[path_uuid(&params, "project_id", Resource::Project)?],
    )
    .await?;
    let current = find(&txn, scope, &params).await?;
    ensure_not_joined(&txn, scope, &current).await?;
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
