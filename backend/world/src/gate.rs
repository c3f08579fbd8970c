//! Which queued jobs may be placed: a job with dependencies waits until
//! each has ended (`after_any`) or completed (`after_ok`); one whose
//! `after_ok` dependency ended any other way can never run and fails, and
//! its own dependents fail in turn on later cycles.
//!
//! The loop keeps what it read between cycles ([`Dependencies`]): a job's
//! edges are written with it and never change, and neither does a final
//! status, so a cycle reads the edges of jobs new to the queue and the
//! status of dependencies that left the scheduler's copy without ending.
//! Reading the edges of every queued order each cycle cost 200 to 300 ms
//! at 100,000 queued whenever PostgreSQL chose to scan the queue for them.

use std::collections::{HashMap, HashSet};

use gantry_entities::{order, order_dependency};
use gantry_types::classes::OrderStatus;
use gantry_types::job_spec::Condition;
use gantry_types::reasons::{DependencyEnd, OrderRef, WaitReason};
use sea_orm::{ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QuerySelect};
use uuid::Uuid;

use crate::scoped::Held;
use crate::world::{Changed, World};

/// Ids one statement asks for at most: well under SQLite's and
/// PostgreSQL's limits on bound values.
const IDS_PER_READ: usize = 10_000;

/// Queued jobs held back this cycle, each with why.
#[derive(Debug, Default, Clone)]
pub struct Gate {
    /// Waiting for dependencies still running or queued.
    pub blocked: HashMap<Uuid, Held>,
    /// A dependency that had to succeed did not: these fail.
    pub broken: HashMap<Uuid, String>,
}

impl Gate {
    /// Holds back or breaks the job `edge` belongs to, as its dependency's
    /// `status` says.
    fn judge(&mut self, edge: &order_dependency::Model, status: OrderStatus) {
        let condition = Condition::parse(&edge.condition);
        if status.is_final() {
            if condition == Condition::AfterOk && status != OrderStatus::Completed {
                self.broken.entry(edge.order_id).or_insert_with(|| {
                    format!(
                        "dependency {} ended {} instead of completing",
                        edge.depends_on,
                        status.as_str()
                    )
                });
            }
            return;
        }
        if self.broken.contains_key(&edge.order_id) {
            return;
        }
        let until = match condition {
            Condition::AfterOk => DependencyEnd::Complete,
            Condition::AfterAny => DependencyEnd::End,
        };
        self.blocked.entry(edge.order_id).or_insert_with(|| Held {
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

/// The dependency edges of the queued orders, and the final statuses of
/// the orders they wait for that the copy no longer holds.
#[derive(Debug, Default)]
pub struct Dependencies {
    /// The queued orders whose edges were read; `None` until the whole
    /// queue was looked at.
    seen: Option<HashSet<Uuid>>,
    /// The edges of those that have any: few, so a cycle walks them all.
    edges: HashMap<Uuid, Vec<order_dependency::Model>>,
    ended: HashMap<Uuid, OrderStatus>,
}

/// The gate for `world`'s queue, read whole: for callers outside the loop.
pub async fn gate(db: &impl ConnectionTrait, world: &World) -> Result<Gate, DbErr> {
    Dependencies::default().gate(db, world, None).await
}

impl Dependencies {
    /// The gate for `world`'s queued orders. Only the orders in `changed`
    /// can have joined or left the queue since the last call; `None` looks
    /// at every order.
    pub async fn gate(
        &mut self,
        db: &impl ConnectionTrait,
        world: &World,
        changed: Option<&Changed>,
    ) -> Result<Gate, DbErr> {
        let queued = |id: &Uuid| {
            world
                .orders
                .get(id)
                .is_some_and(|o| o.status == OrderStatus::Queued)
        };
        let mut new = Vec::new();
        match (self.seen.as_mut(), changed) {
            (Some(seen), Some(changed)) => {
                for id in &changed.orders {
                    match (queued(id), seen.contains(id)) {
                        (true, false) => {
                            seen.insert(*id);
                            new.push(*id);
                        }
                        (false, true) => {
                            seen.remove(id);
                            self.edges.remove(id);
                        }
                        _ => {}
                    }
                }
            }
            _ => {
                new = world
                    .orders
                    .keys()
                    .filter(|id| queued(id))
                    .copied()
                    .collect();
                self.seen = Some(new.iter().copied().collect());
                self.edges.clear();
            }
        }
        for ids in new.chunks(IDS_PER_READ) {
            let read = order_dependency::Entity::find()
                .filter(order_dependency::Column::OrderId.is_in(ids.iter().copied()))
                .all(db)
                .await?;
            for edge in read {
                self.edges.entry(edge.order_id).or_default().push(edge);
            }
        }
        let statuses = self.statuses(db, world).await?;
        let mut gate = Gate::default();
        for edge in self.edges.values().flatten() {
            if let Some(&status) = statuses.get(&edge.depends_on) {
                gate.judge(edge, status);
            }
        }
        for id in gate.broken.keys() {
            gate.blocked.remove(id);
        }
        Ok(gate)
    }

    /// The status of every order a queued order waits for: from the copy,
    /// from the final statuses kept, or read (and kept when final).
    async fn statuses(
        &mut self,
        db: &impl ConnectionTrait,
        world: &World,
    ) -> Result<HashMap<Uuid, OrderStatus>, DbErr> {
        let mut statuses = HashMap::new();
        let mut unknown = Vec::new();
        for edge in self.edges.values().flatten() {
            let id = edge.depends_on;
            match world
                .orders
                .get(&id)
                .map(|o| o.status)
                .or_else(|| self.ended.get(&id).copied())
            {
                Some(status) => {
                    statuses.insert(id, status);
                }
                None => unknown.push(id),
            }
        }
        unknown.sort_unstable();
        unknown.dedup();
        for ids in unknown.chunks(IDS_PER_READ) {
            let read = order::Entity::find()
                .select_only()
                .column(order::Column::Id)
                .column(order::Column::Status)
                .filter(order::Column::Id.is_in(ids.iter().copied()))
                .into_tuple::<(Uuid, OrderStatus)>()
                .all(db)
                .await?;
            for (id, status) in read {
                if status.is_final() {
                    self.ended.insert(id, status);
                }
                statuses.insert(id, status);
            }
        }
        self.ended.retain(|id, _| statuses.contains_key(id));
        Ok(statuses)
    }
}
