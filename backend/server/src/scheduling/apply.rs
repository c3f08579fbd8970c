//! Writes one cycle's decisions in one transaction, in batched statements:
//! starts, their allocations and GPU claims, and waiting reasons take one
//! statement each per batch of orders, not one per order. Every change is
//! conditional on the state the cycle read, so an order cancelled while the
//! engine ran is left alone, and the GPU claims' primary key refuses a GPU
//! held twice whatever happened in between.

use std::collections::HashMap;

use chrono::{DateTime, TimeZone, Utc};
use gantry_scheduler as engine;
use sea_orm::sea_query::{CaseStatement, Expr, ExprTrait};
use sea_orm::{ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, Set};
use uuid::Uuid;

use super::load::Loaded;
use crate::classes::{AllocationState, OrderStatus};
use crate::entities::{allocation, gpu_claim, order};
use crate::orders::lifecycle;

/// What a cycle changed.
#[derive(Debug, Default, Clone, Copy)]
pub struct Applied {
    pub started: usize,
    pub preempted: usize,
    pub rejected: usize,
    pub waiting: usize,
}

pub async fn apply(
    db: &sea_orm::DatabaseConnection,
    orders: &HashMap<Uuid, order::Model>,
    loaded: &Loaded,
    decisions: &engine::Decisions,
    now: DateTime<Utc>,
) -> Result<Applied, DbErr> {
    let txn = crate::db::write(db).await?;
    let mut applied = Applied {
        started: start(&txn, orders, loaded, &decisions.starts, now).await?,
        ..Applied::default()
    };
    for preemption in &decisions.preemptions {
        let Some(id) = order_id(&preemption.workload) else {
            continue;
        };
        let changed = order::Entity::update_many()
            .col_expr(order::Column::Status, Expr::value(OrderStatus::Preempted))
            .col_expr(
                order::Column::PendingReason,
                Expr::value(Some(format!("preempted by {}", preemption.by))),
            )
            .col_expr(order::Column::UpdatedAt, Expr::value(now))
            .filter(order::Column::Id.eq(id))
            .filter(order::Column::Status.is_in([
                OrderStatus::Scheduled,
                OrderStatus::Provisioning,
                OrderStatus::Running,
            ]))
            .exec(&txn)
            .await?;
        if changed.rows_affected == 1 {
            lifecycle::stop(&txn, id, at(preemption.stop_at)).await?;
            applied.preempted += 1;
        }
    }
    for rejection in &decisions.rejections {
        let Some(id) = order_id(&rejection.workload) else {
            continue;
        };
        let changed = order::Entity::update_many()
            .col_expr(order::Column::Status, Expr::value(OrderStatus::Failed))
            .col_expr(
                order::Column::FailureReason,
                Expr::value(Some(rejection.reason.to_string())),
            )
            .col_expr(
                order::Column::PendingReason,
                Expr::value(Option::<String>::None),
            )
            .col_expr(order::Column::EndedAt, Expr::value(Some(now)))
            .col_expr(order::Column::UpdatedAt, Expr::value(now))
            .filter(order::Column::Id.eq(id))
            .filter(order::Column::Status.eq(OrderStatus::Queued))
            .exec(&txn)
            .await?;
        applied.rejected += usize::try_from(changed.rows_affected).unwrap_or(0);
    }
    let mut reasons: Vec<Reason> = decisions
        .waiting
        .iter()
        .filter_map(|waiting| {
            let reason = waiting
                .reasons
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ");
            changed_reason(
                orders,
                &waiting.workload,
                (!reason.is_empty()).then_some(reason),
                waiting.estimated_start.map(at),
            )
        })
        .collect();
    reasons.extend(loaded.held.iter().filter_map(|held| {
        changed_reason(
            orders,
            &held.order_id.to_string(),
            Some(held.reason.clone()),
            None,
        )
    }));
    applied.waiting = record_reasons(&txn, &reasons, now).await?;
    txn.commit().await?;
    Ok(applied)
}

/// How far an estimated start may move before it is written again.
const ESTIMATE_SLACK_SECONDS: i64 = 10;

fn order_id(workload: &str) -> Option<Uuid> {
    Uuid::try_parse(workload).ok()
}

fn at(seconds: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(seconds, 0)
        .single()
        .unwrap_or_else(Utc::now)
}

/// Most rows one batched statement writes; keeps every statement well
/// inside both engines' limits on bound parameters.
const BATCH: usize = 500;

/// Starts every placed order still queued: one UPDATE per batch moves them
/// to `scheduled` and returns the ones it moved, one INSERT per batch adds
/// their allocations and one their GPU claims.
async fn start(
    txn: &impl ConnectionTrait,
    orders: &HashMap<Uuid, order::Model>,
    loaded: &Loaded,
    starts: &[engine::Start],
    now: DateTime<Utc>,
) -> Result<usize, DbErr> {
    let placed: HashMap<Uuid, &engine::Start> = starts
        .iter()
        .filter_map(|s| order_id(&s.workload).map(|id| (id, s)))
        .filter(|(id, _)| orders.contains_key(id))
        .collect();
    let ids: Vec<Uuid> = placed.keys().copied().collect();
    let mut started = 0;
    for chunk in ids.chunks(BATCH) {
        let moved = order::Entity::update_many()
            .col_expr(order::Column::Status, Expr::value(OrderStatus::Scheduled))
            .col_expr(
                order::Column::Attempts,
                Expr::col(order::Column::Attempts).add(1),
            )
            .col_expr(
                order::Column::PendingReason,
                Expr::value(Option::<String>::None),
            )
            .col_expr(
                order::Column::EstimatedStart,
                Expr::value(Option::<DateTime<Utc>>::None),
            )
            .col_expr(order::Column::UpdatedAt, Expr::value(now))
            .filter(order::Column::Id.is_in(chunk.iter().copied()))
            .filter(order::Column::Status.eq(OrderStatus::Queued))
            .exec_with_returning(txn)
            .await?;
        let mut allocations = Vec::new();
        let mut claims = Vec::new();
        for o in &moved {
            let Some(start) = placed.get(&o.id) else {
                continue;
            };
            for placement in &start.placements {
                let Some((node_id, gpu_ids)) = loaded.nodes.get(&placement.node) else {
                    return Err(DbErr::Custom(format!(
                        "the engine placed order {} on unknown node {}",
                        o.id, placement.node
                    )));
                };
                let allocation_id = Uuid::now_v7();
                allocations.push(allocation::ActiveModel {
                    id: Set(allocation_id),
                    order_id: Set(o.id),
                    org_id: Set(o.org_id),
                    node_id: Set(*node_id),
                    gpu_indices: Set(serde_json::to_string(&placement.gpus).unwrap_or_default()),
                    state: Set(AllocationState::Active),
                    stop_at: Set(None),
                    created_at: Set(now),
                    released_at: Set(None),
                    running_since: Set(None),
                    down_from: Set(None),
                    metered_until: Set(None),
                    attempt: Set(o.attempts),
                    exit_code: Set(None),
                    outcome: Set(None),
                });
                for index in &placement.gpus {
                    let Some(gpu_id) = gpu_ids.get(index) else {
                        return Err(DbErr::Custom(format!(
                            "the engine placed order {} on GPU {index} that node {} does not have",
                            o.id, placement.node
                        )));
                    };
                    claims.push(gpu_claim::ActiveModel {
                        gpu_id: Set(*gpu_id),
                        allocation_id: Set(allocation_id),
                        order_id: Set(o.id),
                    });
                }
            }
        }
        started += moved.len();
        crate::db::insert_batched(txn, allocations).await?;
        crate::db::insert_batched(txn, claims).await?;
    }
    Ok(started)
}

/// Why an order waits and when it may start, to be written.
struct Reason {
    order: Uuid,
    reason: Option<String>,
    estimate: Option<DateTime<Utc>>,
}

/// The reason and estimate to write for a waiting order, when they changed
/// from what the order holds.
fn changed_reason(
    orders: &HashMap<Uuid, order::Model>,
    workload: &str,
    reason: Option<String>,
    estimate: Option<DateTime<Utc>>,
) -> Option<Reason> {
    let id = order_id(workload)?;
    let current = orders.get(&id)?;
    // Estimates drift a little every cycle; rewriting every waiting order
    // for that would cost a write per order per cycle.
    let estimate_moved = match (current.estimated_start, estimate) {
        (Some(before), Some(after)) => {
            (after - before).num_seconds().abs() >= ESTIMATE_SLACK_SECONDS
        }
        (before, after) => before != after,
    };
    (current.pending_reason != reason || estimate_moved).then_some(Reason {
        order: id,
        reason,
        estimate,
    })
}

/// Writes reasons and estimates of still-queued orders, one UPDATE per
/// batch that picks each order's values by its id.
async fn record_reasons(
    txn: &impl ConnectionTrait,
    reasons: &[Reason],
    now: DateTime<Utc>,
) -> Result<usize, DbErr> {
    let mut written = 0;
    for chunk in reasons.chunks(BATCH) {
        let mut reason = CaseStatement::new();
        let mut estimate = CaseStatement::new();
        for r in chunk {
            reason = reason.case(order::Column::Id.eq(r.order), Expr::value(r.reason.clone()));
            estimate = estimate.case(order::Column::Id.eq(r.order), Expr::value(r.estimate));
        }
        let changed = order::Entity::update_many()
            .col_expr(order::Column::PendingReason, reason.into())
            .col_expr(order::Column::EstimatedStart, estimate.into())
            .col_expr(order::Column::UpdatedAt, Expr::value(now))
            .filter(order::Column::Id.is_in(chunk.iter().map(|r| r.order)))
            .filter(order::Column::Status.eq(OrderStatus::Queued))
            .exec(txn)
            .await?;
        written += usize::try_from(changed.rows_affected).unwrap_or(0);
    }
    Ok(written)
}
