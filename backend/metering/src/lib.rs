//! Metering: running allocations become usage records, GPU-seconds by
//! organization, project, order, GPU model, instance type, region and
//! pricing class.
//!
//! The scheduling leader meters right after it has marked silent nodes, and
//! only up to `now − heartbeat deadline`: any node fault inside a metered
//! span is known by then, so time after a fault is excluded when the span is
//! written and never billed first and refunded later. Spans are cut on a
//! fixed grid from where the last one ended, and a record's natural key is
//! (allocation, span start): metering again after a crash or by a second
//! process writes nothing twice and skips nothing.

pub mod corrections;
pub mod spans;
pub mod stored;
pub mod usage;

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, ExprTrait, OnConflict, Query};
use sea_orm::{
    ColumnTrait, Condition, DatabaseConnection, DbErr, EntityTrait, QueryFilter, QuerySelect, Set,
};
use uuid::Uuid;

use gantry_entities::{allocation, node, order, usage_record};
use gantry_types::classes::{AllocationState, PricingClass, UsageKind};

/// Rows per INSERT, within every engine's limit on bound parameters.
const BATCH: usize = 1_000;

/// What one metering pass wrote.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Metered {
    pub allocations: usize,
    pub records: usize,
}

/// Meters every running allocation up to `settled` (time before which
/// faults are known) and every released one to its end.
pub async fn meter(
    db: &DatabaseConnection,
    settled: DateTime<Utc>,
    interval_seconds: i64,
) -> Result<Metered, DbErr> {
    // Running, or released and not yet metered to the end.
    let unfinished = || {
        Condition::all()
            .add(allocation::Column::RunningSince.is_not_null())
            .add(
                Condition::any()
                    .add(allocation::Column::State.ne(AllocationState::Released))
                    .add(allocation::Column::MeteredUntil.is_null())
                    .add(
                        Expr::col(allocation::Column::MeteredUntil)
                            .lt(Expr::col(allocation::Column::ReleasedAt)),
                    ),
            )
    };
    let open = allocation::Entity::find()
        .filter(unfinished())
        .all(db)
        .await?;
    if open.is_empty() {
        return Ok(Metered::default());
    }
    let regions: HashMap<Uuid, Uuid> = node::Entity::find()
        .select_only()
        .columns([node::Column::Id, node::Column::RegionId])
        .into_tuple::<(Uuid, Uuid)>()
        .all(db)
        .await?
        .into_iter()
        .collect();
    // What each record copies from its order; only those columns are read,
    // of the orders found by a subquery rather than by thousands of ids.
    let rows: Vec<(Uuid, Option<Uuid>, Uuid, Uuid, PricingClass)> = order::Entity::find()
        .filter(
            order::Column::Id.in_subquery(
                Query::select()
                    .column(allocation::Column::OrderId)
                    .from(allocation::Entity)
                    .cond_where(unfinished())
                    .to_owned(),
            ),
        )
        .select_only()
        .columns([
            order::Column::Id,
            order::Column::ProjectId,
            order::Column::GpuModelId,
            order::Column::InstanceTypeId,
            order::Column::PricingClass,
        ])
        .into_tuple()
        .all(db)
        .await?;
    let orders: HashMap<Uuid, (Option<Uuid>, Uuid, Uuid, PricingClass)> = rows
        .into_iter()
        .map(|(id, project, model, shape, class)| (id, (project, model, shape, class)))
        .collect();

    let now = Utc::now();
    let mut records = Vec::new();
    // Running allocations all advance to the same grid point; released ones
    // to their own ends.
    let grid = settled.timestamp().div_euclid(interval_seconds) * interval_seconds;
    let mut running = 0;
    let mut skipped = false;
    let mut closed: HashMap<i64, Vec<Uuid>> = HashMap::new();
    for a in &open {
        let (
            Some(running_since),
            Some(&(project_id, gpu_model_id, instance_type_id, pricing_class)),
            Some(&region_id),
        ) = (
            a.running_since,
            orders.get(&a.order_id),
            regions.get(&a.node_id),
        )
        else {
            skipped = true;
            continue;
        };
        let from = a.metered_until.unwrap_or(running_since).timestamp();
        let (until, closing) = match a.released_at {
            Some(released) if a.state == AllocationState::Released => (released.timestamp(), true),
            _ => (settled.timestamp(), false),
        };
        let gpus = i32::try_from(a.gpu_count()).unwrap_or(i32::MAX);
        let cut = spans::spans(
            from,
            until,
            interval_seconds,
            a.down_from.map(|d| d.timestamp()),
            closing,
        );
        let Some(last) = cut
            .last()
            .map(|s| s.end)
            .or(closing.then_some(Ord::max(from, until)))
        else {
            continue;
        };
        for span in cut {
            let (Some(start), Some(end)) = (
                DateTime::from_timestamp(span.start, 0),
                DateTime::from_timestamp(span.end, 0),
            ) else {
                continue;
            };
            records.push(usage_record::ActiveModel {
                id: Set(Uuid::now_v7()),
                org_id: Set(a.org_id),
                project_id: Set(project_id),
                order_id: Set(a.order_id),
                allocation_id: Set(a.id),
                node_id: Set(a.node_id),
                region_id: Set(region_id),
                gpu_model_id: Set(gpu_model_id),
                instance_type_id: Set(instance_type_id),
                pricing_class: Set(pricing_class),
                usage_day: Set(start.format("%Y-%m-%d").to_string()),
                period_start: Set(start),
                period_end: Set(end),
                gpus: Set(gpus),
                gpu_milli: Set(a.gpu_milli),
                seconds: Set(span.end - span.start),
                excluded_seconds: Set(span.excluded),
                kind: Set(UsageKind::Metered),
                seq: Set(0),
                reason: Set(None),
                author: Set(None),
                created_at: Set(now),
            });
        }
        if closing {
            closed.entry(last).or_default().push(a.id);
        } else {
            running += 1;
        }
    }

    let txn = gantry_core::db::write(db).await?;
    let mut written = 0;
    let mut pending = records.into_iter().peekable();
    while pending.peek().is_some() {
        let batch: Vec<_> = pending.by_ref().take(BATCH).collect();
        written += batch.len();
        usage_record::Entity::insert_many(batch)
            .on_conflict(
                OnConflict::columns([
                    usage_record::Column::AllocationId,
                    usage_record::Column::PeriodStart,
                    usage_record::Column::Seq,
                ])
                .do_nothing()
                .to_owned(),
            )
            .exec_without_returning(&txn)
            .await?;
    }
    // One statement for every running allocation: those read above, as any
    // that came up since started after `grid`. (Foreign keys make a skipped
    // one impossible; should one be, nothing is advanced past it.)
    if running > 0
        && !skipped
        && let Some(until) = DateTime::from_timestamp(grid, 0)
    {
        allocation::Entity::update_many()
            .col_expr(allocation::Column::MeteredUntil, Expr::value(Some(until)))
            .filter(allocation::Column::State.ne(AllocationState::Released))
            .filter(allocation::Column::RunningSince.lt(until))
            .filter(
                Condition::any()
                    .add(allocation::Column::MeteredUntil.is_null())
                    .add(allocation::Column::MeteredUntil.lt(until)),
            )
            .exec(&txn)
            .await?;
    }
    let mut allocations = running;
    for (until, ids) in closed {
        let Some(until) = DateTime::from_timestamp(until, 0) else {
            continue;
        };
        for chunk in ids.chunks(BATCH) {
            allocations += chunk.len();
            allocation::Entity::update_many()
                .col_expr(allocation::Column::MeteredUntil, Expr::value(Some(until)))
                .filter(allocation::Column::Id.is_in(chunk.iter().copied()))
                .exec(&txn)
                .await?;
        }
    }
    txn.commit().await?;
    Ok(Metered {
        allocations,
        records: written,
    })
}
