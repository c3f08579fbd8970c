//! Reservations apart from HTTP: what a request asks for, whether and
//! where it fits, and the writes that confirm, cancel, extend and end one.
//! Each write takes the caller's transaction.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, TimeDelta, Timelike, Utc};
use gantry_scheduler as engine;
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DatabaseTransaction, DbBackend, DbErr,
    EntityTrait, PaginatorTrait, QueryFilter, QuerySelect, Set,
};
use uuid::Uuid;

use super::{CreateReservation, Window};
use gantry_access::tenancy::access::OrgScope;
use gantry_core::catalog::Catalog;
use gantry_core::error::{ApiError, ApiResult};
use gantry_core::validate::Fields;
use gantry_entities::{
    gpu_model, instance_type, maintenance_window, order, region, reservation, reservation_node,
};
use gantry_types::classes::{OrderStatus, PricingClass, PriorityClass, ReservationStatus};

/// Reservations are sold by the hour: windows start and end on whole hours
/// (UTC), as usage records do, so every invoice period splits them exactly.
pub const HOUR: i64 = 3_600;
/// The longest window.
pub const LENGTH_MAX_HOURS: i64 = 90 * 24;
/// How far ahead a window may start.
pub const AHEAD_MAX_DAYS: i64 = 365;
/// The most instances one reservation holds.
pub const COUNT_MAX: i32 = 64;
/// How far past the asked start alternatives are looked for.
const ALTERNATIVES_WITHIN_DAYS: i64 = 28;
/// Alternatives offered with a refusal.
const ALTERNATIVES: usize = 3;

/// The PostgreSQL advisory lock that makes reservations one at a time:
/// two requests planned side by side could both take the same GPUs.
const RESERVATION_LOCK: i64 = 0x7265_7365_7276;

/// A validated request, with the catalog rows it names.
pub struct Ask<'c> {
    pub name: Option<String>,
    pub instance: &'c instance_type::Model,
    pub model: &'c gpu_model::Model,
    pub region: &'c region::Model,
    pub project_id: Option<Uuid>,
    pub count: i32,
    /// A fixed window, or a length placed at the earliest start from
    /// `starts_at`.
    pub starts_at: DateTime<Utc>,
    pub hours: i64,
    pub flexible: bool,
}

impl Ask<'_> {
    pub fn gpus(&self) -> i64 {
        i64::from(self.count) * i64::from(self.instance.gpus_per_node)
    }

    fn engine_request(&self, org_id: Uuid, start: i64) -> engine::ReservationRequest {
        engine::ReservationRequest {
            queue: org_id.to_string(),
            gpu_models: vec![self.model.name.clone()],
            gpus_per_node: u32::try_from(self.instance.gpus_per_node).unwrap_or(0),
            node_count: u32::try_from(self.count).unwrap_or(0),
            regions: vec![self.region.name.clone()],
            required_labels: Default::default(),
            start,
            end: start + self.hours * HOUR,
        }
    }
}

/// Whether `t` is a whole hour (UTC).
pub fn on_the_hour(t: DateTime<Utc>) -> bool {
    t.timestamp().rem_euclid(HOUR) == 0 && t.nanosecond() == 0
}

/// The first whole hour at or after `t`.
pub fn next_hour(t: DateTime<Utc>) -> DateTime<Utc> {
    let seconds = t.timestamp();
    let up = seconds + (HOUR - seconds.rem_euclid(HOUR)).rem_euclid(HOUR);
    let up = if up == seconds && t.nanosecond() > 0 {
        up + HOUR
    } else {
        up
    };
    DateTime::from_timestamp(up, 0).unwrap_or(t)
}

/// Checks a request field by field, then against the catalog, the
/// organization's projects, quotas, budget and what the region has.
pub async fn validate<'c>(
    db: &impl ConnectionTrait,
    catalog: &'c Catalog,
    scope: &OrgScope,
    request: &CreateReservation,
    now: DateTime<Utc>,
) -> ApiResult<Ask<'c>> {
    let mut fields = Fields::default();
    let name = request
        .name
        .as_deref()
        .map(|name| fields.name("name", name, 64));
    let count = request.count.unwrap_or(1);
    fields.range("count", count, 1, COUNT_MAX);
    let whole = |fields: &mut Fields, field: &str, t: DateTime<Utc>| {
        if !on_the_hour(t) {
            fields.push(
                field,
                "must be on a whole hour (UTC), such as 2027-01-04T09:00:00Z",
            );
        }
    };
    let latest_start = now + TimeDelta::days(AHEAD_MAX_DAYS);
    let (starts_at, hours, flexible) =
        match (request.starts_at, request.ends_at, request.duration_hours) {
            (Some(start), Some(end), None) => {
                if request.earliest_start.is_some() {
                    fields.push(
                        "earliest_start",
                        "goes with duration_hours, not with a fixed window",
                    );
                }
                whole(&mut fields, "starts_at", start);
                whole(&mut fields, "ends_at", end);
                if start < now {
                    fields.push("starts_at", "is in the past");
                }
                if end <= start {
                    fields.push("ends_at", "must be after starts_at");
                }
                let hours = (end - start).num_seconds().div_euclid(HOUR);
                if end > start && hours > LENGTH_MAX_HOURS {
                    fields.push(
                        "ends_at",
                        format!("a window lasts at most {LENGTH_MAX_HOURS} hours"),
                    );
                }
                (start, hours, false)
            }
            (None, None, Some(hours)) => {
                fields.range("duration_hours", hours, 1, LENGTH_MAX_HOURS);
                let from = request.earliest_start.unwrap_or_else(|| next_hour(now));
                whole(&mut fields, "earliest_start", from);
                if from < now {
                    fields.push("earliest_start", "is in the past");
                }
                (from, hours, true)
            }
            _ => {
                fields.push(
                    "starts_at",
                    "give starts_at and ends_at, or duration_hours (and optionally earliest_start)",
                );
                (now, 0, false)
            }
        };
    if starts_at > latest_start {
        fields.push(
            if flexible {
                "earliest_start"
            } else {
                "starts_at"
            },
            format!("may be at most {AHEAD_MAX_DAYS} days ahead"),
        );
    }
    fields.finish()?;
    let instance = catalog.instance_type(&request.instance_type)?;
    if gantry_core::catalog::shares::GpuShape::of_type(instance).is_shared() {
        return Err(ApiError::unprocessable(
            "shared_gpu_reservation",
            format!(
                "instance type {} shares a GPU; reservations hold whole GPUs of whole-GPU types",
                instance.name
            ),
        ));
    }
    let model = catalog
        .gpu_model(instance.gpu_model_id)
        .ok_or_else(|| ApiError::internal(anyhow::anyhow!("instance type without GPU model")))?;
    let region = catalog.region(&request.region)?;
    gantry_access::tenancy::projects::require_in(db, scope, request.project_id).await?;
    crate::orders::admission::admit(
        db,
        catalog,
        &crate::orders::admission::Request {
            org_id: scope.org_id,
            project_id: request.project_id,
            instance,
            model,
            region: Some(region),
            node: None,
            node_count: count,
            pricing_class: PricingClass::Reserved,
            priority_class: PriorityClass::Standard,
            in_reservation: false,
            now,
        },
    )
    .await?;
    Ok(Ask {
        name,
        instance,
        model,
        region,
        project_id: request.project_id,
        count,
        starts_at,
        hours,
        flexible,
    })
}

/// The reserved price per instance-hour in force at `at`.
pub async fn price(db: &impl ConnectionTrait, ask: &Ask<'_>, at: DateTime<Utc>) -> ApiResult<i64> {
    let (book, _) = gantry_pricing::book::price_context(db, [ask.instance.id]).await?;
    book.at(
        ask.instance.id,
        PricingClass::Reserved,
        ask.region.id,
        at.timestamp(),
    )
    .ok_or_else(|| {
        ApiError::unprocessable(
            "not_offered",
            format!(
                "instance type {} has no reserved price in region {}",
                ask.instance.name, ask.region.name
            ),
        )
    })
}

/// Where a request fits, or the windows that would.
pub enum Fit {
    Fits {
        window: Window,
        placements: Vec<engine::Placement>,
    },
    Refused {
        alternatives: Vec<Window>,
    },
}

fn window(start: i64, hours: i64) -> Window {
    let at = |t: i64| DateTime::from_timestamp(t, 0).unwrap_or_default();
    Window {
        starts_at: at(start),
        ends_at: at(start + hours * HOUR),
    }
}

/// Plans `ask` against the cluster as `loaded` has it: the exact GPUs of
/// its window, or (for a flexible ask) of the earliest window, or the
/// earliest windows that would fit instead.
pub fn fit(loaded: &gantry_world::load::Loaded, org_id: Uuid, ask: &Ask<'_>) -> Fit {
    let snapshot = loaded.snapshot.snapshot();
    let start = ask.starts_at.timestamp();
    let request = ask.engine_request(org_id, start);
    if !ask.flexible
        && let Some(placements) = engine::plan_advance_reservation(&snapshot, &request)
    {
        return Fit::Fits {
            window: window(start, ask.hours),
            placements,
        };
    }
    let latest = start + TimeDelta::days(ALTERNATIVES_WITHIN_DAYS).num_seconds();
    let mut found = engine::earliest_windows(&snapshot, &request, latest, HOUR, ALTERNATIVES);
    if ask.flexible && !found.is_empty() {
        let (start, placements) = found.swap_remove(0);
        return Fit::Fits {
            window: window(start, ask.hours),
            placements,
        };
    }
    Fit::Refused {
        alternatives: found
            .into_iter()
            .map(|(start, _)| window(start, ask.hours))
            .collect(),
    }
}

/// How often a plan is made again when another reservation took its GPUs
/// between planning and writing.
pub const PLAN_TRIES: usize = 3;

/// The GPUs of `placements` by node id.
pub fn held_gpus(
    nodes: &HashMap<String, (Uuid, HashMap<u32, Uuid>)>,
    placements: &[engine::Placement],
) -> ApiResult<Vec<(Uuid, Vec<u32>)>> {
    placements
        .iter()
        .map(|p| {
            nodes
                .get(&p.node)
                .map(|(id, _)| (*id, p.gpus.clone()))
                .ok_or_else(|| {
                    ApiError::internal(anyhow::anyhow!("planned node {} is unknown", p.node))
                })
        })
        .collect()
}

/// Whether a confirmed reservation (other than `except`) or maintenance
/// window holds any of `gpus` during `window`: what was planned outside
/// the lock is checked under it, so planning never holds the write lock.
pub async fn taken(
    txn: &impl ConnectionTrait,
    gpus: &[(Uuid, Vec<u32>)],
    window: Window,
    except: Option<Uuid>,
) -> Result<bool, DbErr> {
    let nodes: Vec<Uuid> = gpus.iter().map(|(node, _)| *node).collect();
    let maintained = maintenance_window::Entity::find()
        .filter(maintenance_window::Column::NodeId.is_in(nodes.iter().copied()))
        .filter(maintenance_window::Column::Status.eq(ReservationStatus::Confirmed))
        .filter(maintenance_window::Column::StartsAt.lt(window.ends_at))
        .filter(maintenance_window::Column::EndsAt.gt(window.starts_at))
        .count(txn)
        .await?;
    if maintained > 0 {
        return Ok(true);
    }
    let held = reservation_node::Entity::find()
        .filter(reservation_node::Column::NodeId.is_in(nodes))
        .all(txn)
        .await?;
    let mut overlapping = reservation::Entity::find()
        .filter(reservation::Column::Id.is_in(held.iter().map(|h| h.reservation_id)))
        .filter(reservation::Column::Status.eq(ReservationStatus::Confirmed))
        .filter(reservation::Column::StartsAt.lt(window.ends_at))
        .filter(reservation::Column::EndsAt.gt(window.starts_at));
    if let Some(except) = except {
        overlapping = overlapping.filter(reservation::Column::Id.ne(except));
    }
    let live: HashSet<Uuid> = overlapping
        .select_only()
        .column(reservation::Column::Id)
        .into_tuple::<Uuid>()
        .all(txn)
        .await?
        .into_iter()
        .collect();
    Ok(held
        .iter()
        .filter(|h| live.contains(&h.reservation_id))
        .any(|h| {
            let theirs = h.gpu_list();
            gpus.iter()
                .any(|(node, mine)| *node == h.node_id && mine.iter().any(|g| theirs.contains(g)))
        }))
}

/// Makes reservations (and extensions) one at a time: on SQLite the write
/// transaction is already alone; on PostgreSQL an advisory lock is taken.
pub async fn serialize(txn: &DatabaseTransaction) -> Result<(), DbErr> {
    if txn.get_database_backend() == DbBackend::Postgres {
        txn.execute_unprepared(&format!("SELECT pg_advisory_xact_lock({RESERVATION_LOCK})"))
            .await?;
    }
    Ok(())
}

/// The rows of a confirmed reservation.
pub struct Confirm<'a> {
    pub org_id: Uuid,
    pub ask: &'a Ask<'a>,
    pub window: Window,
    /// The GPUs held, by node id.
    pub gpus: &'a [(Uuid, Vec<u32>)],
    pub hourly_micros: i64,
    pub actor: &'a gantry_core::auth::principal::Actor,
    pub now: DateTime<Utc>,
}

/// Writes a confirmed reservation and the GPUs it holds.
pub async fn confirm(
    txn: &impl ConnectionTrait,
    confirm: Confirm<'_>,
) -> ApiResult<reservation::Model> {
    let ask = confirm.ask;
    let id = Uuid::now_v7();
    let name = ask.name.clone().unwrap_or_else(|| {
        format!(
            "{}x{} {}",
            ask.instance.name,
            ask.count,
            confirm.window.starts_at.format("%Y-%m-%d %H:%M")
        )
    });
    let row = reservation::ActiveModel {
        id: Set(id),
        org_id: Set(confirm.org_id),
        project_id: Set(ask.project_id),
        name: Set(name),
        instance_type_id: Set(ask.instance.id),
        gpu_model_id: Set(ask.model.id),
        region_id: Set(ask.region.id),
        node_count: Set(ask.count),
        gpus_per_node: Set(ask.instance.gpus_per_node),
        starts_at: Set(confirm.window.starts_at),
        ends_at: Set(confirm.window.ends_at),
        hourly_micros: Set(confirm.hourly_micros),
        status: Set(ReservationStatus::Confirmed),
        billed_until: Set(confirm.window.ends_at),
        cancelled_at: Set(None),
        cancellation_fee_micros: Set(0),
        created_by_kind: Set(confirm.actor.kind.to_owned()),
        created_by: Set(confirm.actor.id),
        created_at: Set(confirm.now),
        updated_at: Set(confirm.now),
    }
    .insert(txn)
    .await?;
    for (node_id, gpus) in confirm.gpus {
        reservation_node::ActiveModel {
            id: Set(Uuid::now_v7()),
            reservation_id: Set(id),
            node_id: Set(*node_id),
            gpu_indices: Set(serde_json::to_string(gpus).unwrap_or_default()),
        }
        .insert(txn)
        .await?;
    }
    Ok(row)
}

/// Until when a reservation starting at `starts_at` is cancelled for free.
pub fn free_cancellation_until(starts_at: DateTime<Utc>, free_hours: u64) -> DateTime<Utc> {
    starts_at - TimeDelta::hours(i64::try_from(free_hours).unwrap_or(0))
}

/// What cancelling costs under the operator's policy: nothing at least
/// `free_hours` before the window; later, `fee_percent` of the reserved
/// time not yet begun (from the next whole hour), while the time already
/// begun stays charged as used or unused.
pub fn cancellation(
    row: &reservation::Model,
    free_hours: u64,
    fee_percent: u32,
    now: DateTime<Utc>,
) -> (DateTime<Utc>, i64) {
    let free_until = free_cancellation_until(row.starts_at, free_hours);
    if now <= free_until {
        return (row.starts_at, 0);
    }
    let billed_until = next_hour(now).clamp(row.starts_at, row.ends_at);
    let left = (row.ends_at - billed_until).num_seconds() * row.gpus();
    let fee = gantry_pricing::rating::amount_per_gpu(
        left,
        row.hourly_micros,
        row.gpus_per_node,
        fee_percent * 10,
    );
    (billed_until, fee)
}

/// Stops every live order that runs in reservation `id`, saying why.
pub async fn stop_orders(
    txn: &impl ConnectionTrait,
    id: Uuid,
    why: &str,
    now: DateTime<Utc>,
) -> Result<usize, DbErr> {
    let live = order::Entity::find()
        .filter(order::Column::ReservationId.eq(id))
        .filter(order::Column::Status.is_not_in([
            OrderStatus::Completed,
            OrderStatus::Failed,
            OrderStatus::Cancelled,
            OrderStatus::TimedOut,
        ]))
        .all(txn)
        .await?;
    let mut stopped = 0;
    for o in live {
        if let crate::orders::Cancelled::Now { order, .. } =
            crate::orders::cancel(txn, o.id, now).await?
        {
            let mut row: order::ActiveModel = order.into();
            row.failure_reason = Set(Some(why.to_owned()));
            row.update(txn).await?;
            stopped += 1;
        }
    }
    Ok(stopped)
}

/// Ends the reservations whose window is over: their work is stopped and
/// their GPUs go back to everyone; maintenance windows that are over end
/// too. Run by the scheduling loop.
pub async fn end_windows(
    db: &sea_orm::DatabaseConnection,
    world: &gantry_world::world::World,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    // The leader's copy holds every confirmed window, so a cycle in which
    // none is over reads and writes nothing.
    let over: Vec<&reservation::Model> = world
        .reservations
        .values()
        .filter(|r| r.ends_at <= now)
        .collect();
    for r in over {
        let txn = gantry_core::db::write(db).await?;
        // Conditional on the status, so a cancel that came first wins.
        let ended = reservation::Entity::update_many()
            .col_expr(
                reservation::Column::Status,
                Expr::value(ReservationStatus::Ended),
            )
            .col_expr(reservation::Column::UpdatedAt, Expr::value(now))
            .filter(reservation::Column::Id.eq(r.id))
            .filter(reservation::Column::Status.eq(ReservationStatus::Confirmed))
            .exec(&txn)
            .await?;
        if ended.rows_affected == 1 {
            let why = format!(
                "stopped at the end of reservation {} ({})",
                r.name,
                r.ends_at.format("%Y-%m-%d %H:%M UTC")
            );
            stop_orders(&txn, r.id, &why, now).await?;
        }
        txn.commit().await?;
    }
    let done: Vec<Uuid> = world
        .maintenance
        .values()
        .filter(|m| m.ends_at <= now)
        .map(|m| m.id)
        .collect();
    if !done.is_empty() {
        maintenance_window::Entity::update_many()
            .col_expr(
                maintenance_window::Column::Status,
                Expr::value(ReservationStatus::Ended),
            )
            .col_expr(maintenance_window::Column::UpdatedAt, Expr::value(now))
            .filter(maintenance_window::Column::Id.is_in(done))
            .filter(maintenance_window::Column::Status.eq(ReservationStatus::Confirmed))
            .exec(db)
            .await?;
    }
    Ok(())
}
