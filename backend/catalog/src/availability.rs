//! What a launch of an instance type would meet in each region now, shown
//! beside its prices before a tenant orders: room that exists, not a promise
//! (the scheduler decides at its next cycle, by rank).
//!
//! The scheduling leader works the figures out for every instance type
//! from the cycle it runs anyway, within a second of a change to the fleet
//! or the queue and at least every few seconds, and writes them here; a
//! request reads a few rows, never the fleet.

use std::collections::HashMap;

use axum::Json;
use axum::extract::{RawPathParams, State};
use chrono::{DateTime, Utc};
use gantry_scheduler as engine;
use sea_orm::ActiveValue::Set;
use sea_orm::{ColumnTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::shares::GpuShape;
use gantry_core::auth::principal::Authenticated;
use gantry_core::error::{ApiError, ApiResult, ProblemResponses};
use gantry_core::state::AppState;
use gantry_entities::{instance_type, launch_room};
use uuid::Uuid;

#[derive(Debug, Serialize, ToSchema)]
pub struct LaunchAvailability {
    pub instance_type: String,
    pub gpu_model: String,
    /// When the scheduler worked the figures out: within a second or so of
    /// any change to the fleet or the queue, and a few seconds at most
    /// while nothing changes. Now, with no regions, before it first has.
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
    let catalog = state.catalog.current(&state.db).await?;
    let model = catalog
        .gpu_model_name(instance.gpu_model_id)
        .ok_or_else(|| ApiError::internal(anyhow::anyhow!("instance type without GPU model")))?
        .to_owned();
    let rows = launch_room::Entity::find()
        .filter(launch_room::Column::InstanceTypeId.eq(instance.id))
        .all(&state.db)
        .await?;
    let as_of = rows
        .iter()
        .map(|r| r.as_of)
        .min()
        .unwrap_or_else(|| state.clock.now());
    let mut regions: Vec<RegionAvailability> = rows
        .into_iter()
        .filter_map(|row| {
            Some(RegionAvailability {
                region: catalog.region_name(row.region_id)?.to_owned(),
                instances_now: row.instances_now.map(|n| u32::try_from(n).unwrap_or(0)),
                waiting_gpus: u32::try_from(row.waiting_gpus).unwrap_or(u32::MAX),
            })
        })
        .collect();
    regions.sort_by(|a, b| a.region.cmp(&b.region));
    Ok(Json(LaunchAvailability {
        instance_type: instance.name,
        gpu_model: model,
        as_of,
        regions,
    }))
}

/// The shape a launch of the type asks the engine for, on GPUs of `model`.
pub fn launch_shape(instance: &instance_type::Model, model: &str) -> engine::LaunchShape {
    engine::LaunchShape {
        model: model.to_owned(),
        gpus: GpuShape::of_type(instance).request(),
        cpu_milli: u64::try_from(instance.vcpus).unwrap_or(0) * 1000,
        memory_mib: u64::try_from(instance.memory_gib).unwrap_or(0) * 1024,
    }
}

/// Replaces every instance type's launch room with `rooms` (by instance
/// type, the engine's answer per region by name), as of `now`: one
/// transaction, so a reader sees the old figures or the new.
pub async fn record(
    db: &DatabaseConnection,
    rooms: &[(Uuid, Vec<engine::RegionRoom>)],
    region_ids: &HashMap<&str, Uuid>,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    let rows: Vec<launch_room::ActiveModel> = rooms
        .iter()
        .flat_map(|(instance_type_id, rooms)| {
            rooms.iter().filter_map(move |room| {
                Some(launch_room::ActiveModel {
                    instance_type_id: Set(*instance_type_id),
                    region_id: Set(*region_ids.get(room.region.as_str())?),
                    instances_now: Set(room
                        .instances
                        .map(|n| i32::try_from(n).unwrap_or(i32::MAX))),
                    waiting_gpus: Set(i64::from(room.waiting_gpus)),
                    as_of: Set(now),
                })
            })
        })
        .collect();
    let txn = gantry_core::db::write(db).await?;
    launch_room::Entity::delete_many().exec(&txn).await?;
    for chunk in rows.chunks(1_000) {
        launch_room::Entity::insert_many(chunk.to_vec())
            .exec(&txn)
            .await?;
    }
    txn.commit().await
}
