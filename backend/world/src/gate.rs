//! Which queued jobs may be placed: a job with dependencies waits until
//! each has ended (`after_any`) or completed (`after_ok`); one whose
//! `after_ok` dependency ended any other way can never run and fails, and
//! its own dependents fail in turn on later cycles.

use std::collections::HashMap;

use gantry_entities::{order, order_dependency};
use gantry_types::classes::OrderStatus;
use gantry_types::job_spec::Condition;
use gantry_types::reasons::{DependencyEnd, OrderRef, WaitReason};
use sea_orm::sea_query::Query;
use sea_orm::{ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QuerySelect};
use uuid::Uuid;

use crate::scoped::Held;

/// Queued jobs held back this cycle, each with why.
#[derive(Debug, Default, Clone)]
pub struct Gate {
    /// Waiting for dependencies still running or queued.
    pub blocked: HashMap<Uuid, Held>,
    /// A dependency that had to succeed did not: these fail.
    pub broken: HashMap<Uuid, String>,
}

pub async fn gate(db: &impl ConnectionTrait) -> Result<Gate, DbErr> {
    let queued = Query::select()
        .column(order::Column::Id)
        .from(order::Entity)
        .and_where(order::Column::Status.eq(OrderStatus::Queued))
        .to_owned();
    let edges = order_dependency::Entity::find()
        .filter(order_dependency::Column::OrderId.in_subquery(queued))
        .all(db)
        .await?;
    let mut gate = Gate::default();
    if edges.is_empty() {
        return Ok(gate);
    }
    let statuses: HashMap<Uuid, OrderStatus> = order::Entity::find()
        .select_only()
        .column(order::Column::Id)
        .column(order::Column::Status)
        .filter(order::Column::Id.is_in(edges.iter().map(|e| e.depends_on)))
        .into_tuple::<(Uuid, OrderStatus)>()
        .all(db)
        .await?
        .into_iter()
        .collect();
    for edge in edges {
        let Some(&status) = statuses.get(&edge.depends_on) else {
            continue;
        };
        let condition = Condition::parse(&edge.condition);
        if status.is_final() {
            if condition == Condition::AfterOk && status != OrderStatus::Completed {
                gate.broken.entry(edge.order_id).or_insert_with(|| {
                    format!(
                        "dependency {} ended {} instead of completing",
                        edge.depends_on,
                        status.as_str()
                    )
                });
            }
        } else if !gate.broken.contains_key(&edge.order_id) {
            let until = match condition {
                Condition::AfterOk => DependencyEnd::Complete,
                Condition::AfterAny => DependencyEnd::End,
            };
            gate.blocked.entry(edge.order_id).or_insert_with(|| Held {
                order_id: edge.order_id,
                reason: format!(
                    "waiting for job {} ({}) to {}",
                    edge.depends_on,
                    status.as_str(),
                    match until {
                        DependencyEnd::Complete => "complete",
                        DependencyEnd::End => "end",
                    }
                ),
                details: WaitReason::Dependency {
                    order: OrderRef {
                        id: edge.depends_on,
                        name: None,
                    },
                    status,
                    until,
                },
            });
        }
    }
    for id in gate.broken.keys() {
        gate.blocked.remove(id);
    }
    Ok(gate)
}
