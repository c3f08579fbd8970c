//! Capacity reservations: a tenant holds the exact GPUs of an instance type
//! in one region over a window of whole hours, priced at the reserved rate
//! when confirmed. During the window only orders that name the reservation
//! (and only its organization's) start on those GPUs, ahead of any queue;
//! before it others may use them only with work that ends in time. The
//! whole window is billed whether used or not, and usage inside it is not
//! billed again.

pub mod api;
pub mod billing;
pub mod calendar;
pub mod maintenance;
pub mod service;

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QuerySelect};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::orders::NodePlacement;
use gantry_core::catalog::Catalog;
pub use gantry_core::error::Window;
use gantry_core::error::{ApiError, ApiResult};
use gantry_entities::{order, reservation, reservation_node, usage_record};
use gantry_types::classes::{ReservationStatus, UsageKind};

/// Where a reservation is at a moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReservationState {
    /// Confirmed; its window has not begun.
    Upcoming,
    /// Inside its window.
    Active,
    /// Its window is over.
    Ended,
    Cancelled,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Reservation {
    pub id: Uuid,
    pub org_id: Uuid,
    /// When set, only this project's orders may run in it.
    pub project_id: Option<Uuid>,
    pub name: String,
    pub instance_type: String,
    pub gpu_model: String,
    pub region: String,
    /// Instances of the type held, one node each.
    pub count: i32,
    pub gpus_per_node: i32,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    pub state: ReservationState,
    /// The reserved price per instance-hour, fixed when it was confirmed.
    pub hourly_micros: i64,
    /// What it costs in all: its charged window at its price, plus any
    /// cancellation fee.
    pub total_micros: i64,
    pub currency: String,
    /// The exact GPUs held.
    pub placement: Vec<NodePlacement>,
    /// GPUs × seconds of its charged window.
    pub reserved_gpu_seconds: i64,
    /// GPUs × seconds its orders have run so far (metered).
    pub used_gpu_seconds: i64,
    /// Where the charged window ends: `ends_at`, or earlier once cancelled.
    pub billed_until: DateTime<Utc>,
    pub cancelled_at: Option<DateTime<Utc>>,
    pub cancellation_fee_micros: i64,
    /// What cancelling it now would cost, while it can be cancelled.
    pub cancel_now: Option<CancelNow>,
    pub created_at: DateTime<Utc>,
}

/// The cost of cancelling a reservation at the moment of the answer, by
/// the operator's policy: free until `free_until`; later the time already
/// begun stays charged and a share of the rest is a fee.
#[derive(Debug, Serialize, ToSchema)]
pub struct CancelNow {
    /// Until then, cancelling costs nothing.
    pub free_until: DateTime<Utc>,
    /// The fee for the time not yet begun.
    pub fee_micros: i64,
    /// All it would cost: the time charged up to the cancellation and the
    /// fee.
    pub total_micros: i64,
}

/// A reservation to confirm (or quote): a fixed window, or a length placed
/// at the earliest start that fits.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateReservation {
    /// A name to know it by; the type, count and start when absent.
    #[schema(min_length = 1, max_length = 64)]
    pub name: Option<String>,
    /// Instance type name or id: its GPUs per node, CPU and memory are one
    /// reserved instance.
    #[schema(min_length = 1, max_length = 64)]
    pub instance_type: String,
    /// Instances, each on its own node; 1 when absent.
    #[schema(minimum = 1, maximum = 64)]
    pub count: Option<i32>,
    /// Region name or id.
    #[schema(min_length = 1, max_length = 64)]
    pub region: String,
    /// Only this project's orders may use it; any of the organization's
    /// when absent.
    pub project_id: Option<Uuid>,
    /// Start of a fixed window, on a whole hour (UTC), not in the past.
    pub starts_at: Option<DateTime<Utc>>,
    /// End of a fixed window, on a whole hour, at most 2,160 hours after
    /// the start.
    pub ends_at: Option<DateTime<Utc>>,
    /// Instead of a fixed window: its length, placed at the earliest start
    /// that fits.
    #[schema(minimum = 1, maximum = 2160)]
    pub duration_hours: Option<i64>,
    /// With `duration_hours`: the earliest acceptable start, on a whole
    /// hour; the next whole hour when absent.
    pub earliest_start: Option<DateTime<Utc>>,
}

/// What a reservation would cost, and whether it is available.
#[derive(Debug, Serialize, ToSchema)]
pub struct Quote {
    pub instance_type: String,
    pub gpu_model: String,
    pub region: String,
    pub count: i32,
    pub gpus: i64,
    /// The window priced: the one asked, or for a flexible ask the
    /// earliest that fits (the asked start when none does).
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    /// The reserved price per instance-hour in force now.
    pub hourly_micros: i64,
    /// The whole window at that price.
    pub total_micros: i64,
    pub currency: String,
    /// Whether that window can be confirmed now.
    pub available: bool,
    /// When it is not: the earliest windows of the same length that can.
    pub alternatives: Vec<Window>,
    /// Cancelling until then costs nothing.
    pub free_cancellation_until: DateTime<Utc>,
    /// The share of the time not yet begun that a later cancellation costs.
    pub cancellation_fee_percent: u32,
}

/// A later end for a reservation.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ExtendReservation {
    /// The new end: on a whole hour, after the current one.
    pub ends_at: DateTime<Utc>,
}

/// The state of `row` at `now`.
pub fn state_of(row: &reservation::Model, now: DateTime<Utc>) -> ReservationState {
    match row.status {
        ReservationStatus::Cancelled => ReservationState::Cancelled,
        ReservationStatus::Ended => ReservationState::Ended,
        ReservationStatus::Confirmed if now >= row.ends_at => ReservationState::Ended,
        ReservationStatus::Confirmed if now >= row.starts_at => ReservationState::Active,
        ReservationStatus::Confirmed => ReservationState::Upcoming,
    }
}

/// GPU-seconds of the charged window of `row` between `from` and `to`.
pub fn reserved_gpu_seconds(
    row: &reservation::Model,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> i64 {
    let start = row.starts_at.max(from);
    let end = row.billed_until.min(to);
    (end - start).num_seconds().max(0) * row.gpus()
}

/// Reservations as tenants see them.
pub async fn views(
    db: &impl ConnectionTrait,
    catalog: &Catalog,
    config: &gantry_core::config::Config,
    rows: Vec<reservation::Model>,
    now: DateTime<Utc>,
) -> ApiResult<Vec<Reservation>> {
    let ids: Vec<Uuid> = rows.iter().map(|r| r.id).collect();
    let held = reservation_node::Entity::find()
        .filter(reservation_node::Column::ReservationId.is_in(ids.clone()))
        .all(db)
        .await?;
    let node_names = gantry_inventory::nodes::names(db, held.iter().map(|h| h.node_id)).await?;
    let regions: HashMap<Uuid, &str> = rows
        .iter()
        .map(|r| (r.id, catalog.region_name(r.region_id).unwrap_or_default()))
        .collect();
    let mut placements: HashMap<Uuid, Vec<NodePlacement>> = HashMap::new();
    for h in held {
        placements
            .entry(h.reservation_id)
            .or_default()
            .push(NodePlacement {
                node_id: h.node_id,
                node_name: node_names.get(&h.node_id).cloned().unwrap_or_default(),
                region: regions
                    .get(&h.reservation_id)
                    .copied()
                    .unwrap_or_default()
                    .to_owned(),
                gpu_ids: h.gpu_list(),
                mig_device: None,
            });
    }
    let used = used_gpu_seconds(db, &ids).await?;
    let name = |n: Option<&str>| n.unwrap_or_default().to_owned();
    Ok(rows
        .into_iter()
        .map(|r| {
            let reserved = reserved_gpu_seconds(&r, r.starts_at, r.billed_until);
            let state = state_of(&r, now);
            let cancel_now = matches!(state, ReservationState::Upcoming | ReservationState::Active)
                .then(|| {
                    let (billed_until, fee) = service::cancellation(
                        &r,
                        config.reservation_free_cancel_hours,
                        config.reservation_cancel_fee_percent,
                        now,
                    );
                    let charged = gantry_pricing::rating::amount_per_gpu(
                        reserved_gpu_seconds(&r, r.starts_at, billed_until),
                        r.hourly_micros,
                        r.gpus_per_node,
                        1000,
                    );
                    CancelNow {
                        free_until: service::free_cancellation_until(
                            r.starts_at,
                            config.reservation_free_cancel_hours,
                        ),
                        fee_micros: fee,
                        total_micros: charged.saturating_add(fee),
                    }
                });
            let mut placement = placements.remove(&r.id).unwrap_or_default();
            placement.sort_by(|a, b| a.node_name.cmp(&b.node_name));
            Reservation {
                id: r.id,
                org_id: r.org_id,
                project_id: r.project_id,
                name: r.name.clone(),
                instance_type: name(catalog.instance_type_name(r.instance_type_id)),
                gpu_model: name(catalog.gpu_model_name(r.gpu_model_id)),
                region: name(catalog.region_name(r.region_id)),
                count: r.node_count,
                gpus_per_node: r.gpus_per_node,
                starts_at: r.starts_at,
                ends_at: r.ends_at,
                state,
                hourly_micros: r.hourly_micros,
                total_micros: gantry_pricing::rating::amount_per_gpu(
                    reserved,
                    r.hourly_micros,
                    r.gpus_per_node,
                    1000,
                )
                .saturating_add(r.cancellation_fee_micros),
                currency: config.currency.clone(),
                placement,
                reserved_gpu_seconds: reserved,
                used_gpu_seconds: used.get(&r.id).copied().unwrap_or(0),
                billed_until: r.billed_until,
                cancelled_at: r.cancelled_at,
                cancellation_fee_micros: r.cancellation_fee_micros,
                cancel_now,
                created_at: r.created_at,
            }
        })
        .collect())
}

/// The reservation of each order `which` selects that runs in one.
pub async fn reservation_of(
    db: &impl ConnectionTrait,
    which: sea_orm::sea_query::SimpleExpr,
) -> Result<HashMap<Uuid, Uuid>, sea_orm::DbErr> {
    Ok(order::Entity::find()
        .filter(which)
        .select_only()
        .columns([order::Column::Id, order::Column::ReservationId])
        .into_tuple::<(Uuid, Option<Uuid>)>()
        .all(db)
        .await?
        .into_iter()
        .filter_map(|(id, r)| r.map(|r| (id, r)))
        .collect())
}

/// GPU-seconds metered for the orders of each reservation.
async fn used_gpu_seconds(
    db: &impl ConnectionTrait,
    reservations: &[Uuid],
) -> ApiResult<HashMap<Uuid, i64>> {
    if reservations.is_empty() {
        return Ok(HashMap::new());
    }
    let orders = reservation_of(
        db,
        order::Column::ReservationId.is_in(reservations.iter().copied()),
    )
    .await?;
    let records: Vec<(Uuid, i64, i32)> = usage_record::Entity::find()
        .filter(usage_record::Column::OrderId.is_in(orders.keys().copied()))
        .filter(usage_record::Column::Kind.eq(UsageKind::Metered))
        .select_only()
        .columns([
            usage_record::Column::OrderId,
            usage_record::Column::Seconds,
            usage_record::Column::Gpus,
        ])
        .into_tuple()
        .all(db)
        .await?;
    let mut used: HashMap<Uuid, i64> = HashMap::new();
    for (order_id, seconds, gpus) in records {
        if let Some(r) = orders.get(&order_id) {
            *used.entry(*r).or_default() += seconds * i64::from(gpus);
        }
    }
    Ok(used)
}

/// The reservation an order names, checked against the order: the same
/// organization (another's is not found), project, GPU model and region, no
/// more nodes or GPUs per node than it holds, and not over.
pub async fn for_order(
    db: &impl ConnectionTrait,
    scope: &gantry_access::tenancy::access::OrgScope,
    id: Uuid,
    order: OrderShape,
    now: DateTime<Utc>,
) -> ApiResult<reservation::Model> {
    let row = scope
        .select::<reservation::Entity>()
        .filter(reservation::Column::Id.eq(id))
        .one(db)
        .await?
        .ok_or_else(|| {
            ApiError::unprocessable(
                "unknown_reservation",
                format!("no reservation {id} in this organization"),
            )
        })?;
    let refuse = |why: String| Err(ApiError::unprocessable("reservation_mismatch", why));
    match state_of(&row, now) {
        ReservationState::Ended | ReservationState::Cancelled => {
            return Err(ApiError::conflict(
                "reservation_over",
                format!("reservation {} is {}", row.name, row.status.as_str()),
            ));
        }
        ReservationState::Upcoming | ReservationState::Active => {}
    }
    if row.project_id.is_some() && row.project_id != order.project_id {
        return refuse(format!(
            "reservation {} is for project {}; the order must be in it",
            row.name,
            row.project_id.unwrap_or_default()
        ));
    }
    if row.gpu_model_id != order.gpu_model_id {
        return refuse(format!(
            "reservation {} holds other GPUs than this instance type's",
            row.name
        ));
    }
    if order.region_id.is_some_and(|r| r != row.region_id) {
        return refuse(format!(
            "reservation {} is in another region than the order asks",
            row.name
        ));
    }
    if order.gpus_per_node > row.gpus_per_node || order.node_count > row.node_count {
        return refuse(format!(
            "reservation {} holds {} node(s) of {} GPUs; the order needs {} of {}",
            row.name, row.node_count, row.gpus_per_node, order.node_count, order.gpus_per_node
        ));
    }
    Ok(row)
}

/// What of an order a reservation must hold.
pub struct OrderShape {
    pub project_id: Option<Uuid>,
    pub gpu_model_id: Uuid,
    pub region_id: Option<Uuid>,
    pub gpus_per_node: i32,
    pub node_count: i32,
}
