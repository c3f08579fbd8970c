//! GPU models: what a GPU is (memory, interconnect, MIG), shared by
//! instance types, nodes and quotas.

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

use super::{in_use, name_taken};
use gantry_core::audit;
use gantry_core::auth::principal::{Actor, Authenticated, Operator};
use gantry_core::error::{ApiError, ApiResult, ProblemResponses, Resource};
use gantry_core::http::extract::{ApiJson, ApiQuery, path_uuid};
use gantry_core::http::pagination::{Page, PageQuery};
use gantry_core::state::AppState;
use gantry_core::validate::Fields;
use gantry_entities::{gpu, gpu_model, instance_type};

const MEMORY_GIB_MAX: i32 = 4096;

#[derive(Debug, Serialize, ToSchema)]
pub struct GpuModel {
    pub id: Uuid,
    /// The name nodes report and orders ask for, such as `H100-SXM-80GB`.
    pub name: String,
    pub vendor: String,
    pub memory_gib: i32,
    /// How GPUs of one node talk: `nvlink`, `pcie`, …
    pub interconnect: String,
    /// Whether the GPU can be split into MIG slices.
    pub mig_capable: bool,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<gpu_model::Model> for GpuModel {
    fn from(row: gpu_model::Model) -> Self {
        Self {
            id: row.id,
            name: row.name,
            vendor: row.vendor,
            memory_gib: row.memory_gib,
            interconnect: row.interconnect,
            mig_capable: row.mig_capable,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateGpuModel {
    #[schema(pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
    pub name: String,
    #[schema(pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
    pub vendor: String,
    #[schema(minimum = 1, maximum = 4096)]
    pub memory_gib: i32,
    #[schema(pattern = "^[a-z0-9][a-z0-9-]{0,62}$")]
    pub interconnect: String,
    #[serde(default)]
    pub mig_capable: bool,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateGpuModel {
    #[schema(pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
    pub vendor: Option<String>,
    #[schema(minimum = 1, maximum = 4096)]
    pub memory_gib: Option<i32>,
    #[schema(pattern = "^[a-z0-9][a-z0-9-]{0,62}$")]
    pub interconnect: Option<String>,
    pub mig_capable: Option<bool>,
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_gpu_models))
        .routes(routes!(get_gpu_model))
        .routes(routes!(create_gpu_model))
        .routes(routes!(update_gpu_model, delete_gpu_model))
}

async fn find(db: &impl ConnectionTrait, params: &RawPathParams) -> ApiResult<gpu_model::Model> {
    let id = path_uuid(params, "gpu_model_id", Resource::GpuModel)?;
    gpu_model::Entity::find_by_id(id)
        .one(db)
        .await?
        .ok_or_else(|| ApiError::not_found(Resource::GpuModel, id))
}

/// Every GPU model.
#[utoipa::path(
    get,
    path = "/catalog/gpu-models",
    tag = "catalog",
    params(PageQuery),
    responses((status = 200, description = "A page of GPU models", body = Page<GpuModel>), ProblemResponses),
    security(("bearer" = []))
)]
async fn list_gpu_models(
    State(state): State<AppState>,
    _caller: Authenticated,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Json<Page<GpuModel>>> {
    let request = query.validate()?;
    let rows = request
        .ascending(gpu_model::Entity::find(), gpu_model::Column::Id)
        .all(&state.db)
        .await?;
    Ok(Json(Page::from_rows(
        rows,
        request,
        |m| m.id,
        GpuModel::from,
    )))
}

/// One GPU model.
#[utoipa::path(
    get,
    path = "/catalog/gpu-models/{gpu_model_id}",
    tag = "catalog",
    params(("gpu_model_id" = Uuid, Path, description = "GPU model id")),
    responses((status = 200, description = "The GPU model", body = GpuModel), ProblemResponses),
    security(("bearer" = []))
)]
async fn get_gpu_model(
    State(state): State<AppState>,
    _caller: Authenticated,
    params: RawPathParams,
) -> ApiResult<Json<GpuModel>> {
    Ok(Json(find(&state.db, &params).await?.into()))
}

/// Adds a GPU model.
#[utoipa::path(
    post,
    path = "/admin/catalog/gpu-models",
    tag = "admin",
    params(("Idempotency-Key" = Option<String>, Header, description = "Makes a retry return the first response", max_length = 255, pattern = "^[\\x21-\\x7e]{1,255}$")),
    request_body = CreateGpuModel,
    responses((status = 201, description = "The new GPU model", body = GpuModel), ProblemResponses),
    security(("bearer" = []))
)]
async fn create_gpu_model(
    State(state): State<AppState>,
    _operator: Operator,
    actor: Actor,
    ApiJson(request): ApiJson<CreateGpuModel>,
) -> ApiResult<(StatusCode, Json<GpuModel>)> {
    let mut fields = Fields::default();
    fields.label("name", &request.name);
    fields.label("vendor", &request.vendor);
    fields.range("memory_gib", request.memory_gib, 1, MEMORY_GIB_MAX);
    fields.slug("interconnect", &request.interconnect);
    fields.finish()?;
    let txn = gantry_core::db::write(&state.db).await?;
    if gpu_model::Entity::find()
        .filter(gpu_model::Column::Name.eq(&request.name))
        .one(&txn)
        .await?
        .is_some()
    {
        return Err(name_taken("GPU model", &request.name));
    }
    let now = Utc::now();
    let row = gpu_model::ActiveModel {
        id: Set(Uuid::now_v7()),
        name: Set(request.name),
        vendor: Set(request.vendor),
        memory_gib: Set(request.memory_gib),
        interconnect: Set(request.interconnect),
        mig_capable: Set(request.mig_capable),
        created_at: Set(now),
        updated_at: Set(now),
    }
    .insert(&txn)
    .await?;
    audit::platform(
        &txn,
        &actor,
        "gpu_model.create",
        "gpu_model",
        row.id,
        serde_json::json!({ "name": row.name }),
    )
    .await?;
    txn.commit().await?;
    Ok((StatusCode::CREATED, Json(row.into())))
}

/// Changes a GPU model's description; its name stays.
#[utoipa::path(
    patch,
    path = "/admin/catalog/gpu-models/{gpu_model_id}",
    tag = "admin",
    params(("gpu_model_id" = Uuid, Path, description = "GPU model id")),
    request_body = UpdateGpuModel,
    responses((status = 200, description = "The updated GPU model", body = GpuModel), ProblemResponses),
    security(("bearer" = []))
)]
async fn update_gpu_model(
    State(state): State<AppState>,
    _operator: Operator,
    actor: Actor,
    params: RawPathParams,
    ApiJson(request): ApiJson<UpdateGpuModel>,
) -> ApiResult<Json<GpuModel>> {
    let mut fields = Fields::default();
    if let Some(vendor) = &request.vendor {
        fields.label("vendor", vendor);
    }
    if let Some(memory) = request.memory_gib {
        fields.range("memory_gib", memory, 1, MEMORY_GIB_MAX);
    }
    if let Some(interconnect) = &request.interconnect {
        fields.slug("interconnect", interconnect);
    }
    fields.finish()?;
    let txn = gantry_core::db::write(&state.db).await?;
    let current = find(&txn, &params).await?;
    let mut row: gpu_model::ActiveModel = current.into();
    if let Some(vendor) = request.vendor {
        row.vendor = Set(vendor);
    }
    if let Some(memory) = request.memory_gib {
        row.memory_gib = Set(memory);
    }
    if let Some(interconnect) = request.interconnect {
        row.interconnect = Set(interconnect);
    }
    if let Some(mig) = request.mig_capable {
        row.mig_capable = Set(mig);
    }
    row.updated_at = Set(Utc::now());
    let updated = row.update(&txn).await?;
    audit::platform(
        &txn,
        &actor,
        "gpu_model.update",
        "gpu_model",
        updated.id,
        serde_json::json!({ "name": updated.name }),
    )
    .await?;
    txn.commit().await?;
    Ok(Json(updated.into()))
}

/// Removes a GPU model that no instance type or GPU uses.
#[utoipa::path(
    delete,
    path = "/admin/catalog/gpu-models/{gpu_model_id}",
    tag = "admin",
    params(("gpu_model_id" = Uuid, Path, description = "GPU model id")),
    responses((status = 204, description = "Removed"), ProblemResponses),
    security(("bearer" = []))
)]
async fn delete_gpu_model(
    State(state): State<AppState>,
    _operator: Operator,
    actor: Actor,
    params: RawPathParams,
) -> ApiResult<StatusCode> {
    let txn = gantry_core::db::write(&state.db).await?;
    let current = find(&txn, &params).await?;
    let types = instance_type::Entity::find()
        .filter(instance_type::Column::GpuModelId.eq(current.id))
        .count(&txn)
        .await?;
    let gpus = gpu::Entity::find()
        .filter(gpu::Column::GpuModelId.eq(current.id))
        .count(&txn)
        .await?;
    if types + gpus > 0 {
        return Err(in_use(
            "GPU model",
            &current.name,
            &format!("{types} instance types and {gpus} GPUs"),
        ));
    }
    gpu_model::Entity::delete_by_id(current.id)
        .exec(&txn)
        .await?;
    audit::platform(
        &txn,
        &actor,
        "gpu_model.delete",
        "gpu_model",
        current.id,
        serde_json::json!({ "name": current.name }),
    )
    .await?;
    txn.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}
