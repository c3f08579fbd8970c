//! How much work may wait: an organization may have at most so many orders
//! queued (or being queued again) at once, the installation's default
//! unless an operator set its own, and each of its projects at most what
//! an operator set for it. Every queued order costs each scheduling cycle
//! time, so one tenant's flood would slow every other tenant's starts; an
//! order past the limit is refused with 429 until some of the work waiting
//! has started or been cancelled.

use std::collections::HashSet;

use axum::Json;
use axum::extract::{RawPathParams, State};
use chrono::Utc;
use sea_orm::{
    ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter, QuerySelect, Set,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use gantry_access::tenancy::access::{OrgAccess, need};
use gantry_core::audit::{self, Change};
use gantry_core::auth::principal::{Actor, Operator};
use gantry_core::error::{ApiResult, ProblemResponses};
use gantry_core::handles::waiting::WAITING;
use gantry_core::http::extract::ApiJson;
use gantry_core::state::AppState;
use gantry_core::validate::Fields;
use gantry_entities::{order, project, queue_limit};

/// The most any limit may be set to.
const LIMIT_MAX: i32 = 1_000_000;
/// Project limits one organization may have.
const PROJECTS_MAX: usize = 200;

#[derive(Debug, Serialize, ToSchema)]
pub struct QueueLimits {
    /// Orders the organization may have waiting at once.
    pub max_waiting_orders: i32,
    /// Whether that is the installation's default (no limit of its own).
    pub default: bool,
    /// Orders waiting now.
    pub waiting_orders: u64,
    pub projects: Vec<ProjectQueueLimit>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ProjectQueueLimit {
    pub project_id: Uuid,
    pub max_waiting_orders: i32,
    /// Orders of the project waiting now.
    pub waiting_orders: u64,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProjectLimit {
    pub project_id: Uuid,
    #[schema(minimum = 0, maximum = 1000000)]
    pub max_waiting_orders: i32,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetQueueLimits {
    /// The organization's own limit; absent or `null` for the default.
    #[schema(minimum = 0, maximum = 1000000)]
    pub max_waiting_orders: Option<i32>,
    /// Every project limit; a project not listed has none of its own.
    #[serde(default)]
    #[schema(max_items = 200)]
    pub projects: Vec<ProjectLimit>,
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(get_limits))
        .routes(routes!(admin_get_limits, set_limits))
}

async fn waiting(
    db: &impl ConnectionTrait,
    org_id: Uuid,
    project_id: Option<Uuid>,
) -> Result<u64, sea_orm::DbErr> {
    let mut query = order::Entity::find()
        .filter(order::Column::OrgId.eq(org_id))
        .filter(order::Column::Status.is_in(WAITING));
    if let Some(project_id) = project_id {
        query = query.filter(order::Column::ProjectId.eq(project_id));
    }
    query.count(db).await
}

async fn rows(
    db: &impl ConnectionTrait,
    org_id: Uuid,
) -> Result<Vec<queue_limit::Model>, sea_orm::DbErr> {
    queue_limit::Entity::find()
        .filter(queue_limit::Column::OrgId.eq(org_id))
        .all(db)
        .await
}

async fn view(db: &impl ConnectionTrait, org_id: Uuid, default: u32) -> ApiResult<QueueLimits> {
    let limits = rows(db, org_id).await?;
    let own = limits.iter().find(|l| l.project_id.is_none());
    let mut projects = Vec::new();
    for limit in limits.iter().filter(|l| l.project_id.is_some()) {
        let project_id = limit.project_id.unwrap_or_default();
        projects.push(ProjectQueueLimit {
            project_id,
            max_waiting_orders: limit.max_waiting_orders,
            waiting_orders: waiting(db, org_id, Some(project_id)).await?,
        });
    }
    projects.sort_by_key(|p| p.project_id);
    Ok(QueueLimits {
        max_waiting_orders: own.map_or_else(
            || i32::try_from(default).unwrap_or(i32::MAX),
            |l| l.max_waiting_orders,
        ),
        default: own.is_none(),
        waiting_orders: waiting(db, org_id, None).await?,
        projects,
    })
}

/// How many orders the organization may have waiting, and has.
#[utoipa::path(
    get,
    path = "/orgs/{org_id}/queue-limits",
    tag = "quotas",
    params(("org_id" = Uuid, Path, description = "Organization id")),
    responses((status = 200, description = "Limits on waiting work", body = QueueLimits), ProblemResponses),
    security(("bearer" = []))
)]
async fn get_limits(
    State(state): State<AppState>,
    access: OrgAccess<need::AnyRole>,
) -> ApiResult<Json<QueueLimits>> {
    Ok(Json(
        view(
            &state.db,
            access.scope.org_id,
            state.config.max_waiting_orders,
        )
        .await?,
    ))
}

/// Any organization's limits on waiting work.
#[utoipa::path(
    get,
    path = "/admin/orgs/{org_id}/queue-limits",
    tag = "admin",
    params(("org_id" = Uuid, Path, description = "Organization id")),
    responses((status = 200, description = "Limits on waiting work", body = QueueLimits), ProblemResponses),
    security(("bearer" = []))
)]
async fn admin_get_limits(
    State(state): State<AppState>,
    _operator: Operator,
    params: RawPathParams,
) -> ApiResult<Json<QueueLimits>> {
    let org = gantry_access::tenancy::orgs::from_path(&state.db, &params).await?;
    Ok(Json(
        view(&state.db, org.id, state.config.max_waiting_orders).await?,
    ))
}

/// Replaces an organization's limits on waiting work as a whole. Work
/// already waiting stays; new orders are refused while it is over.
#[utoipa::path(
    put,
    path = "/admin/orgs/{org_id}/queue-limits",
    tag = "admin",
    params(("org_id" = Uuid, Path, description = "Organization id")),
    request_body = SetQueueLimits,
    responses((status = 200, description = "Limits on waiting work", body = QueueLimits), ProblemResponses),
    security(("bearer" = []))
)]
async fn set_limits(
    State(state): State<AppState>,
    _operator: Operator,
    actor: Actor,
    params: RawPathParams,
    ApiJson(request): ApiJson<SetQueueLimits>,
) -> ApiResult<Json<QueueLimits>> {
    let mut fields = Fields::default();
    if let Some(max) = request.max_waiting_orders {
        fields.range("max_waiting_orders", max, 0, LIMIT_MAX);
    }
    if request.projects.len() > PROJECTS_MAX {
        fields.push("projects", format!("at most {PROJECTS_MAX} projects"));
    }
    for (index, limit) in request.projects.iter().enumerate() {
        fields.range(
            &format!("projects[{index}].max_waiting_orders"),
            limit.max_waiting_orders,
            0,
            LIMIT_MAX,
        );
    }
    fields.finish()?;
    let txn = gantry_core::db::write(&state.db).await?;
    let org = gantry_access::tenancy::orgs::from_path(&txn, &params).await?;
    let now = Utc::now();
    let row = |project_id: Option<Uuid>, max: i32| queue_limit::ActiveModel {
        id: Set(Uuid::now_v7()),
        org_id: Set(org.id),
        project_id: Set(project_id),
        max_waiting_orders: Set(max),
        updated_at: Set(now),
    };
    let mut new_rows: Vec<queue_limit::ActiveModel> = request
        .max_waiting_orders
        .map(|max| row(None, max))
        .into_iter()
        .collect();
    let owned: HashSet<Uuid> = project::Entity::find()
        .select_only()
        .column(project::Column::Id)
        .filter(project::Column::OrgId.eq(org.id))
        .into_tuple()
        .all(&txn)
        .await?
        .into_iter()
        .collect();
    let mut seen = HashSet::new();
    let mut fields = Fields::default();
    for (index, limit) in request.projects.iter().enumerate() {
        if !owned.contains(&limit.project_id) {
            fields.push(
                &format!("projects[{index}].project_id"),
                "no such project in this organization",
            );
        } else if !seen.insert(limit.project_id) {
            fields.push(
                &format!("projects[{index}].project_id"),
                "repeats an earlier project",
            );
        } else {
            new_rows.push(row(Some(limit.project_id), limit.max_waiting_orders));
        }
    }
    fields.finish()?;
    queue_limit::Entity::delete_many()
        .filter(queue_limit::Column::OrgId.eq(org.id))
        .exec(&txn)
        .await?;
    if !new_rows.is_empty() {
        queue_limit::Entity::insert_many(new_rows)
            .exec(&txn)
            .await?;
    }
    audit::record(
        &txn,
        Change {
            org_id: Some(org.id),
            action: "queue_limits.set",
            target_type: "organization",
            target_id: Some(org.id.to_string()),
            details: serde_json::json!({
                "max_waiting_orders": request.max_waiting_orders,
                "projects": request.projects.len(),
            }),
            actor: &actor,
        },
    )
    .await?;
    txn.commit().await?;
    Ok(Json(
        view(&state.db, org.id, state.config.max_waiting_orders).await?,
    ))
}
