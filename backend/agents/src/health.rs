//! Node health: an agent node whose heartbeats stop past the deadline
//! becomes unhealthy. Its work cannot be stopped gracefully, so its GPUs
//! are freed at once: `dev` instances (whose local state is gone) fail,
//! everything else is queued again. Each step is recorded as an event for
//! SLA reports.

use chrono::{DateTime, Duration, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, Condition, ConnectionTrait, DatabaseConnection, DbErr,
    EntityTrait, QueryFilter, QuerySelect, Set,
};
use uuid::Uuid;

use gantry_entities::{allocation, node, node_event, order};
use gantry_types::classes::{
    AllocationState, DriverKind, NodeState, OrderStatus, StopCause, WorkloadClass,
};
use gantry_workload::orders::lifecycle;

/// Records a node event.
pub async fn record(
    db: &impl ConnectionTrait,
    node_id: Uuid,
    kind: &str,
    order: Option<&order::Model>,
    details: serde_json::Value,
    at: DateTime<Utc>,
) -> Result<(), DbErr> {
    node_event::ActiveModel {
        id: Set(Uuid::now_v7()),
        node_id: Set(node_id),
        kind: Set(kind.to_owned()),
        order_id: Set(order.map(|o| o.id)),
        org_id: Set(order.map(|o| o.org_id)),
        details: Set(details.to_string()),
        at: Set(at),
    }
    .insert(db)
    .await?;
    Ok(())
}

/// Marks agent nodes silent for longer than `deadline` unhealthy and moves
/// their work on; returns how many nodes it marked.
pub async fn mark_silent(
    db: &DatabaseConnection,
    deadline: Duration,
    now: DateTime<Utc>,
) -> Result<usize, DbErr> {
    let cutoff = now - deadline;
    let silent = node::Entity::find()
        .filter(node::Column::Driver.eq(DriverKind::Agent))
        .filter(node::Column::State.ne(NodeState::Unhealthy))
        .filter(
            Condition::any()
                .add(node::Column::LastHeartbeatAt.lt(cutoff))
                .add(node::Column::LastHeartbeatAt.is_null()),
        )
        .all(db)
        .await?;
    for n in &silent {
        let txn = gantry_core::db::write(db).await?;
        let reason = match n.last_heartbeat_at {
            Some(at) => format!(
                "its agent stopped sending heartbeats after {}",
                at.format("%Y-%m-%d %H:%M:%S UTC")
            ),
            None => "its agent never sent a heartbeat".to_owned(),
        };
        let marked = node::Entity::update_many()
            .col_expr(node::Column::State, Expr::value(NodeState::Unhealthy))
            .col_expr(node::Column::StateReason, Expr::value(Some(reason)))
            .col_expr(node::Column::UpdatedAt, Expr::value(now))
            .filter(node::Column::Id.eq(n.id))
            .filter(node::Column::State.ne(NodeState::Unhealthy))
            .exec(&txn)
            .await?;
        if marked.rows_affected == 0 {
            continue;
        }
        let details = serde_json::json!({
            "node": n.name,
            "last_heartbeat_at": n.last_heartbeat_at,
            "reason": "heartbeats stopped",
        });
        record(&txn, n.id, "node_unhealthy", None, details.clone(), now).await?;
        // The work there has been down since the last sign of life: from
        // then on it is measured but not billed.
        allocation::Entity::update_many()
            .col_expr(
                allocation::Column::DownFrom,
                Expr::value(Some(n.last_heartbeat_at.unwrap_or(now))),
            )
            .filter(allocation::Column::NodeId.eq(n.id))
            .filter(allocation::Column::State.ne(AllocationState::Released))
            .exec(&txn)
            .await?;
        let hit: Vec<Uuid> = allocation::Entity::find()
            .filter(allocation::Column::NodeId.eq(n.id))
            .filter(allocation::Column::State.ne(AllocationState::Released))
            .all(&txn)
            .await?
            .into_iter()
            .map(|a| a.order_id)
            .collect();
        for o in order::Entity::find()
            .filter(order::Column::Id.is_in(hit))
            .lock_exclusive()
            .all(&txn)
            .await?
        {
            let alive = matches!(
                o.status,
                OrderStatus::Scheduled | OrderStatus::Provisioning | OrderStatus::Running
            );
            if alive {
                let lost = o.workload_class == WorkloadClass::Dev;
                let mut row: order::ActiveModel = o.clone().into();
                row.status = Set(if lost {
                    OrderStatus::Failed
                } else {
                    OrderStatus::Preempted
                });
                if lost {
                    row.failure_reason =
                        Set(Some(format!("its node {} stopped answering", n.name)));
                } else {
                    row.pending_reason = Set(Some(format!(
                        "its node {} stopped answering; queued again",
                        n.name
                    )));
                }
                row.updated_at = Set(now);
                row.update(&txn).await?;
            }
            record(
                &txn,
                n.id,
                "allocation_lost",
                Some(&o),
                details.clone(),
                now,
            )
            .await?;
            lifecycle::stop(&txn, o.id, now, StopCause::NodeLost).await?;
            lifecycle::stopped(&txn, o.id, Some(n.id), now).await?;
        }
        txn.commit().await?;
        tracing::warn!(node = %n.name, "node stopped sending heartbeats; marked unhealthy");
    }
    Ok(silent.len())
}
