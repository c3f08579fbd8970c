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
use gantry_core::catalog::shares::{GpuShape, slices_of};
use gantry_entities::{allocation, gpu_claim, gpu_share, order};
use gantry_types::classes::{AllocationState, EstimateConfidence, OrderStatus, StopCause};
use gantry_types::reasons::{self, WaitReason};
use gantry_workload::orders::lifecycle;

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
    let txn = gantry_core::db::write(db).await?;
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
                Expr::value(Some(match preemption.cause {
                    engine::PreemptionCause::Defragmentation => {
                        format!("moved to make room for {}", preemption.by)
                    }
                    _ => format!("preempted by {}", preemption.by),
                })),
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
            let cause = match preemption.cause {
                engine::PreemptionCause::Defragmentation => StopCause::Moved,
                _ => StopCause::Preempted,
            };
            lifecycle::stop(&txn, id, at(preemption.stop_at), cause).await?;
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
            let id = order_id(&waiting.workload)?;
            let current = orders.get(&id)?;
            let confidence = waiting.estimate_confidence.map(EstimateConfidence::from);
            let kind_changed = confidence != current.estimate_confidence
                || match (current.pending_reason.as_deref(), waiting.reasons.first()) {
                    (Some(shown), Some(first)) => !shown.starts_with(first.prefix()),
                    (shown, first) => shown.is_some() != first.is_some(),
                };
            // Formatting every waiting order's reasons each cycle costs more
            // than deciding: only reasons that may be written are.
            changed_reason(
                current,
                kind_changed,
                waiting.estimated_start.map(at).zip(confidence),
                now,
                || {
                    let text = waiting
                        .reasons
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("; ");
                    let details: Vec<WaitReason> =
                        waiting.reasons.iter().map(WaitReason::from).collect();
                    (
                        (!text.is_empty()).then_some(text),
                        reasons::stored(&details),
                    )
                },
            )
        })
        .collect();
    reasons.extend(loaded.held.iter().filter_map(|held| {
        let current = orders.get(&held.order_id)?;
        let kind_changed = current.pending_reason.as_ref() != Some(&held.reason);
        changed_reason(current, kind_changed, None, now, || {
            (
                Some(held.reason.clone()),
                reasons::stored(std::slice::from_ref(&held.details)),
            )
        })
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
/// their allocations, one their claims on whole GPUs and one their shares
/// of shared GPUs (a MIG start takes one of its GPU's free instances).
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
    let mut mig_free = loaded.mig_free.clone();
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
                order::Column::PendingDetails,
                Expr::value(Option::<String>::None),
            )
            .col_expr(
                order::Column::EstimatedStart,
                Expr::value(Option::<DateTime<Utc>>::None),
            )
            .col_expr(
                order::Column::EstimateConfidence,
                Expr::value(Option::<EstimateConfidence>::None),
            )
            .col_expr(order::Column::UpdatedAt, Expr::value(now))
            .filter(order::Column::Id.is_in(chunk.iter().copied()))
            .filter(order::Column::Status.eq(OrderStatus::Queued))
            .exec_with_returning(txn)
            .await?;
        let mut allocations = Vec::new();
        let mut claims = Vec::new();
        let mut shares = Vec::new();
        for o in &moved {
            let Some(start) = placed.get(&o.id) else {
                continue;
            };
            let shape = GpuShape::of_order(o);
            for placement in &start.placements {
                let Some((node_id, gpu_ids)) = loaded.nodes.get(&placement.node) else {
                    return Err(DbErr::Custom(format!(
                        "the engine placed order {} on unknown node {}",
                        o.id, placement.node
                    )));
                };
                let allocation_id = Uuid::now_v7();
                let mut mig_device = None;
                for index in &placement.gpus {
                    let Some(gpu_id) = gpu_ids.get(index) else {
                        return Err(DbErr::Custom(format!(
                            "the engine placed order {} on GPU {index} that node {} does not have",
                            o.id, placement.node
                        )));
                    };
                    match shape {
                        GpuShape::Whole(_) => claims.push(gpu_claim::ActiveModel {
                            gpu_id: Set(*gpu_id),
                            allocation_id: Set(allocation_id),
                            order_id: Set(o.id),
                        }),
                        GpuShape::Fraction(milli) => shares.push(gpu_share::ActiveModel {
                            gpu_id: Set(*gpu_id),
                            allocation_id: Set(allocation_id),
                            order_id: Set(o.id),
                            units: Set(milli),
                            mig_device: Set(None),
                        }),
                        GpuShape::Mig(profile) => {
                            let Some(device) = mig_free.get_mut(gpu_id).and_then(Vec::pop) else {
                                return Err(DbErr::Custom(format!(
                                    "the engine placed order {} on GPU {index} of node {} \
                                     without a free MIG instance",
                                    o.id, placement.node
                                )));
                            };
                            shares.push(gpu_share::ActiveModel {
                                gpu_id: Set(*gpu_id),
                                allocation_id: Set(allocation_id),
                                order_id: Set(o.id),
                                units: Set(slices_of(profile).map_or(0, i32::from)),
                                mig_device: Set(Some(device.clone())),
                            });
                            mig_device = Some(device);
                        }
                    }
                }
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
                    gpu_milli: Set(shape.milli()),
                    mig_device: Set(mig_device),
                    private_address: Set(None),
                    private_network_id: Set(None),
                    stop_cause: Set(None),
                });
            }
        }
        started += moved.len();
        gantry_core::db::insert_batched(txn, allocations).await?;
        gantry_core::db::insert_batched(txn, claims).await?;
        gantry_core::db::insert_batched(txn, shares).await?;
    }
    Ok(started)
}

/// Why an order waits and when it may start, to be written.
struct Reason {
    order: Uuid,
    reason: Option<String>,
    /// The reasons as data (`orders::reasons`), stored JSON.
    details: Option<String>,
    estimate: Option<DateTime<Utc>>,
    confidence: Option<EstimateConfidence>,
}

/// How often the figures in a waiting order's reason (GPUs free, orders
/// ahead, when a node frees) are brought up to date while the kind of
/// reason stays the same.
const REASON_REFRESH_SECONDS: i64 = 5;

/// The reason and estimate to write for a waiting order, when they are to
/// be written over what it shows; `reason` makes the text and the stored
/// details only then.
fn changed_reason(
    current: &order::Model,
    kind_changed: bool,
    estimate: Option<(DateTime<Utc>, EstimateConfidence)>,
    now: DateTime<Utc>,
    reason: impl FnOnce() -> (Option<String>, Option<String>),
) -> Option<Reason> {
    let (estimate, confidence) = estimate.unzip();
    // Reasons written before they were kept as data get their data now.
    let undetailed = current.pending_reason.is_some() && current.pending_details.is_none();
    let due = due(
        current.estimated_start,
        current.updated_at,
        kind_changed || undetailed,
        estimate,
        now,
    );
    if due == Due::No {
        return None;
    }
    let (reason, details) = reason();
    let shown = current.pending_reason.as_deref();
    if due == Due::IfMoved && !moved(shown, current.estimated_start, reason.as_deref(), estimate) {
        return None;
    }
    Some(Reason {
        order: current.id,
        reason,
        details,
        estimate,
        confidence,
    })
}

/// Whether a waiting order's reason is to be written.
#[derive(Debug, PartialEq, Eq)]
enum Due {
    /// Yes: a new kind of reason, or an estimate that appears or goes.
    Now,
    /// If its figures moved: the last write is old enough.
    IfMoved,
    /// No: the same kind of reason was written a moment ago. While a
    /// queue drains, every waiting order's figures move every cycle, and
    /// writing them all each time costs more than the cycle's decisions.
    No,
}

fn due(
    shown_estimate: Option<DateTime<Utc>>,
    written_at: DateTime<Utc>,
    kind_changed: bool,
    estimate: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Due {
    if kind_changed || shown_estimate.is_some() != estimate.is_some() {
        Due::Now
    } else if (now - written_at).num_seconds() >= REASON_REFRESH_SECONDS {
        Due::IfMoved
    } else {
        Due::No
    }
}

/// Whether the text or the estimate moved enough to be worth a write: an
/// estimate drifts a little every cycle.
fn moved(
    shown_reason: Option<&str>,
    shown_estimate: Option<DateTime<Utc>>,
    reason: Option<&str>,
    estimate: Option<DateTime<Utc>>,
) -> bool {
    let estimate_moved = match (shown_estimate, estimate) {
        (Some(before), Some(after)) => {
            (after - before).num_seconds().abs() >= ESTIMATE_SLACK_SECONDS
        }
        (before, after) => before != after,
    };
    shown_reason != reason || estimate_moved
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
        let mut details = CaseStatement::new();
        let mut estimate = CaseStatement::new();
        let mut confidence = CaseStatement::new();
        for r in chunk {
            reason = reason.case(order::Column::Id.eq(r.order), Expr::value(r.reason.clone()));
            details = details.case(
                order::Column::Id.eq(r.order),
                Expr::value(r.details.clone()),
            );
            estimate = estimate.case(order::Column::Id.eq(r.order), Expr::value(r.estimate));
            confidence = confidence.case(
                order::Column::Id.eq(r.order),
                Expr::value(r.confidence.map(EstimateConfidence::as_str)),
            );
        }
        let changed = order::Entity::update_many()
            .col_expr(order::Column::PendingReason, reason.into())
            .col_expr(order::Column::PendingDetails, details.into())
            .col_expr(order::Column::EstimatedStart, estimate.into())
            .col_expr(order::Column::EstimateConfidence, confidence.into())
            .col_expr(order::Column::UpdatedAt, Expr::value(now))
            .filter(order::Column::Id.is_in(chunk.iter().map(|r| r.order)))
            .filter(order::Column::Status.eq(OrderStatus::Queued))
            .exec(txn)
            .await?;
        written += usize::try_from(changed.rows_affected).unwrap_or(0);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use chrono::TimeDelta;

    use super::*;

    #[test]
    fn a_new_kind_of_reason_is_written_at_once_and_moving_figures_every_few_seconds() {
        let written = at(1_800_000_000);
        let soon = written + TimeDelta::seconds(1);
        let later = written + TimeDelta::seconds(REASON_REFRESH_SECONDS);
        let estimate = Some(at(1_800_000_100));
        // A new kind, an estimate that appears or goes: at once.
        assert_eq!(due(estimate, written, true, estimate, soon), Due::Now);
        assert_eq!(due(None, written, false, estimate, soon), Due::Now);
        assert_eq!(due(estimate, written, false, None, soon), Due::Now);
        // The same kind: only once the last write is old.
        assert_eq!(due(estimate, written, false, estimate, soon), Due::No);
        assert_eq!(due(estimate, written, false, estimate, later), Due::IfMoved);
    }

    #[test]
    fn figures_move_when_the_text_changes_or_the_estimate_leaves_its_slack() {
        let estimate = Some(at(1_800_000_100));
        let capacity = Some("capacity: 3 H100 free, 8 needed");
        let fewer = Some("capacity: 2 H100 free, 8 needed");
        assert!(moved(capacity, estimate, fewer, estimate));
        assert!(!moved(capacity, estimate, capacity, estimate));
        assert!(!moved(
            capacity,
            estimate,
            capacity,
            Some(at(1_800_000_105))
        ));
        assert!(moved(capacity, estimate, capacity, Some(at(1_800_000_160))));
    }
}
