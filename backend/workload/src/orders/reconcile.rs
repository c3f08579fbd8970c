//! The safety net under the order lifecycle: GPUs still held for orders
//! that have ended. Every state change is meant to stop an order's work as
//! it ends it; an allocation left active behind a final order means one
//! did not (a race, a crash between two writes of an older version), and
//! its GPUs would stay claimed for ever. Each one found is asked to stop,
//! so the driver frees it as it frees any other, and is logged and audited
//! so operators see that it happened.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::Query;
use sea_orm::{ColumnTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter};
use uuid::Uuid;

use super::lifecycle;
use gantry_core::audit::{self, Change};
use gantry_core::auth::principal::Actor;
use gantry_entities::{allocation, order};
use gantry_types::classes::{AllocationState, OrderStatus, StopCause};

/// Asks every active allocation of an ended order to stop; returns how
/// many GPUs such allocations held when found.
pub async fn reclaim(db: &DatabaseConnection, now: DateTime<Utc>) -> Result<i64, DbErr> {
    let ended = Query::select()
        .column(order::Column::Id)
        .from(order::Entity)
        .and_where(order::Column::Status.is_in(OrderStatus::FINAL))
        .to_owned();
    let leaked = allocation::Entity::find()
        .filter(allocation::Column::State.eq(AllocationState::Active))
        .filter(allocation::Column::OrderId.in_subquery(ended))
        .all(db)
        .await?;
    let found = leaked.iter().map(allocation::Model::gpu_count).sum();
    let mut by_order: BTreeMap<Uuid, Vec<allocation::Model>> = BTreeMap::new();
    for a in leaked {
        by_order.entry(a.order_id).or_default().push(a);
    }
    for (order_id, allocations) in by_order {
        let txn = gantry_core::db::write(db).await?;
        // Read again under the lock: only a final order's GPUs are taken.
        let Some(current) = lifecycle::lock(&txn, order_id).await? else {
            continue;
        };
        if !current.status.is_final() {
            continue;
        }
        let stopped = lifecycle::stop(&txn, order_id, now, StopCause::Reconciled).await?;
        if stopped == 0 {
            continue;
        }
        let nodes: Vec<Uuid> = allocations.iter().map(|a| a.node_id).collect();
        audit::record(
            &txn,
            Change {
                org_id: Some(current.org_id),
                action: "allocation.reclaim",
                target_type: "order",
                target_id: Some(order_id.to_string()),
                details: serde_json::json!({
                    "status": current.status,
                    "allocations": stopped,
                    "nodes": nodes,
                }),
                actor: &Actor::system(),
            },
        )
        .await?;
        txn.commit().await?;
        tracing::warn!(
            order = %order_id,
            status = current.status.as_str(),
            allocations = stopped,
            "an ended order still held GPUs; its allocations are stopped"
        );
    }
    Ok(found)
}
