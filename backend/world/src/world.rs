//! The leader's copy of every row the scheduler plans with. It is read
//! whole when a process starts to lead, then follows the change log: each
//! cycle reads the log from its last sequence number and re-reads only the
//! rows named there. A full read stays as the periodic consistency check.
//!
//! Re-reading rows rather than applying deltas makes following the log
//! idempotent: a change seen twice, or seen before an earlier one, leaves
//! the row as the database has it now.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use sea_orm::{
    ColumnTrait, Condition, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QueryOrder,
};
use uuid::Uuid;

use gantry_core::db::by_id;
use gantry_entities::{
    allocation, change_log, gpu, gpu_model, instance_type, maintenance_window, node, order, price,
    quota, region, reservation, reservation_node,
};
use gantry_types::classes::{AllocationState, OrderStatus, ReservationStatus};

/// How many ids one `IN (…)` re-read names at most.
const CHUNK: usize = 1_000;

/// How long a sequence number missing from the log is looked for. On
/// PostgreSQL a transaction takes its number when it writes and shows it
/// when it commits, so a later number can appear first; a number that
/// stays missing belonged to a transaction that rolled back.
const GAP_PATIENCE: Duration = Duration::from_secs(120);

/// Beyond this many missing numbers, following the log costs more than
/// reading everything again.
const MAX_GAPS: usize = 10_000;

/// The rows the scheduler plans with, as of the change log's `cursor`.
#[derive(Default)]
pub struct World {
    /// The highest sequence number applied.
    cursor: i64,
    /// Numbers below `cursor` not seen yet, and since when.
    gaps: BTreeMap<i64, Instant>,
    pub gpu_models: HashMap<Uuid, gpu_model::Model>,
    pub instance_types: HashMap<Uuid, instance_type::Model>,
    pub regions: HashMap<Uuid, region::Model>,
    pub prices: HashMap<Uuid, price::Model>,
    pub quotas: HashMap<Uuid, quota::Model>,
    pub nodes: HashMap<Uuid, node::Model>,
    pub gpus: HashMap<Uuid, gpu::Model>,
    /// Orders that wait to be placed or hold an allocation not released.
    pub orders: HashMap<Uuid, order::Model>,
    /// Allocations not released.
    pub allocations: HashMap<Uuid, allocation::Model>,
    /// Confirmed reservations, and the GPUs each holds by reservation id.
    pub reservations: HashMap<Uuid, reservation::Model>,
    pub reservation_nodes: HashMap<Uuid, Vec<reservation_node::Model>>,
    /// Maintenance windows not cancelled or over.
    pub maintenance: HashMap<Uuid, maintenance_window::Model>,
    /// Nodes whose allocations, or their orders, changed since the last
    /// `take_touched`; `None` after a full read, which tells nothing.
    touched: Option<HashSet<Uuid>>,
    /// What changed since the last `take_changed`, for the engine's input
    /// kept between cycles; `None` after a full read.
    changed: Option<Changed>,
}

/// The rows that changed, as the engine's input is built from them.
#[derive(Debug, Default, Clone)]
pub struct Changed {
    /// Orders whose row or allocations changed, or that left the copy.
    pub orders: HashSet<Uuid>,
    /// Nodes whose row, GPUs or held MIG instances changed.
    pub nodes: HashSet<Uuid>,
    /// GPU models, instance types, regions or prices changed.
    pub catalog: bool,
}

/// What following the log found.
pub enum Followed {
    /// This many changes were applied.
    Applied(usize),
    /// The log cannot be followed from here (too many numbers missing);
    /// read everything again.
    Lost,
}

impl World {
    /// Reads every row. The log position is taken first, so a change made
    /// while the tables are read is applied again by the next `follow`.
    pub async fn load(db: &impl ConnectionTrait) -> Result<Self, DbErr> {
        let cursor = change_log::Entity::find()
            .order_by_desc(change_log::Column::Seq)
            .one(db)
            .await?
            .map_or(0, |c| c.seq);
        let mut world = Self {
            cursor,
            ..Self::default()
        };
        world.load_catalog(db).await?;
        world.quotas = by_id(quota::Entity::find().all(db).await?, |q| q.id);
        world.nodes = by_id(node::Entity::find().all(db).await?, |n| n.id);
        world.gpus = by_id(gpu::Entity::find().all(db).await?, |g| g.id);
        world.allocations = by_id(
            allocation::Entity::find()
                .filter(allocation::Column::State.ne(AllocationState::Released))
                .all(db)
                .await?,
            |a| a.id,
        );
        world.reservations = by_id(
            reservation::Entity::find()
                .filter(reservation::Column::Status.eq(ReservationStatus::Confirmed))
                .all(db)
                .await?,
            |r| r.id,
        );
        let confirmed: HashSet<Uuid> = world.reservations.keys().copied().collect();
        world.read_reservation_nodes(db, &confirmed).await?;
        world.maintenance = by_id(
            maintenance_window::Entity::find()
                .filter(maintenance_window::Column::Status.eq(ReservationStatus::Confirmed))
                .all(db)
                .await?,
            |m| m.id,
        );
        world.orders = by_id(
            order::Entity::find()
                .filter(
                    Condition::any()
                        .add(order::Column::Status.eq(OrderStatus::Queued))
                        .add(
                            order::Column::Id.is_in(world.allocations.values().map(|a| a.order_id)),
                        ),
                )
                .all(db)
                .await?,
            |o| o.id,
        );
        Ok(world)
    }

    async fn load_catalog(&mut self, db: &impl ConnectionTrait) -> Result<(), DbErr> {
        self.gpu_models = by_id(gpu_model::Entity::find().all(db).await?, |m| m.id);
        self.instance_types = by_id(instance_type::Entity::find().all(db).await?, |t| t.id);
        self.regions = by_id(region::Entity::find().all(db).await?, |r| r.id);
        self.prices = by_id(price::Entity::find().all(db).await?, |p| p.id);
        Ok(())
    }

    /// Reads the GPUs held by the reservations `ids` again.
    async fn read_reservation_nodes(
        &mut self,
        db: &impl ConnectionTrait,
        ids: &HashSet<Uuid>,
    ) -> Result<(), DbErr> {
        let ids: Vec<Uuid> = ids.iter().copied().collect();
        for chunk in ids.chunks(CHUNK) {
            for id in chunk {
                self.reservation_nodes.remove(id);
            }
            let wanted: Vec<Uuid> = chunk
                .iter()
                .copied()
                .filter(|id| self.reservations.contains_key(id))
                .collect();
            if wanted.is_empty() {
                continue;
            }
            for row in reservation_node::Entity::find()
                .filter(reservation_node::Column::ReservationId.is_in(wanted))
                .all(db)
                .await?
            {
                self.reservation_nodes
                    .entry(row.reservation_id)
                    .or_default()
                    .push(row);
            }
        }
        Ok(())
    }

    /// The highest change log sequence number applied.
    pub fn cursor(&self) -> i64 {
        self.cursor
    }

    /// Applies every change logged since the last call.
    pub async fn follow(&mut self, db: &impl ConnectionTrait) -> Result<Followed, DbErr> {
        let mut seen = Condition::any().add(change_log::Column::Seq.gt(self.cursor));
        if !self.gaps.is_empty() {
            seen = seen.add(change_log::Column::Seq.is_in(self.gaps.keys().copied()));
        }
        let changes = change_log::Entity::find()
            .filter(seen)
            .order_by_asc(change_log::Column::Seq)
            .all(db)
            .await?;
        let now = Instant::now();
        let mut next = self.cursor + 1;
        for change in &changes {
            self.gaps.remove(&change.seq);
            if change.seq >= next {
                let missing = usize::try_from(change.seq - next).unwrap_or(usize::MAX);
                if self.gaps.len().saturating_add(missing) > MAX_GAPS {
                    return Ok(Followed::Lost);
                }
                self.gaps.extend((next..change.seq).map(|seq| (seq, now)));
                next = change.seq + 1;
            }
        }
        self.cursor = next - 1;
        self.gaps
            .retain(|_, since| now.duration_since(*since) < GAP_PATIENCE);
        if changes.is_empty() {
            return Ok(Followed::Applied(0));
        }
        let mut changed: HashMap<&str, HashSet<Uuid>> = HashMap::new();
        for change in &changes {
            changed
                .entry(change.entity.as_str())
                .or_default()
                .insert(change.entity_id);
        }
        let catalog = ["gpu_models", "instance_types", "regions", "prices"];
        if catalog.iter().any(|table| changed.contains_key(table)) {
            self.load_catalog(db).await?;
            if let Some(record) = &mut self.changed {
                record.catalog = true;
            }
        }
        if changed.contains_key("quotas") {
            self.quotas = by_id(quota::Entity::find().all(db).await?, |q| q.id);
        }
        if let Some(ids) = changed.get("nodes") {
            if let Some(record) = &mut self.changed {
                record.nodes.extend(ids);
            }
            reread::<node::Entity, _>(
                db,
                ids,
                &mut self.nodes,
                node::Column::Id,
                |n| n.id,
                |_| true,
            )
            .await?;
        }
        if let Some(ids) = changed.get("gpus") {
            self.record_gpus(ids);
            reread::<gpu::Entity, _>(db, ids, &mut self.gpus, gpu::Column::Id, |g| g.id, |_| true)
                .await?;
            self.record_gpus(ids);
        }
        if let Some(ids) = changed.get("reservations") {
            reread::<reservation::Entity, _>(
                db,
                ids,
                &mut self.reservations,
                reservation::Column::Id,
                |r| r.id,
                |r| r.status == ReservationStatus::Confirmed,
            )
            .await?;
            self.read_reservation_nodes(db, ids).await?;
        }
        if let Some(ids) = changed.get("maintenance_windows") {
            reread::<maintenance_window::Entity, _>(
                db,
                ids,
                &mut self.maintenance,
                maintenance_window::Column::Id,
                |m| m.id,
                |m| m.status == ReservationStatus::Confirmed,
            )
            .await?;
        }
        // An allocation's node is touched as the copy had it (a released one
        // leaves the copy) and as it is now.
        if let Some(ids) = changed.get("allocations") {
            self.touch(|a| ids.contains(&a.id));
            self.record_allocations(ids);
            reread::<allocation::Entity, _>(
                db,
                ids,
                &mut self.allocations,
                allocation::Column::Id,
                |a| a.id,
                |a| a.state != AllocationState::Released,
            )
            .await?;
        }
        if let Some(ids) = changed.get("allocations") {
            self.touch(|a| ids.contains(&a.id));
            self.record_allocations(ids);
        }
        let mut orders: HashSet<Uuid> = changed.remove("orders").unwrap_or_default();
        self.touch(|a| orders.contains(&a.order_id));
        let held: HashSet<Uuid> = self.allocations.values().map(|a| a.order_id).collect();
        orders.extend(held.iter().filter(|id| !self.orders.contains_key(id)));
        reread::<order::Entity, _>(
            db,
            &orders,
            &mut self.orders,
            order::Column::Id,
            |o| o.id,
            |o| o.status == OrderStatus::Queued || held.contains(&o.id),
        )
        .await?;
        self.orders
            .retain(|id, o| o.status == OrderStatus::Queued || held.contains(id));
        if let Some(record) = &mut self.changed {
            record.orders.extend(orders);
        }
        Ok(Followed::Applied(changes.len()))
    }

    /// Records the nodes of the GPUs `ids` as changed.
    fn record_gpus(&mut self, ids: &HashSet<Uuid>) {
        if let Some(record) = &mut self.changed {
            record.nodes.extend(
                ids.iter()
                    .filter_map(|id| self.gpus.get(id))
                    .map(|g| g.node_id),
            );
        }
    }

    /// Records the orders of the allocations `ids` as changed, and their
    /// nodes where they hold MIG instances (which the node's free
    /// instances follow).
    fn record_allocations(&mut self, ids: &HashSet<Uuid>) {
        if let Some(record) = &mut self.changed {
            for a in ids.iter().filter_map(|id| self.allocations.get(id)) {
                record.orders.insert(a.order_id);
                if a.mig_device.is_some() {
                    record.nodes.insert(a.node_id);
                }
            }
        }
    }

    /// Marks the nodes of the allocations `which` picks as touched.
    fn touch(&mut self, which: impl Fn(&allocation::Model) -> bool) {
        if let Some(touched) = &mut self.touched {
            touched.extend(
                self.allocations
                    .values()
                    .filter(|a| which(a))
                    .map(|a| a.node_id),
            );
        }
    }

    /// The nodes touched since the last call, or `None` when this copy
    /// cannot tell (it was read whole since).
    pub fn take_touched(&mut self) -> Option<HashSet<Uuid>> {
        self.touched.replace(HashSet::new())
    }

    /// What changed since the last call, or `None` when this copy cannot
    /// tell (it was read whole since).
    pub fn take_changed(&mut self) -> Option<Changed> {
        self.changed.replace(Changed::default())
    }

    /// What differs between this copy and `fresh`, a full read, in what the
    /// scheduler uses: one line per table with the ids that differ.
    pub fn differences(&self, fresh: &Self) -> Vec<String> {
        let mut found = Vec::new();
        compare(
            &mut found,
            "gpu_models",
            &self.gpu_models,
            &fresh.gpu_models,
            Clone::clone,
        );
        compare(
            &mut found,
            "instance_types",
            &self.instance_types,
            &fresh.instance_types,
            Clone::clone,
        );
        compare(
            &mut found,
            "regions",
            &self.regions,
            &fresh.regions,
            Clone::clone,
        );
        compare(
            &mut found,
            "prices",
            &self.prices,
            &fresh.prices,
            Clone::clone,
        );
        compare(
            &mut found,
            "quotas",
            &self.quotas,
            &fresh.quotas,
            Clone::clone,
        );
        compare(&mut found, "gpus", &self.gpus, &fresh.gpus, Clone::clone);
        compare(&mut found, "nodes", &self.nodes, &fresh.nodes, node_view);
        compare(
            &mut found,
            "orders",
            &self.orders,
            &fresh.orders,
            order_view,
        );
        compare(
            &mut found,
            "allocations",
            &self.allocations,
            &fresh.allocations,
            allocation_view,
        );
        compare(
            &mut found,
            "reservations",
            &self.reservations,
            &fresh.reservations,
            |r| (r.org_id, r.starts_at, r.ends_at, r.status),
        );
        compare(
            &mut found,
            "maintenance_windows",
            &self.maintenance,
            &fresh.maintenance,
            |m| (m.node_id, m.starts_at, m.ends_at, m.status),
        );
        found
    }
}

/// Reads the rows `ids` names again: a row found and wanted replaces the
/// copy, any other id leaves the map.
async fn reread<E, T>(
    db: &impl ConnectionTrait,
    ids: &HashSet<Uuid>,
    rows: &mut HashMap<Uuid, T>,
    column: E::Column,
    id: impl Fn(&T) -> Uuid,
    wanted: impl Fn(&T) -> bool,
) -> Result<(), DbErr>
where
    E: EntityTrait<Model = T>,
    T: sea_orm::FromQueryResult + Send + Sync,
{
    let ids: Vec<Uuid> = ids.iter().copied().collect();
    for chunk in ids.chunks(CHUNK) {
        for id in chunk {
            rows.remove(id);
        }
        for row in E::find()
            .filter(column.is_in(chunk.iter().copied()))
            .all(db)
            .await?
        {
            if wanted(&row) {
                rows.insert(id(&row), row);
            }
        }
    }
    Ok(())
}

fn compare<T, V: PartialEq>(
    found: &mut Vec<String>,
    table: &str,
    kept: &HashMap<Uuid, T>,
    fresh: &HashMap<Uuid, T>,
    view: impl Fn(&T) -> V,
) {
    let mut differing: Vec<Uuid> = kept
        .keys()
        .chain(fresh.keys())
        .copied()
        .collect::<HashSet<_>>()
        .into_iter()
        .filter(|id| kept.get(id).map(&view) != fresh.get(id).map(&view))
        .collect();
    if differing.is_empty() {
        return;
    }
    differing.sort();
    let shown: Vec<String> = differing.iter().take(5).map(ToString::to_string).collect();
    found.push(format!(
        "{table}: {} differ ({}{})",
        differing.len(),
        shown.join(", "),
        if differing.len() > shown.len() {
            ", …"
        } else {
            ""
        }
    ));
}

/// A node as the scheduler sees it: heartbeats (and the room for volumes
/// they carry), and credentials left out, as the change log leaves them
/// out.
fn node_view(n: &node::Model) -> node::Model {
    node::Model {
        credential_hash: None,
        credential_next_hash: None,
        credential_rotate: false,
        last_heartbeat_at: None,
        volume_free_bytes: None,
        runtime: None,
        updated_at: n.created_at,
        ..n.clone()
    }
}

/// An order as the scheduler sees it: what the log follows, not output,
/// access or the end of its story.
fn order_view(o: &order::Model) -> order::Model {
    order::Model {
        failure_reason: None,
        access: None,
        exit_code: None,
        log_bytes: 0,
        ended_at: None,
        updated_at: o.created_at,
        ..o.clone()
    }
}

/// An allocation as the scheduler sees it: metering and outcome left out.
fn allocation_view(a: &allocation::Model) -> allocation::Model {
    allocation::Model {
        released_at: None,
        running_since: None,
        down_from: None,
        metered_until: None,
        exit_code: None,
        outcome: None,
        stop_cause: None,
        ..a.clone()
    }
}
