//! Writes one cycle's decisions in one transaction. Every change is
//! conditional on the state the cycle read, so an order cancelled while the
//! engine ran is left alone, and the GPU claims' primary key refuses a GPU
//! held twice whatever happened in between.

use chrono::{DateTime, TimeZone, Utc};
use gantry_scheduler as engine;
use sea_orm::sea_query::Expr;
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
    loaded: &Loaded,
    decisions: &engine::Decisions,
    now: DateTime<Utc>,
) -> Result<Applied, DbErr> {
    let txn = crate::db::write(db).await?;
    let mut applied = Applied::default();
    for start in &decisions.starts {
        if self::start(&txn, loaded, start, now).await? {
            applied.started += 1;
        }
    }
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
    for waiting in &decisions.waiting {
        if record_wait(&txn, loaded, waiting, now).await? {
            applied.waiting += 1;
        }
    }
    for held in &loaded.held {
        let waiting = engine::Waiting {
            workload: held.order_id.to_string(),
            reasons: Vec::new(),
            estimated_start: None,
            estimate_rests_on: Vec::new(),
        };
        if record_reason(&txn, loaded, &waiting, Some(held.reason.clone()), now).await? {
            applied.waiting += 1;
        }
    }
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

async fn start(
    txn: &impl ConnectionTrait,
    loaded: &Loaded,
    start: &engine::Start,
    now: DateTime<Utc>,
) -> Result<bool, DbErr> {
    let Some(id) = order_id(&start.workload) else {
        return Ok(false);
    };
    let Some(current) = loaded.orders.get(&id) else {
        return Ok(false);
    };
    let changed = order::Entity::update_many()
        .col_expr(order::Column::Status, Expr::value(OrderStatus::Scheduled))
        .col_expr(order::Column::Attempts, Expr::value(current.attempts + 1))
        .col_expr(
            order::Column::PendingReason,
            Expr::value(Option::<String>::None),
        )
        .col_expr(
            order::Column::EstimatedStart,
            Expr::value(Option::<DateTime<Utc>>::None),
        )
        .col_expr(order::Column::UpdatedAt, Expr::value(now))
        .filter(order::Column::Id.eq(id))
        .filter(order::Column::Status.eq(OrderStatus::Queued))
        .exec(txn)
        .await?;
    if changed.rows_affected != 1 {
        return Ok(false);
    }
    for placement in &start.placements {
        let Some((node_id, gpu_ids)) = loaded.nodes.get(&placement.node) else {
            return Err(DbErr::Custom(format!(
                "the engine placed order {id} on unknown node {}",
                placement.node
            )));
        };
        let allocation_id = Uuid::now_v7();
        sea_orm::ActiveModelTrait::insert(
            allocation::ActiveModel {
                id: Set(allocation_id),
                order_id: Set(id),
                org_id: Set(current.org_id),
                node_id: Set(*node_id),
                gpu_indices: Set(serde_json::to_string(&placement.gpus).unwrap_or_default()),
                state: Set(AllocationState::Active),
                stop_at: Set(None),
                created_at: Set(now),
                released_at: Set(None),
                running_since: Set(None),
                down_from: Set(None),
                metered_until: Set(None),
                attempt: Set(current.attempts + 1),
                exit_code: Set(None),
                outcome: Set(None),
            },
            txn,
        )
        .await?;
        let claims: Vec<gpu_claim::ActiveModel> = placement
            .gpus
            .iter()
            .filter_map(|index| gpu_ids.get(index))
            .map(|gpu_id| gpu_claim::ActiveModel {
                gpu_id: Set(*gpu_id),
                allocation_id: Set(allocation_id),
                order_id: Set(id),
            })
            .collect();
        if claims.len() != placement.gpus.len() {
            return Err(DbErr::Custom(format!(
                "the engine placed order {id} on GPUs {:?} that node {} does not have",
                placement.gpus, placement.node
            )));
        }
        if !claims.is_empty() {
            gpu_claim::Entity::insert_many(claims).exec(txn).await?;
        }
    }
    Ok(true)
}

/// Stores why an order waits and when it may start, when that changed.
async fn record_wait(
    txn: &impl ConnectionTrait,
    loaded: &Loaded,
    waiting: &engine::Waiting,
    now: DateTime<Utc>,
) -> Result<bool, DbErr> {
    let reason = waiting
        .reasons
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    record_reason(
        txn,
        loaded,
        waiting,
        (!reason.is_empty()).then_some(reason),
        now,
    )
    .await
}

async fn record_reason(
    txn: &impl ConnectionTrait,
    loaded: &Loaded,
    waiting: &engine::Waiting,
    reason: Option<String>,
    now: DateTime<Utc>,
) -> Result<bool, DbErr> {
    let Some(id) = order_id(&waiting.workload) else {
        return Ok(false);
    };
    let Some(current) = loaded.orders.get(&id) else {
        return Ok(false);
    };
    let estimate = waiting.estimated_start.map(at);
    // Estimates drift a little every cycle; rewriting every waiting order
    // for that would cost a write per order per cycle.
    let estimate_moved = match (current.estimated_start, estimate) {
        (Some(before), Some(after)) => {
            (after - before).num_seconds().abs() >= ESTIMATE_SLACK_SECONDS
        }
        (before, after) => before != after,
    };
    if current.pending_reason == reason && !estimate_moved {
        return Ok(false);
    }
    let changed = order::Entity::update_many()
        .col_expr(order::Column::PendingReason, Expr::value(reason))
        .col_expr(order::Column::EstimatedStart, Expr::value(estimate))
        .col_expr(order::Column::UpdatedAt, Expr::value(now))
        .filter(order::Column::Id.eq(id))
        .filter(order::Column::Status.eq(OrderStatus::Queued))
        .exec(txn)
        .await?;
    Ok(changed.rows_affected == 1)
}
