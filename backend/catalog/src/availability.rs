//! What a launch of an instance type would meet in each region now, shown
//! beside its prices before a tenant orders: room that exists, not a promise
//! (the scheduler decides at its next cycle, by rank).

use axum::Json;
use axum::extract::{RawPathParams, State};
use chrono::{DateTime, Utc};
use gantry_scheduler as engine;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::shares::GpuShape;
use gantry_core::auth::principal::Authenticated;
use gantry_core::error::{ApiError, ApiResult, ProblemResponses};
use gantry_core::state::AppState;

#[derive(Debug, Serialize, ToSchema)]
pub struct LaunchAvailability {
    pub instance_type: String,
    pub gpu_model: String,
    /// When the figures were read.
    pub as_of: DateTime<Utc>,
    /// Regions holding the type's GPU model, by name.
    pub regions: Vec<RegionAvailability>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RegionAvailability {
    pub region: String,
    /// Instances that could start side by side now and keep running: free
    /// GPUs, vCPUs and memory on nodes taking work, less what reservations
    /// hold now or later. Fractions count on free GPUs and on what shared
    /// GPUs have left, MIG instances on the free slices of MIG GPUs laid
    /// out for their size; `null` for types without GPUs.
    pub instances_now: Option<u32>,
    /// GPUs of the model that waiting orders (every tenant's, as one sum)
    /// may take in the region: what a launch may queue behind.
    pub waiting_gpus: u32,
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(launch_availability))
}

/// Per region, how many instances of a type could start now and how many
/// GPUs of its model are already waiting.
#[utoipa::path(
    get,
    path = "/catalog/instance-types/{instance_type_id}/availability",
    tag = "catalog",
    params(("instance_type_id" = uuid::Uuid, Path, description = "Instance type id")),
    responses((status = 200, description = "Room per region now", body = LaunchAvailability), ProblemResponses),
    security(("bearer" = []))
)]
async fn launch_availability(
    State(state): State<AppState>,
    _caller: Authenticated,
    params: RawPathParams,
) -> ApiResult<Json<LaunchAvailability>> {
    let instance = super::prices::find_type(&state.db, &params).await?;
    let now = state.clock.now();
    let catalog = state.catalog.current(&state.db).await?;
    let model = catalog
        .gpu_model_name(instance.gpu_model_id)
        .ok_or_else(|| ApiError::internal(anyhow::anyhow!("instance type without GPU model")))?
        .to_owned();
    let loaded = gantry_world::load::load(&state.db, now).await?;
    let rooms = engine::launch_room(
        &loaded.snapshot.snapshot(),
        &engine::LaunchShape {
            model: model.clone(),
            gpus: GpuShape::of_type(&instance).request(),
            cpu_milli: u64::try_from(instance.vcpus).unwrap_or(0) * 1000,
            memory_mib: u64::try_from(instance.memory_gib).unwrap_or(0) * 1024,
        },
    );
    Ok(Json(LaunchAvailability {
        instance_type: instance.name,
        gpu_model: model,
        as_of: now,
        regions: rooms
            .into_iter()
            .map(|room| RegionAvailability {
                region: room.region,
                instances_now: room.instances,
                waiting_gpus: room.waiting_gpus,
            })
            .collect(),
    }))
}
