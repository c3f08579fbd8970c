//! Quotas per organization (and project) per GPU model and region:
//! guaranteed GPUs, which the engine protects, and a maximum, which
//! admission and the engine enforce. Operators set them; tenants read them
//! with their current use.

use std::collections::{HashMap, HashSet};

use axum::Json;
use axum::extract::{RawPathParams, State};
use chrono::Utc;
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, Set};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use gantry_access::tenancy::access::{OrgAccess, need};
use gantry_core::audit::{self, Change};
use gantry_core::auth::principal::{Actor, Operator};
use gantry_core::error::{ApiResult, ProblemResponses};
use gantry_core::http::extract::ApiJson;
use gantry_core::state::AppState;
use gantry_core::validate::Fields;
use gantry_entities::{allocation, node, order, project, quota};
use gantry_types::classes::AllocationState;

const QUOTAS_MAX: usize = 200;
const GPUS_MAX: i32 = 1_000_000;

#[derive(Debug, Serialize, ToSchema)]
pub struct Quota {
    pub gpu_model: String,
    /// `null`: all regions together.
    pub region: Option<String>,
    /// `null`: the whole organization.
    pub project_id: Option<Uuid>,
    /// GPUs the organization can always get back, preempting borrowers.
    pub guaranteed_gpus: i32,
    /// The most GPUs it may hold; `null` for no limit.
    pub max_gpus: Option<i32>,
    /// GPUs its live allocations hold now within this quota's scope.
    pub used_gpus: i64,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QuotaSpec {
    /// GPU model name or id.
    #[schema(min_length = 1, max_length = 64)]
    pub gpu_model: String,
    /// Region name or id; absent for all regions together.
    #[schema(min_length = 1, max_length = 64)]
    pub region: Option<String>,
    /// A project of the organization; absent for the whole organization.
    pub project_id: Option<Uuid>,
    #[schema(minimum = 0, maximum = 1000000)]
    pub guaranteed_gpus: i32,
    #[schema(minimum = 0, maximum = 1000000)]
    pub max_gpus: Option<i32>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetQuotas {
    /// Every quota of the organization; what is not listed is removed.
    #[schema(max_items = 200)]
    pub quotas: Vec<QuotaSpec>,
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_quotas))
        .routes(routes!(admin_list_quotas, set_quotas))
}

/// GPUs held by the organization's live allocations, by GPU model, region
/// and project.
pub async fn used(
    db: &impl ConnectionTrait,
    org_id: Uuid,
) -> ApiResult<HashMap<(Uuid, Uuid, Option<Uuid>), i64>> {
    let live = allocation::Entity::find()
        .filter(allocation::Column::OrgId.eq(org_id))
        .filter(allocation::Column::State.ne(AllocationState::Released))
        .all(db)
        .await?;
    let orders: HashMap<Uuid, order::Model> = order::Entity::find()
        .filter(order::Column::Id.is_in(live.iter().map(|a| a.order_id)))
        .all(db)
        .await?
        .into_iter()
        .map(|o| (o.id, o))
        .collect();
    let regions: HashMap<Uuid, Uuid> = node::Entity::find()
        .filter(node::Column::Id.is_in(live.iter().map(|a| a.node_id)))
        .all(db)
        .await?
        .into_iter()
        .map(|n| (n.id, n.region_id))
        .collect();
    let mut used = HashMap::new();
    for allocation in live {
        let (Some(order), Some(region)) = (
            orders.get(&allocation.order_id),
            regions.get(&allocation.node_id),
        ) else {
            continue;
        };
        *used
            .entry((order.gpu_model_id, *region, order.project_id))
            .or_default() += allocation.gpu_count();
    }
    Ok(used)
}

/// The use a quota row covers: its model, in its region (or all), in its
/// project (or the whole organization).
pub fn use_within(
    used: &HashMap<(Uuid, Uuid, Option<Uuid>), i64>,
    model: Uuid,
    region: Option<Uuid>,
    project: Option<Uuid>,
) -> i64 {
    used.iter()
        .filter(|((m, r, p), _)| {
            *m == model && region.is_none_or(|x| x == *r) && project.is_none_or(|x| Some(x) == *p)
        })
        .map(|(_, gpus)| gpus)
        .sum()
}

async fn views(db: &impl ConnectionTrait, org_id: Uuid) -> ApiResult<Vec<Quota>> {
    let rows = quota::Entity::find()
        .filter(quota::Column::OrgId.eq(org_id))
        .all(db)
        .await?;
    let used = used(db, org_id).await?;
    let models = gantry_catalog::gpu_model_names(db).await?;
    let regions = gantry_catalog::region_names(db).await?;
    let mut views: Vec<Quota> = rows
        .into_iter()
        .map(|q| Quota {
            gpu_model: models.get(&q.gpu_model_id).cloned().unwrap_or_default(),
            region: q.region_id.and_then(|r| regions.get(&r).cloned()),
            project_id: q.project_id,
            guaranteed_gpus: q.guaranteed_gpus,
            max_gpus: q.max_gpus,
            used_gpus: use_within(&used, q.gpu_model_id, q.region_id, q.project_id),
        })
        .collect();
    views.sort_by(|a, b| {
        (&a.gpu_model, &a.region, a.project_id).cmp(&(&b.gpu_model, &b.region, b.project_id))
    });
    Ok(views)
}

/// The organization's quotas and current use.
#[utoipa::path(
    get,
    path = "/orgs/{org_id}/quotas",
    tag = "quotas",
    params(("org_id" = Uuid, Path, description = "Organization id")),
    responses((status = 200, description = "Quotas with current use", body = Vec<Quota>), ProblemResponses),
    security(("bearer" = []))
)]
async fn list_quotas(
    State(state): State<AppState>,
    access: OrgAccess<need::AnyRole>,
) -> ApiResult<Json<Vec<Quota>>> {
    Ok(Json(views(&state.db, access.scope.org_id).await?))
}

/// Any organization's quotas and current use.
#[utoipa::path(
    get,
    path = "/admin/orgs/{org_id}/quotas",
    tag = "admin",
    params(("org_id" = Uuid, Path, description = "Organization id")),
    responses((status = 200, description = "Quotas with current use", body = Vec<Quota>), ProblemResponses),
    security(("bearer" = []))
)]
async fn admin_list_quotas(
    State(state): State<AppState>,
    _operator: Operator,
    params: RawPathParams,
) -> ApiResult<Json<Vec<Quota>>> {
    let org = gantry_access::tenancy::orgs::from_path(&state.db, &params).await?;
    Ok(Json(views(&state.db, org.id).await?))
}

/// Replaces an organization's quotas as a whole.
#[utoipa::path(
    put,
    path = "/admin/orgs/{org_id}/quotas",
    tag = "admin",
    params(("org_id" = Uuid, Path, description = "Organization id")),
    request_body = SetQuotas,
    responses((status = 200, description = "Quotas with current use", body = Vec<Quota>), ProblemResponses),
    security(("bearer" = []))
)]
async fn set_quotas(
    State(state): State<AppState>,
    _operator: Operator,
    actor: Actor,
    params: RawPathParams,
    ApiJson(request): ApiJson<SetQuotas>,
) -> ApiResult<Json<Vec<Quota>>> {
    let mut fields = Fields::default();
    if request.quotas.len() > QUOTAS_MAX {
        fields.push("quotas", format!("at most {QUOTAS_MAX} quotas"));
    }
    for (index, spec) in request.quotas.iter().enumerate() {
        fields.range(
            &format!("quotas[{index}].guaranteed_gpus"),
            spec.guaranteed_gpus,
            0,
            GPUS_MAX,
        );
        if let Some(max) = spec.max_gpus {
            fields.range(&format!("quotas[{index}].max_gpus"), max, 0, GPUS_MAX);
            if max < spec.guaranteed_gpus {
                fields.push(
                    &format!("quotas[{index}].max_gpus"),
                    "must not be below guaranteed_gpus",
                );
            }
        }
    }
    fields.finish()?;
    let txn = gantry_core::db::write(&state.db).await?;
    let org = gantry_access::tenancy::orgs::from_path(&txn, &params).await?;
    let mut rows = Vec::new();
    let mut seen = HashSet::new();
    let mut fields = Fields::default();
    let now = Utc::now();
    for (index, spec) in request.quotas.iter().enumerate() {
        let Ok(model) = gantry_catalog::gpu_model_by_ref(&txn, &spec.gpu_model).await else {
            fields.push(&format!("quotas[{index}].gpu_model"), "no such GPU model");
            continue;
        };
        let region = match &spec.region {
            Some(reference) => match gantry_catalog::region_by_ref(&txn, reference).await {
                Ok(region) => Some(region.id),
                Err(_) => {
                    fields.push(&format!("quotas[{index}].region"), "no such region");
                    continue;
                }
            },
            None => None,
        };
        if let Some(project_id) = spec.project_id {
            let owned = project::Entity::find_by_id(project_id)
                .filter(project::Column::OrgId.eq(org.id))
                .one(&txn)
                .await?;
            if owned.is_none() {
                fields.push(
                    &format!("quotas[{index}].project_id"),
                    "no such project in this organization",
                );
                continue;
            }
        }
        if !seen.insert((model.id, region, spec.project_id)) {
            fields.push(
                &format!("quotas[{index}]"),
                "repeats the GPU model, region and project of an earlier quota",
            );
            continue;
        }
        rows.push(quota::ActiveModel {
            id: Set(Uuid::now_v7()),
            org_id: Set(org.id),
            project_id: Set(spec.project_id),
            gpu_model_id: Set(model.id),
            region_id: Set(region),
            guaranteed_gpus: Set(spec.guaranteed_gpus),
            max_gpus: Set(spec.max_gpus),
            created_at: Set(now),
            updated_at: Set(now),
        });
    }
    fields.finish()?;
    quota::Entity::delete_many()
        .filter(quota::Column::OrgId.eq(org.id))
        .exec(&txn)
        .await?;
    if !rows.is_empty() {
        quota::Entity::insert_many(rows).exec(&txn).await?;
    }
    audit::record(
        &txn,
        Change {
            org_id: Some(org.id),
            action: "quota.set",
            target_type: "organization",
            target_id: Some(org.id.to_string()),
            details: serde_json::json!({ "quotas": request.quotas.len() }),
            actor: &actor,
        },
    )
    .await?;
    let views = views(&txn, org.id).await?;
    txn.commit().await?;
    state.scheduler.wake();
    Ok(Json(views))
}
