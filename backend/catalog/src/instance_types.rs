//! Instance types: the shapes tenants order (GPUs of one model per node,
//! vCPU, memory, disk), each with its prices.

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

use super::prices::{self, Price};
use super::{in_use, name_taken};
use gantry_core::audit;
use gantry_core::auth::principal::{Actor, Authenticated, Operator};
use gantry_core::error::{ApiError, ApiResult, ProblemResponses, Resource};
use gantry_core::http::extract::{ApiJson, ApiQuery, path_uuid};
use gantry_core::http::pagination::{Page, PageQuery};
use gantry_core::state::AppState;
use gantry_core::validate::Fields;
use gantry_entities::{instance_type, node, order};

const GPUS_MAX: i32 = 64;
const VCPUS_MAX: i32 = 4096;
const MEMORY_GIB_MAX: i32 = 65_536;
const DISK_GIB_MAX: i32 = 1_048_576;

#[derive(Debug, Serialize, ToSchema)]
pub struct InstanceType {
    pub id: Uuid,
    pub name: String,
    pub gpu_model_id: Uuid,
    pub gpu_model: String,
    pub gpus_per_node: i32,
    pub vcpus: i32,
    pub memory_gib: i32,
    pub disk_gib: i32,
    /// A fraction of one GPU, in thousandths, when the type sells a share
    /// of a GPU that other orders share too.
    pub gpu_milli: Option<i32>,
    /// The MIG profile (`1g.10gb`) when the type sells one MIG instance.
    pub mig_profile: Option<String>,
    /// The share of each GPU its GPU-seconds are weighted by, in
    /// thousandths: 1000 for whole GPUs.
    pub gpu_share_milli: i32,
    /// The prices in force now, per pricing class and region.
    pub prices: Vec<Price>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateInstanceType {
    #[schema(pattern = "^[a-z0-9][a-z0-9-]{0,62}$")]
    pub name: String,
    /// The GPU model's name or id.
    #[schema(min_length = 1, max_length = 64)]
    pub gpu_model: String,
    #[schema(minimum = 1, maximum = 64)]
    pub gpus_per_node: i32,
    #[schema(minimum = 1, maximum = 4096)]
    pub vcpus: i32,
    #[schema(minimum = 1, maximum = 65536)]
    pub memory_gib: i32,
    #[serde(default)]
    #[schema(minimum = 0, maximum = 1048576)]
    pub disk_gib: i32,
    /// Sell a fraction of one GPU, in thousandths: a multiple of 125 below
    /// 1000. Needs `gpus_per_node` 1.
    #[schema(minimum = 125, maximum = 875, multiple_of = 125)]
    pub gpu_milli: Option<i32>,
    /// Sell one MIG instance of this profile, as NVIDIA names it for the
    /// model (`1g.10gb`, `3g.40gb`, `7g.80gb` on 80 GB GPUs). Needs
    /// `gpus_per_node` 1 and a MIG-capable model.
    #[schema(max_length = 16)]
    pub mig_profile: Option<String>,
}

/// The GPU shape of an instance type is fixed once created (orders refer to
/// it); its other resources may change.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateInstanceType {
    #[schema(minimum = 1, maximum = 4096)]
    pub vcpus: Option<i32>,
    #[schema(minimum = 1, maximum = 65536)]
    pub memory_gib: Option<i32>,
    #[schema(minimum = 0, maximum = 1048576)]
    pub disk_gib: Option<i32>,
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_instance_types))
        .routes(routes!(get_instance_type))
        .routes(routes!(create_instance_type))
        .routes(routes!(update_instance_type, delete_instance_type))
}

async fn find(
    db: &impl ConnectionTrait,
    params: &RawPathParams,
) -> ApiResult<instance_type::Model> {
    let id = path_uuid(params, "instance_type_id", Resource::InstanceType)?;
    instance_type::Entity::find_by_id(id)
        .one(db)
        .await?
        .ok_or_else(|| ApiError::not_found(Resource::InstanceType, id))
}

/// Instance types as tenants see them, with model names and current prices.
async fn views(
    db: &impl ConnectionTrait,
    rows: Vec<instance_type::Model>,
) -> ApiResult<Vec<InstanceType>> {
    let ids: Vec<Uuid> = rows.iter().map(|t| t.id).collect();
    let mut prices = prices::current(db, &ids, Utc::now()).await?;
    let models = super::gpu_model_names(db).await?;
    Ok(rows
        .into_iter()
        .map(|row| InstanceType {
            gpu_share_milli: super::shares::GpuShape::of_type(&row).milli(),
            id: row.id,
            gpu_model: models.get(&row.gpu_model_id).cloned().unwrap_or_default(),
            prices: prices.remove(&row.id).unwrap_or_default(),
            name: row.name,
            gpu_model_id: row.gpu_model_id,
            gpu_milli: row.gpu_milli,
            mig_profile: row.mig_profile,
            gpus_per_node: row.gpus_per_node,
            vcpus: row.vcpus,
            memory_gib: row.memory_gib,
            disk_gib: row.disk_gib,
            created_at: row.created_at,
            updated_at: row.updated_at,
        })
        .collect())
}

async fn view(db: &impl ConnectionTrait, row: instance_type::Model) -> ApiResult<InstanceType> {
    views(db, vec![row])
        .await?
        .pop()
        .ok_or_else(|| ApiError::internal(anyhow::anyhow!("instance type view lost its row")))
}

/// Every instance type with its current prices.
#[utoipa::path(
    get,
    path = "/catalog/instance-types",
    tag = "catalog",
    params(PageQuery),
    responses((status = 200, description = "A page of instance types", body = Page<InstanceType>), ProblemResponses),
    security(("bearer" = []))
)]
async fn list_instance_types(
    State(state): State<AppState>,
    _caller: Authenticated,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Json<Page<InstanceType>>> {
    let request = query.validate()?;
    let rows = request
        .ascending(instance_type::Entity::find(), instance_type::Column::Id)
        .all(&state.db)
        .await?;
    let page = Page::from_rows(rows, request, |t| t.id, |t| t);
    Ok(Json(Page {
        items: views(&state.db, page.items).await?,
        next_cursor: page.next_cursor,
    }))
}

/// One instance type with its current prices.
#[utoipa::path(
    get,
    path = "/catalog/instance-types/{instance_type_id}",
    tag = "catalog",
    params(("instance_type_id" = Uuid, Path, description = "Instance type id")),
    responses((status = 200, description = "The instance type", body = InstanceType), ProblemResponses),
    security(("bearer" = []))
)]
async fn get_instance_type(
    State(state): State<AppState>,
    _caller: Authenticated,
    params: RawPathParams,
) -> ApiResult<Json<InstanceType>> {
    let row = find(&state.db, &params).await?;
    Ok(Json(view(&state.db, row).await?))
}

/// Adds an instance type.
#[utoipa::path(
    post,
    path = "/admin/catalog/instance-types",
    tag = "admin",
    params(("Idempotency-Key" = Option<String>, Header, description = "Makes a retry return the first response", max_length = 255, pattern = "^[\\x21-\\x7e]{1,255}$")),
    request_body = CreateInstanceType,
    responses((status = 201, description = "The new instance type", body = InstanceType), ProblemResponses),
    security(("bearer" = []))
)]
async fn create_instance_type(
    State(state): State<AppState>,
    _operator: Operator,
    actor: Actor,
    ApiJson(request): ApiJson<CreateInstanceType>,
) -> ApiResult<(StatusCode, Json<InstanceType>)> {
    let mut fields = Fields::default();
    fields.slug("name", &request.name);
    fields.range("gpus_per_node", request.gpus_per_node, 1, GPUS_MAX);
    fields.range("vcpus", request.vcpus, 1, VCPUS_MAX);
    fields.range("memory_gib", request.memory_gib, 1, MEMORY_GIB_MAX);
    fields.range("disk_gib", request.disk_gib, 0, DISK_GIB_MAX);
    fields.finish()?;
    let txn = gantry_core::db::write(&state.db).await?;
    let model = super::gpu_model_in_body(&txn, &request.gpu_model).await?;
    let mut shares = Fields::default();
    super::shares::check(
        &mut shares,
        &model,
        request.gpus_per_node,
        request.gpu_milli,
        request.mig_profile.as_deref(),
    );
    shares.finish()?;
    if instance_type::Entity::find()
        .filter(instance_type::Column::Name.eq(&request.name))
        .one(&txn)
        .await?
        .is_some()
    {
        return Err(name_taken("instance type", &request.name));
    }
    let now = Utc::now();
    let row = instance_type::ActiveModel {
        id: Set(Uuid::now_v7()),
        name: Set(request.name),
        gpu_model_id: Set(model.id),
        gpus_per_node: Set(request.gpus_per_node),
        vcpus: Set(request.vcpus),
        memory_gib: Set(request.memory_gib),
        disk_gib: Set(request.disk_gib),
        gpu_milli: Set(request.gpu_milli),
        mig_profile: Set(request.mig_profile),
        created_at: Set(now),
        updated_at: Set(now),
    }
    .insert(&txn)
    .await?;
    audit::platform(
        &txn,
        &actor,
        "instance_type.create",
        "instance_type",
        row.id,
        serde_json::json!({
            "name": row.name,
            "gpu_model": model.name,
            "gpu_milli": row.gpu_milli,
            "mig_profile": row.mig_profile,
        }),
    )
    .await?;
    txn.commit().await?;
    Ok((StatusCode::CREATED, Json(view(&state.db, row).await?)))
}

/// Changes an instance type's vCPU, memory or disk.
#[utoipa::path(
    patch,
    path = "/admin/catalog/instance-types/{instance_type_id}",
    tag = "admin",
    params(("instance_type_id" = Uuid, Path, description = "Instance type id")),
    request_body = UpdateInstanceType,
    responses((status = 200, description = "The updated instance type", body = InstanceType), ProblemResponses),
    security(("bearer" = []))
)]
async fn update_instance_type(
    State(state): State<AppState>,
    _operator: Operator,
    actor: Actor,
    params: RawPathParams,
    ApiJson(request): ApiJson<UpdateInstanceType>,
) -> ApiResult<Json<InstanceType>> {
    let mut fields = Fields::default();
    if let Some(vcpus) = request.vcpus {
        fields.range("vcpus", vcpus, 1, VCPUS_MAX);
    }
    if let Some(memory) = request.memory_gib {
        fields.range("memory_gib", memory, 1, MEMORY_GIB_MAX);
    }
    if let Some(disk) = request.disk_gib {
        fields.range("disk_gib", disk, 0, DISK_GIB_MAX);
    }
    fields.finish()?;
    let txn = gantry_core::db::write(&state.db).await?;
    let current = find(&txn, &params).await?;
    let mut row: instance_type::ActiveModel = current.into();
    if let Some(vcpus) = request.vcpus {
        row.vcpus = Set(vcpus);
    }
    if let Some(memory) = request.memory_gib {
        row.memory_gib = Set(memory);
    }
    if let Some(disk) = request.disk_gib {
        row.disk_gib = Set(disk);
    }
    row.updated_at = Set(Utc::now());
    let updated = row.update(&txn).await?;
    audit::platform(
        &txn,
        &actor,
        "instance_type.update",
        "instance_type",
        updated.id,
        serde_json::json!({
            "vcpus": updated.vcpus,
            "memory_gib": updated.memory_gib,
            "disk_gib": updated.disk_gib,
        }),
    )
    .await?;
    txn.commit().await?;
    Ok(Json(view(&state.db, updated).await?))
}

/// Removes an instance type no order or node uses.
#[utoipa::path(
    delete,
    path = "/admin/catalog/instance-types/{instance_type_id}",
    tag = "admin",
    params(("instance_type_id" = Uuid, Path, description = "Instance type id")),
    responses((status = 204, description = "Removed"), ProblemResponses),
    security(("bearer" = []))
)]
async fn delete_instance_type(
    State(state): State<AppState>,
    _operator: Operator,
    actor: Actor,
    params: RawPathParams,
) -> ApiResult<StatusCode> {
    let txn = gantry_core::db::write(&state.db).await?;
    let current = find(&txn, &params).await?;
    let orders = order::Entity::find()
        .filter(order::Column::InstanceTypeId.eq(current.id))
        .count(&txn)
        .await?;
    let nodes = node::Entity::find()
        .filter(node::Column::InstanceTypeId.eq(current.id))
        .count(&txn)
        .await?;
    if orders + nodes > 0 {
        return Err(in_use(
            "instance type",
            &current.name,
            &format!("{orders} orders and {nodes} nodes"),
        ));
    }
    instance_type::Entity::delete_by_id(current.id)
        .exec(&txn)
        .await?;
    audit::platform(
        &txn,
        &actor,
        "instance_type.delete",
        "instance_type",
        current.id,
        serde_json::json!({ "name": current.name }),
    )
    .await?;
    txn.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}
