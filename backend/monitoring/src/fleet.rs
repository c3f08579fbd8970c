//! The fleet and its queues as the scheduling leader sees them: GPUs by
//! state, what the free ones can still host, what waits and why, what was
//! preempted, and the loop's own health; and how long orders waited to
//! come up. Only the leader sets the gauges; on a replica that stops
//! leading they go idle and leave the output, so a sum over replicas never
//! counts twice. Counters and histograms count each event once, on the
//! replica where it happened.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{DateTime, Utc};
use gantry_scheduler as engine;
use metrics::{
    Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram,
};
use sea_orm::sea_query::{Expr, OnConflict};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, DatabaseConnection, DbErr, EntityTrait,
    QueryFilter, QuerySelect,
};
use uuid::Uuid;

use gantry_entities::{
    node, order, order_status_count, order_status_move, shared_file_system, sla_policy, volume,
};
use gantry_types::classes::{
    AllocationState, NodeState, OrderStatus, PriorityClass, VolumeKind, VolumeState,
};
use gantry_types::reasons::WaitReason;
use gantry_world::load::Loaded;
use gantry_world::world::World;

pub const GPUS: &str = "gantry_gpus";
pub const NODES: &str = "gantry_nodes";
pub const SLOTS: &str = "gantry_schedulable_slots";
pub const FRAGMENTATION: &str = "gantry_fragmentation_ratio";
pub const PENDING: &str = "gantry_pending_orders";
pub const ADMISSION_WAIT: &str = "gantry_admission_wait_seconds";
pub const PREEMPTIONS: &str = "gantry_preemptions_total";
pub const ORDERS_ENDED: &str = "gantry_orders_total";
pub const ORDERS: &str = "gantry_orders";
pub const CYCLE: &str = "gantry_scheduling_cycle_seconds";
pub const CYCLES: &str = "gantry_scheduling_cycles_total";
pub const LEADER: &str = "gantry_scheduler_leader";
pub const METERING_LAG: &str = "gantry_metering_lag_seconds";
pub const HELD_BY_ENDED: &str = "gantry_gpus_held_by_ended_orders";
pub const SLA_AT_RISK: &str = "gantry_sla_orders_at_risk";
pub const VOLUME_GIB: &str = "gantry_volume_provisioned_gib";
pub const VOLUME_USED: &str = "gantry_volume_used_bytes";
pub const VOLUME_FREE: &str = "gantry_node_volume_free_bytes";
pub const SHARED_FREE: &str = "gantry_shared_file_system_free_bytes";

pub fn describe() {
    describe_gauge!(
        VOLUME_GIB,
        "GiB sold to volumes not deleted, by region and kind"
    );
    describe_gauge!(
        VOLUME_USED,
        "Bytes the files of volumes take, as their nodes last measured, by region and kind"
    );
    describe_gauge!(
        VOLUME_FREE,
        "Room a node's agent reports for more local volumes, by region and node"
    );
    describe_gauge!(
        SHARED_FREE,
        "Free bytes of a region's shared file system, as its nodes last saw them, by region and kind"
    );
    describe_gauge!(
        GPUS,
        "GPUs by region, model and state: allocated, free, unhealthy, cordoned (on a node taking no new work)"
    );
    describe_gauge!(NODES, "Nodes by region and state");
    describe_gauge!(
        SLOTS,
        "Workloads of a single-node shape (GPUs per node) that fit side by side in the free GPUs now: free is not schedulable"
    );
    describe_gauge!(
        FRAGMENTATION,
        "Share of free GPUs of a model that cannot serve a whole-node request, 0 to 1"
    );
    describe_gauge!(
        PENDING,
        "Orders waiting to be placed, by organization, priority class and first reason"
    );
    describe_histogram!(
        ADMISSION_WAIT,
        Unit::Seconds,
        "From an order's creation until it came up (its started_at), by priority class; recorded by the replica that saw it come up"
    );
    describe_counter!(PREEMPTIONS, "Running work told to stop, by cause");
    // Known from the start, so that rates over them exist before the first.
    for cause in CAUSES {
        counter!(PREEMPTIONS, "cause" => cause).absolute(0);
    }
    describe_counter!(
        ORDERS_ENDED,
        "Orders that reached a final status, by status, since the database began"
    );
    describe_gauge!(ORDERS, "Orders not yet ended, by status");
    describe_histogram!(
        CYCLE,
        Unit::Seconds,
        "Scheduling cycle time by phase: load, engine, write, and total"
    );
    describe_counter!(
        CYCLES,
        "Scheduling cycles by what they planned: the whole queue, new orders alone against the last whole plan, or nothing"
    );
    for planned in ["whole", "arrivals", "nothing"] {
        counter!(CYCLES, "planned" => planned).absolute(0);
    }
    describe_gauge!(
        LEADER,
        "1 on the replica that runs the scheduling loop, else 0"
    );
    describe_gauge!(
        METERING_LAG,
        Unit::Seconds,
        "How far final usage records trail the clock (includes the agents' heartbeat deadline)"
    );
    describe_gauge!(
        HELD_BY_ENDED,
        "GPUs still allocated to ended orders at the last check, before they were reclaimed"
    );
    describe_gauge!(
        SLA_AT_RISK,
        "Orders of a class with an SLA target that are using it up now: waiting past half the queue-wait target for their start (objective queue_wait), or down after they started (objective availability)"
    );
}

type Labels = Vec<(&'static str, String)>;

/// The label sets each gauge had at the last publish: a set that is gone
/// now is written once as 0, so a queue that emptied reads 0 at once
/// instead of its last count until it goes idle.
#[derive(Default)]
pub struct Published {
    last: HashMap<&'static str, HashSet<Labels>>,
}

impl Published {
    fn set(&mut self, name: &'static str, values: HashMap<Labels, f64>) {
        let previous = self.last.remove(name).unwrap_or_default();
        for labels in previous.iter().filter(|l| !values.contains_key(*l)) {
            gauge!(name, labels).set(0.0);
        }
        for (labels, value) in &values {
            gauge!(name, labels).set(*value);
        }
        self.last.insert(name, values.into_keys().collect());
    }
}

/// GPUs and nodes by state, slots per shape and fragmentation, from the
/// leader's copy of the rows and the capacity reports of the cycle's
/// engine snapshot (the fleet's, and each region's).
pub fn publish_fleet(
    published: &mut Published,
    world: &World,
    capacity: &engine::CapacityReport,
    by_region: &BTreeMap<String, engine::CapacityReport>,
) {
    let region = |id: &Uuid| world.regions.get(id).map_or("", |r| r.name.as_str());
    let held: HashSet<(Uuid, u32)> = world
        .allocations
        .values()
        .filter(|a| a.state != AllocationState::Released)
        .flat_map(|a| a.gpu_list().into_iter().map(move |i| (a.node_id, i)))
        .collect();
    let mut gpus: HashMap<Labels, f64> = HashMap::new();
    for gpu in world.gpus.values() {
        let Some(node) = world.nodes.get(&gpu.node_id) else {
            continue;
        };
        let index = u32::try_from(gpu.index).unwrap_or(u32::MAX);
        let state = if !gpu.healthy || node.state == NodeState::Unhealthy {
            "unhealthy"
        } else if held.contains(&(node.id, index)) {
            "allocated"
        } else if gpu.held_outside {
            "outside"
        } else if node.state != NodeState::Ready {
            "cordoned"
        } else {
            "free"
        };
        let model = world
            .gpu_models
            .get(&gpu.gpu_model_id)
            .map_or("", |m| m.name.as_str());
        *gpus
            .entry(vec![
                ("region", region(&node.region_id).to_owned()),
                ("gpu_model", model.to_owned()),
                ("state", state.to_owned()),
            ])
            .or_default() += 1.0;
    }
    published.set(GPUS, gpus);

    let mut nodes: HashMap<Labels, f64> = HashMap::new();
    for node in world.nodes.values() {
        *nodes
            .entry(vec![
                ("region", region(&node.region_id).to_owned()),
                ("state", node.state.as_str().to_owned()),
            ])
            .or_default() += 1.0;
    }
    published.set(NODES, nodes);

    let mut slots: HashMap<Labels, f64> = HashMap::new();
    for (region, report) in by_region {
        for model in &report.models {
            for shape in &model.shapes {
                slots.insert(
                    vec![
                        ("region", region.clone()),
                        ("gpu_model", model.model.clone()),
                        ("shape", shape.gpus_per_node.to_string()),
                    ],
                    f64::from(shape.slots),
                );
            }
        }
    }
    published.set(SLOTS, slots);
    let fragmentation = capacity
        .models
        .iter()
        .map(|m| {
            (
                vec![("gpu_model", m.model.clone())],
                f64::from(m.fragmentation_permille) / 1000.0,
            )
        })
        .collect();
    published.set(FRAGMENTATION, fragmentation);
}

/// Waiting orders by organization, priority class and their first reason
/// this cycle: the engine's, or why they were held before it. Returns how
/// many were counted.
pub async fn publish_pending(
    published: &mut Published,
    db: &impl ConnectionTrait,
    world: &World,
    loaded: &Loaded,
    decisions: &engine::Decisions,
) -> Result<usize, DbErr> {
    let mut first: HashMap<Uuid, &'static str> = decisions
        .waiting
        .iter()
        .filter_map(|w| {
            let id = Uuid::try_parse(&w.workload).ok()?;
            let kind = w
                .reasons
                .first()
                .map_or("none", |r| WaitReason::from(r).kind());
            Some((id, kind))
        })
        .collect();
    first.extend(loaded.held.iter().map(|h| (h.order_id, h.details.kind())));
    let orgs: HashSet<Uuid> = first
        .keys()
        .filter_map(|id| world.orders.get(id))
        .map(|o| o.org_id)
        .collect();
    let names = gantry_access::tenancy::orgs::names(db, orgs).await?;
    let mut pending: HashMap<Labels, f64> = HashMap::new();
    let mut counted = 0;
    for (id, reason) in first {
        let Some(order) = world.orders.get(&id) else {
            continue;
        };
        counted += 1;
        let labels = vec![
            (
                "organization",
                names.get(&order.org_id).cloned().unwrap_or_default(),
            ),
            ("organization_id", order.org_id.to_string()),
            ("priority_class", order.priority_class.as_str().to_owned()),
            ("reason", reason.to_owned()),
        ];
        *pending.entry(labels).or_default() += 1.0;
    }
    published.set(PENDING, pending);
    Ok(counted)
}

/// How long an order waited from its creation until it came up.
pub fn record_admission(order: &order::Model, now: DateTime<Utc>) {
    let waited = (now - order.created_at).num_milliseconds().max(0) as f64 / 1000.0;
    histogram!(ADMISSION_WAIT, "priority_class" => order.priority_class.as_str()).record(waited);
}

const CAUSES: [&str; 4] = [
    "priority",
    "reclaim",
    "advance_reservation",
    "defragmentation",
];

/// The preemptions one cycle ordered.
pub fn record_preemptions(decisions: &engine::Decisions) {
    for preemption in &decisions.preemptions {
        let cause = match preemption.cause {
            engine::PreemptionCause::Priority => CAUSES[0],
            engine::PreemptionCause::Reclaim => CAUSES[1],
            engine::PreemptionCause::AdvanceReservation => CAUSES[2],
            engine::PreemptionCause::Defragmentation => CAUSES[3],
        };
        counter!(PREEMPTIONS, "cause" => cause).increment(1);
    }
}

/// Counts a cycle by how much of the queue it planned.
pub fn record_cycle_scope(planned: &'static str) {
    counter!(CYCLES, "planned" => planned).increment(1);
}

/// The time of one phase of a cycle.
pub fn record_phase(phase: &'static str, seconds: f64) {
    histogram!(CYCLE, "phase" => phase).record(seconds);
}

pub fn set_leader(leading: bool) {
    gauge!(LEADER).set(if leading { 1.0 } else { 0.0 });
}

pub fn set_metering_lag(seconds: f64) {
    gauge!(METERING_LAG).set(seconds);
}

pub fn set_held_by_ended(gpus: i64) {
    gauge!(HELD_BY_ENDED).set(gpus as f64);
}

/// Orders by status: ended ones as a counter (an order never leaves a
/// final status), the others as a gauge.
pub async fn publish_orders(
    published: &mut Published,
    db: &DatabaseConnection,
) -> Result<(), DbErr> {
    let mut open: HashMap<Labels, f64> = HashMap::new();
    for (status, count) in order_counts(db).await? {
        if status.is_final() {
            counter!(ORDERS_ENDED, "status" => status.as_str())
                .absolute(u64::try_from(count).unwrap_or(0));
        } else {
            open.insert(vec![("status", status.as_str().to_owned())], count as f64);
        }
    }
    published.set(ORDERS, open);
    Ok(())
}

/// At most this many status moves are folded per publish; the rest wait
/// for the next.
const FOLD_MAX: u64 = 50_000;

/// Orders by status: the moves logged since the last call are folded into
/// the counts first, so the cost follows the orders that changed, not how
/// many there are. The moves folded are those deleted, so a move committed
/// while this runs is counted at the next call, never twice or never.
pub async fn order_counts(db: &DatabaseConnection) -> Result<Vec<(OrderStatus, i64)>, DbErr> {
    use order_status_count::Column as Count;
    use order_status_move::Column as Move;
    use sea_orm::sea_query::ExprTrait;
    let txn = gantry_core::db::write(db).await?;
    let mut deltas: HashMap<OrderStatus, i64> = HashMap::new();
    for moved in
        gantry_core::db::take_oldest::<order_status_move::Entity>(&txn, Move::Id, FOLD_MAX).await?
    {
        *deltas.entry(moved.status).or_default() += i64::from(moved.delta);
    }
    for (status, delta) in deltas.into_iter().filter(|(_, delta)| *delta != 0) {
        order_status_count::Entity::insert(order_status_count::ActiveModel {
            status: Set(status),
            orders: Set(delta),
        })
        .on_conflict(
            OnConflict::column(Count::Status)
                .value(
                    Count::Orders,
                    Expr::col((order_status_count::Entity, Count::Orders)).add(delta),
                )
                .to_owned(),
        )
        .exec(&txn)
        .await?;
    }
    let counts = order_status_count::Entity::find().all(&txn).await?;
    txn.commit().await?;
    Ok(counts.into_iter().map(|c| (c.status, c.orders)).collect())
}

/// Storage sold and used by region and kind (one grouped sum), and each
/// node's room for local volumes.
pub async fn publish_storage(
    published: &mut Published,
    db: &impl ConnectionTrait,
    world: &World,
) -> Result<(), DbErr> {
    let region = |id: &Uuid| {
        world
            .regions
            .get(id)
            .map_or("", |r| r.name.as_str())
            .to_owned()
    };
    let sums: Vec<(Uuid, VolumeKind, Option<i64>, Option<i64>)> = volume::Entity::find()
        .select_only()
        .column(volume::Column::RegionId)
        .column(volume::Column::Kind)
        // PostgreSQL sums BIGINT as NUMERIC: cast back, on both engines.
        .column_as(Expr::cust("CAST(SUM(size_gib) AS BIGINT)"), "size")
        .column_as(Expr::cust("CAST(SUM(used_bytes) AS BIGINT)"), "used")
        .filter(volume::Column::State.ne(VolumeState::Deleted))
        .group_by(volume::Column::RegionId)
        .group_by(volume::Column::Kind)
        .into_tuple()
        .all(db)
        .await?;
    let (mut sold, mut used): (HashMap<Labels, f64>, HashMap<Labels, f64>) = Default::default();
    for (region_id, kind, size, bytes) in sums {
        let labels = vec![
            ("region", region(&region_id)),
            ("kind", kind.as_str().to_owned()),
        ];
        sold.insert(labels.clone(), size.unwrap_or(0) as f64);
        used.insert(labels, bytes.unwrap_or(0) as f64);
    }
    published.set(VOLUME_GIB, sold);
    published.set(VOLUME_USED, used);
    let free: HashMap<Labels, f64> = node::Entity::find()
        .filter(node::Column::VolumeFreeBytes.is_not_null())
        .all(db)
        .await?
        .into_iter()
        .map(|n| {
            (
                vec![("region", region(&n.region_id)), ("node", n.name)],
                n.volume_free_bytes.unwrap_or(0) as f64,
            )
        })
        .collect();
    published.set(VOLUME_FREE, free);
    let shared: HashMap<Labels, f64> = shared_file_system::Entity::find()
        .filter(shared_file_system::Column::FreeBytes.is_not_null())
        .all(db)
        .await?
        .into_iter()
        .map(|fs| {
            (
                vec![
                    ("region", region(&fs.region_id)),
                    ("kind", fs.kind.as_str().to_owned()),
                ],
                fs.free_bytes.unwrap_or(0) as f64,
            )
        })
        .collect();
    published.set(SHARED_FREE, shared);
    Ok(())
}

/// Orders whose SLA is being used up now, by class and objective; every
/// objective a class has a target for reads 0 when none is, so an alert
/// can tell "none at risk" from "not measured".
pub async fn publish_sla_risk(
    published: &mut Published,
    db: &impl ConnectionTrait,
    world: &World,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    let targets: HashMap<PriorityClass, Option<i64>> = sla_policy::Entity::find()
        .all(db)
        .await?
        .into_iter()
        .map(|p| (p.priority_class, p.queue_wait_target_seconds))
        .collect();
    let orders = world
        .orders
        .values()
        .map(|o| (o.priority_class, o.status, o.created_at, o.started_at));
    published.set(SLA_AT_RISK, sla_risk(&targets, orders, now));
    Ok(())
}

/// The SLA-at-risk counts of `orders` (class, status, created, started)
/// under classes' queue-wait targets (`None`: availability only): waiting
/// past half the target before the first start, or down after a start.
fn sla_risk(
    targets: &HashMap<PriorityClass, Option<i64>>,
    orders: impl Iterator<
        Item = (
            PriorityClass,
            OrderStatus,
            DateTime<Utc>,
            Option<DateTime<Utc>>,
        ),
    >,
    now: DateTime<Utc>,
) -> HashMap<Labels, f64> {
    let labels = |class: PriorityClass, objective: &str| {
        vec![
            ("priority_class", class.as_str().to_owned()),
            ("objective", objective.to_owned()),
        ]
    };
    let mut at_risk: HashMap<Labels, f64> = HashMap::new();
    for (class, wait_target) in targets {
        at_risk.insert(labels(*class, "availability"), 0.0);
        if wait_target.is_some() {
            at_risk.insert(labels(*class, "queue_wait"), 0.0);
        }
    }
    for (class, status, created_at, started_at) in orders {
        let Some(wait_target) = targets.get(&class) else {
            continue;
        };
        if status.is_final() || status == OrderStatus::Running {
            continue;
        }
        let objective = match (started_at, wait_target) {
            (Some(_), _) => "availability",
            (None, Some(target)) if (now - created_at).num_seconds() * 2 > *target => "queue_wait",
            (None, _) => continue,
        };
        *at_risk.entry(labels(class, objective)).or_default() += 1.0;
    }
    at_risk
}

#[cfg(test)]
mod tests {
    use chrono::TimeDelta;

    use super::*;

    #[test]
    fn an_sla_is_at_risk_past_half_the_wait_target_or_while_down_after_a_start() {
        let now = Utc::now();
        let ago = |minutes: i64| now - TimeDelta::minutes(minutes);
        let targets = HashMap::from([
            (PriorityClass::Production, Some(600)),
            (PriorityClass::Standard, None),
        ]);
        let orders = [
            // Waited 6 of its 10 minutes: at risk.
            (PriorityClass::Production, OrderStatus::Queued, ago(6), None),
            // Waited 4: not yet.
            (PriorityClass::Production, OrderStatus::Queued, ago(4), None),
            // Started once and queued again after a node fault: down.
            (
                PriorityClass::Production,
                OrderStatus::Queued,
                ago(60),
                Some(ago(50)),
            ),
            (
                PriorityClass::Production,
                OrderStatus::Provisioning,
                ago(60),
                Some(ago(50)),
            ),
            // Running, or over: nothing to lose now.
            (
                PriorityClass::Production,
                OrderStatus::Running,
                ago(60),
                Some(ago(50)),
            ),
            (
                PriorityClass::Production,
                OrderStatus::Completed,
                ago(60),
                Some(ago(50)),
            ),
            // A class without a wait target waits freely.
            (PriorityClass::Standard, OrderStatus::Queued, ago(600), None),
            // A class without an SLA is not counted at all.
            (
                PriorityClass::Batch,
                OrderStatus::Queued,
                ago(60),
                Some(ago(50)),
            ),
        ];
        let risk = sla_risk(&targets, orders.into_iter(), now);
        let of = |class: &str, objective: &str| {
            risk.get(&vec![
                ("priority_class", class.to_owned()),
                ("objective", objective.to_owned()),
            ])
            .copied()
        };
        assert_eq!(of("production", "queue_wait"), Some(1.0));
        assert_eq!(of("production", "availability"), Some(2.0));
        assert_eq!(of("standard", "availability"), Some(0.0));
        assert_eq!(of("standard", "queue_wait"), None);
        assert_eq!(of("batch", "availability"), None);
        assert_eq!(risk.len(), 3);
    }
}
