//! Capacity over time: what tenants can still reserve, hour by hour, and
//! the operator's calendar of reserved, busy and free GPUs with the
//! reservations behind it.

use axum::Json;
use axum::extract::State;
use chrono::{DateTime, TimeDelta, Utc};
use gantry_scheduler as engine;
use std::collections::HashSet;

use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::Reservation;
use super::service::{HOUR, next_hour, on_the_hour};
use gantry_access::tenancy::access::{OrgAccess, need};
use gantry_core::auth::principal::Operator;
use gantry_core::error::{ApiError, ApiResult, ProblemResponses};
use gantry_core::http::extract::ApiQuery;
use gantry_core::state::AppState;
use gantry_core::validate::Fields;
use gantry_entities::{maintenance_window, node, reservation};
use gantry_types::classes::{PricingClass, ReservationStatus};

/// The longest calendar one request covers: four weeks of hours.
const HOURS_MAX: i64 = 28 * 24;
const HOURS_DEFAULT: i64 = 7 * 24;

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AvailabilityQuery {
    /// Instance type name or id.
    #[param(min_length = 1, max_length = 64)]
    pub instance_type: String,
    /// Region name or id.
    #[param(min_length = 1, max_length = 64)]
    pub region: String,
    /// The first hour (a whole hour, UTC); the next whole hour when absent.
    pub from: Option<DateTime<Utc>>,
    /// Hours covered, 1 to 672; 168 when absent.
    #[param(minimum = 1, maximum = 672)]
    pub hours: Option<i64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AvailabilitySlot {
    pub starts_at: DateTime<Utc>,
    /// Instances of the type that could be reserved for this hour.
    pub instances: u32,
}

/// What can be reserved when.
#[derive(Debug, Serialize, ToSchema)]
pub struct Availability {
    pub instance_type: String,
    pub gpu_model: String,
    pub region: String,
    /// The reserved price per instance-hour in force now; none when the
    /// type is not offered reserved there.
    pub hourly_micros: Option<i64>,
    pub currency: String,
    pub slots: Vec<AvailabilitySlot>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct CalendarQuery {
    /// GPU model name or id.
    #[param(min_length = 1, max_length = 64)]
    pub gpu_model: String,
    /// Region name or id; every region when absent.
    #[param(min_length = 1, max_length = 64)]
    pub region: Option<String>,
    /// The first hour (a whole hour, UTC); the current hour when absent.
    pub from: Option<DateTime<Utc>>,
    /// Hours covered, 1 to 672; 168 when absent.
    #[param(minimum = 1, maximum = 672)]
    pub hours: Option<i64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CalendarSlot {
    pub starts_at: DateTime<Utc>,
    /// Healthy GPUs of the model on schedulable nodes.
    pub gpus: u32,
    /// Held by reservations.
    pub reserved: u32,
    /// Not reserved, held by running work expected to last into the hour
    /// (work without an end lasts for ever).
    pub committed: u32,
    pub free: u32,
}

/// The operator's calendar of one GPU model.
#[derive(Debug, Serialize, ToSchema)]
pub struct CapacityCalendar {
    pub gpu_model: String,
    pub region: Option<String>,
    pub slots: Vec<CalendarSlot>,
    /// Confirmed reservations of the model overlapping the calendar.
    pub reservations: Vec<Reservation>,
    /// Maintenance windows overlapping it, in the region when one is given.
    pub maintenance: Vec<super::maintenance::MaintenanceWindow>,
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(reservation_availability))
        .routes(routes!(capacity_calendar))
}

/// The first hour and the number of hours a query asks for.
fn span(
    from: Option<DateTime<Utc>>,
    hours: Option<i64>,
    default_from: DateTime<Utc>,
) -> ApiResult<(DateTime<Utc>, i64)> {
    let mut fields = Fields::default();
    let from = from.unwrap_or(default_from);
    if !on_the_hour(from) {
        fields.push("from", "must be on a whole hour (UTC)");
    }
    let hours = hours.unwrap_or(HOURS_DEFAULT);
    fields.range("hours", hours, 1, HOURS_MAX);
    fields.finish()?;
    Ok((from, hours))
}

/// Hour by hour, how many instances of a type could still be reserved in a
/// region.
#[utoipa::path(
    get,
    path = "/orgs/{org_id}/reservations/availability",
    tag = "reservations",
    params(("org_id" = uuid::Uuid, Path, description = "Organization id"), AvailabilityQuery),
    responses((status = 200, description = "Instances free to reserve, per hour", body = Availability), ProblemResponses),
    security(("bearer" = []))
)]
async fn reservation_availability(
    State(state): State<AppState>,
    _access: OrgAccess<need::AnyRole>,
    ApiQuery(query): ApiQuery<AvailabilityQuery>,
) -> ApiResult<Json<Availability>> {
    let now = state.clock.now();
    let (from, hours) = span(query.from, query.hours, next_hour(now))?;
    let catalog = state.catalog.current(&state.db).await?;
    let instance = catalog.instance_type(&query.instance_type)?;
    let region = catalog.region(&query.region)?;
    let model = catalog
        .gpu_model(instance.gpu_model_id)
        .ok_or_else(|| ApiError::internal(anyhow::anyhow!("instance type without GPU model")))?;
    let loaded = gantry_world::load::load(&state.db, now).await?;
    let slots = engine::capacity_calendar(
        &loaded.snapshot.snapshot(),
        &engine::CalendarRequest {
            model: model.name.clone(),
            regions: vec![region.name.clone()],
            gpus_per_node: u32::try_from(instance.gpus_per_node).unwrap_or(0),
            cpu_milli: u64::try_from(instance.vcpus).unwrap_or(0) * 1000,
            memory_mib: u64::try_from(instance.memory_gib).unwrap_or(0) * 1024,
            from: from.timestamp(),
            step: HOUR,
            slots: usize::try_from(hours).unwrap_or(0),
        },
    );
    let (book, _) = gantry_pricing::book::price_context(&state.db, [instance.id]).await?;
    Ok(Json(Availability {
        instance_type: instance.name.clone(),
        gpu_model: model.name.clone(),
        region: region.name.clone(),
        hourly_micros: book.at(
            instance.id,
            PricingClass::Reserved,
            region.id,
            now.timestamp(),
        ),
        currency: state.config.currency.clone(),
        slots: slots
            .into_iter()
            .map(|s| AvailabilitySlot {
                starts_at: DateTime::from_timestamp(s.start, 0).unwrap_or(from),
                instances: s.instances,
            })
            .collect(),
    }))
}

/// Hour by hour, a GPU model's reserved, committed and free GPUs, with the
/// reservations behind them.
#[utoipa::path(
    get,
    path = "/admin/capacity/calendar",
    tag = "admin",
    params(CalendarQuery),
    responses((status = 200, description = "The calendar", body = CapacityCalendar), ProblemResponses),
    security(("bearer" = []))
)]
async fn capacity_calendar(
    State(state): State<AppState>,
    _operator: Operator,
    ApiQuery(query): ApiQuery<CalendarQuery>,
) -> ApiResult<Json<CapacityCalendar>> {
    let now = state.clock.now();
    let (from, hours) = span(
        query.from,
        query.hours,
        next_hour(now) - TimeDelta::hours(1),
    )?;
    let to = from + TimeDelta::hours(hours);
    let catalog = state.catalog.current(&state.db).await?;
    let model = catalog.gpu_model_named(&query.gpu_model)?;
    let region = query
        .region
        .as_deref()
        .map(|r| catalog.region(r))
        .transpose()?;
    let loaded = gantry_world::load::load(&state.db, now).await?;
    let slots = engine::capacity_calendar(
        &loaded.snapshot.snapshot(),
        &engine::CalendarRequest {
            model: model.name.clone(),
            regions: region.iter().map(|r| r.name.clone()).collect(),
            from: from.timestamp(),
            step: HOUR,
            slots: usize::try_from(hours).unwrap_or(0),
            ..engine::CalendarRequest::default()
        },
    );
    let mut overlapping = reservation::Entity::find()
        .filter(reservation::Column::GpuModelId.eq(model.id))
        .filter(reservation::Column::Status.eq(ReservationStatus::Confirmed))
        .filter(reservation::Column::StartsAt.lt(to))
        .filter(reservation::Column::EndsAt.gt(from));
    if let Some(region) = region {
        overlapping = overlapping.filter(reservation::Column::RegionId.eq(region.id));
    }
    let rows = overlapping
        .order_by_asc(reservation::Column::StartsAt)
        .all(&state.db)
        .await?;
    let mut windows = maintenance_window::Entity::find()
        .filter(maintenance_window::Column::Status.eq(ReservationStatus::Confirmed))
        .filter(maintenance_window::Column::StartsAt.lt(to))
        .filter(maintenance_window::Column::EndsAt.gt(from))
        .order_by_asc(maintenance_window::Column::StartsAt)
        .all(&state.db)
        .await?;
    if let Some(region) = region {
        let here: HashSet<Uuid> = node::Entity::find()
            .filter(node::Column::RegionId.eq(region.id))
            .select_only()
            .column(node::Column::Id)
            .into_tuple::<Uuid>()
            .all(&state.db)
            .await?
            .into_iter()
            .collect();
        windows.retain(|w| here.contains(&w.node_id));
    }
    Ok(Json(CapacityCalendar {
        gpu_model: model.name.clone(),
        region: region.map(|r| r.name.clone()),
        slots: slots
            .into_iter()
            .map(|s| CalendarSlot {
                starts_at: DateTime::from_timestamp(s.start, 0).unwrap_or(from),
                gpus: s.gpus,
                reserved: s.reserved,
                committed: s.busy,
                free: s.free,
            })
            .collect(),
        reservations: super::views(&state.db, &catalog, &state.config, rows, now).await?,
        maintenance: super::maintenance::views(&state.db, windows).await?,
    }))
}
