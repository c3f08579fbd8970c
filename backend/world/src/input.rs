//! The engine's input kept from one cycle to the next. A cycle used to
//! build the engine's nodes, running work and waiting work from every row
//! of the leader's copy; with 100,000 waiting orders that cost more than
//! the engine's own decision. Now the rows the change log named since the
//! last cycle are built again and put in place, so a cycle costs what
//! changed, not what is there.
//!
//! What stays whole: the catalog, regions, queues and advance reservations
//! (a few rows, built every cycle because they follow the clock), orders in
//! a reservation (whose planned length follows the clock), and everything
//! after a full read of the copy, a catalog change or a node that came,
//! went or was renamed (node names are in every workload's labels).

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{DateTime, Utc};
use gantry_scheduler as engine;
use uuid::Uuid;

use gantry_entities::{allocation, gpu, node};
use gantry_types::classes::OrderStatus;

use crate::gate::Gate;
use crate::load::{Loaded, Names};
use crate::world::{Changed, World};

/// Below this many rows to drop and add, a sorted list is patched one row
/// at a time; above it, in one pass.
const ONE_BY_ONE: usize = 8;

/// What changed in the input since the last cycle, as the loop decides
/// whether the last cycle's plan still holds for everything but new work.
#[derive(Debug, Default)]
pub struct Delta {
    /// Waiting work that was not waiting last cycle, sorted by id.
    pub arrived: Vec<String>,
    /// Something else changed that could open room or change who goes
    /// first: the input was built whole, a node, regions, queues or advance
    /// reservations changed, running work changed or ended, or waiting work
    /// changed or left without starting.
    pub unsettled: bool,
}

/// The engine's input between cycles: what was built, and what tells which
/// parts to build again.
#[derive(Default)]
pub struct Input {
    /// The last cycle's input, given back after the cycle.
    kept: Option<Loaded>,
    book: Book,
}

/// What the kept input was built from.
#[derive(Default)]
struct Book {
    /// Each node's position in the cluster's list, and its name and region
    /// then.
    position: HashMap<Uuid, (usize, String, Uuid)>,
    /// Orders the last cycle's dependency gate or narrow quotas removed or
    /// narrowed: they are built again.
    altered: HashSet<Uuid>,
    /// Orders in a reservation: their planned length follows the clock.
    timed: HashSet<Uuid>,
    /// The organization of each order in the copy, and how many each has.
    org_of: HashMap<Uuid, Uuid>,
    orgs: BTreeMap<Uuid, usize>,
}

impl Input {
    /// The engine's input for this cycle: the kept one with the rows in
    /// `changed` built again, or all of it built when nothing is kept or
    /// `changed` cannot tell (`None`). Jobs the gate holds and orders over
    /// a narrow quota are taken out or narrowed.
    pub fn prepare(
        &mut self,
        world: &World,
        changed: Option<&Changed>,
        gate: Gate,
        now: DateTime<Utc>,
    ) -> (Loaded, Delta) {
        let names = Names::new(world, now);
        let (mut loaded, before) = match (self.kept.take(), changed) {
            (Some(mut kept), Some(changed)) if !changed.catalog => {
                match self.patch(&mut kept, &names, changed) {
                    Some(before) => (kept, Some(before)),
                    None => (self.build(&names), None),
                }
            }
            _ => (self.build(&names), None),
        };
        let snapshot = &mut loaded.snapshot;
        let mut unsettled = before.is_none();
        snapshot.now = now.timestamp();
        unsettled |= replace(&mut snapshot.cluster.regions, names.engine_regions());
        let queues = names.queues(self.book.orgs.keys());
        unsettled |= !only_added(&snapshot.queues, &queues);
        snapshot.queues = queues;
        unsettled |= replace(
            &mut snapshot.reservations,
            names.advance_reservations(&loaded.nodes),
        );
        self.book.altered = self.hold_back(&mut loaded, world, &names, gate);
        let delta = match before {
            Some(before) => before.delta(&loaded.snapshot, unsettled),
            None => Delta {
                arrived: Vec::new(),
                unsettled: true,
            },
        };
        (loaded, delta)
    }

    /// Keeps the cycle's input for the next `prepare`.
    pub fn keep(&mut self, loaded: Loaded) {
        self.kept = Some(loaded);
    }

    /// Forgets the kept input: the next `prepare` builds it whole.
    pub fn forget(&mut self) {
        self.kept = None;
    }

    /// Builds the input whole.
    fn build(&mut self, names: &Names<'_>) -> Loaded {
        let world = names.world;
        let mut node_rows: Vec<&node::Model> = world.nodes.values().collect();
        // Sorted, so the engine sees the same cluster in the same order
        // every cycle and on every replica.
        node_rows.sort_by(|a, b| a.name.cmp(&b.name).then(a.id.cmp(&b.id)));
        let mut gpus_by_node: HashMap<Uuid, Vec<&gpu::Model>> = HashMap::new();
        for g in world.gpus.values() {
            gpus_by_node.entry(g.node_id).or_default().push(g);
        }
        let mig_held = mig_held(world.allocations.values());
        let mut mig_free = HashMap::new();
        let mut nodes = HashMap::new();
        let mut cluster_nodes = Vec::with_capacity(node_rows.len());
        self.book.position.clear();
        for (at, n) in node_rows.iter().enumerate() {
            let mut gpus = gpus_by_node.remove(&n.id).unwrap_or_default();
            let (node, indices) = names.engine_node(n, &mut gpus, &mig_held, &mut mig_free);
            nodes.insert(n.name.clone(), (n.id, indices));
            cluster_nodes.push(node);
            self.book
                .position
                .insert(n.id, (at, n.name.clone(), n.region_id));
        }
        let mut by_order: BTreeMap<Uuid, Vec<&allocation::Model>> = BTreeMap::new();
        for a in world.allocations.values() {
            by_order.entry(a.order_id).or_default().push(a);
        }
        let running = by_order
            .into_iter()
            .filter_map(|(id, mut allocations)| {
                allocations.sort_by_key(|a| a.id);
                names.running(world.orders.get(&id)?, &allocations)
            })
            .collect();
        let mut pending: Vec<engine::Workload> = world
            .orders
            .values()
            .filter(|o| o.status == OrderStatus::Queued)
            .map(|o| names.workload(o))
            .collect();
        pending.sort_by(|a, b| a.id.cmp(&b.id));
        self.book.timed = world
            .orders
            .values()
            .filter(|o| o.reservation_id.is_some())
            .map(|o| o.id)
            .collect();
        self.book.org_of = world.orders.values().map(|o| (o.id, o.org_id)).collect();
        self.book.orgs.clear();
        for org in self.book.org_of.values() {
            *self.book.orgs.entry(*org).or_default() += 1;
        }
        Loaded {
            snapshot: engine::OwnedSnapshot {
                cluster: engine::Cluster {
                    nodes: cluster_nodes,
                    regions: Vec::new(),
                },
                running,
                pending,
                ..engine::OwnedSnapshot::default()
            },
            nodes,
            mig_free,
            held: Vec::new(),
            broken: HashMap::new(),
        }
    }

    /// Builds again what `changed` names in `kept`, and answers what the
    /// rows built again were before; `None` when a node came, went or was
    /// renamed or moved, which only a whole build handles.
    fn patch(&mut self, kept: &mut Loaded, names: &Names<'_>, changed: &Changed) -> Option<Before> {
        let world = names.world;
        let reshaped = changed.nodes.iter().any(|id| {
            match (world.nodes.get(id), self.book.position.get(id)) {
                (Some(n), Some((_, name, region))) => n.name != *name || n.region_id != *region,
                (None, None) => false,
                _ => true,
            }
        });
        if reshaped {
            return None;
        }
        let mut before = Before {
            nodes_changed: self.patch_nodes(kept, names, &changed.nodes),
            ..Before::default()
        };
        for id in &changed.orders {
            if let Some(org) = self.book.org_of.remove(id) {
                self.book.orgs.entry(org).and_modify(|n| *n -= 1);
            }
            self.book.timed.remove(id);
            if let Some(o) = world.orders.get(id) {
                self.book.org_of.insert(o.id, o.org_id);
                *self.book.orgs.entry(o.org_id).or_default() += 1;
                if o.reservation_id.is_some() {
                    self.book.timed.insert(o.id);
                }
            }
        }
        self.book.orgs.retain(|_, n| *n > 0);
        let dirty: HashSet<Uuid> = changed
            .orders
            .iter()
            .chain(&self.book.altered)
            .chain(&self.book.timed)
            .copied()
            .collect();
        if dirty.is_empty() {
            return Some(before);
        }
        let snapshot = &mut kept.snapshot;
        let ids: Vec<String> = dirty.iter().map(ToString::to_string).collect();
        for id in &ids {
            if let Ok(at) = snapshot.pending.binary_search_by(|w| w.id.cmp(id)) {
                before
                    .waiting
                    .insert(id.clone(), snapshot.pending[at].clone());
            }
            if let Ok(at) = snapshot.running.binary_search_by(|r| r.workload.id.cmp(id)) {
                before
                    .running
                    .insert(id.clone(), snapshot.running[at].clone());
            }
        }
        let mut added: Vec<engine::Workload> = dirty
            .iter()
            .filter_map(|id| world.orders.get(id))
            .filter(|o| o.status == OrderStatus::Queued)
            .map(|o| names.workload(o))
            .collect();
        added.sort_by(|a, b| a.id.cmp(&b.id));
        replace_sorted(&mut snapshot.pending, |w| &w.id, &ids, added);
        // Only orders past the queue hold allocations; a cycle that saw
        // only arrivals reads none.
        let holding: HashSet<Uuid> = dirty
            .iter()
            .copied()
            .filter(|id| {
                world
                    .orders
                    .get(id)
                    .is_some_and(|o| o.status != OrderStatus::Queued)
            })
            .collect();
        let mut by_order: BTreeMap<Uuid, Vec<&allocation::Model>> = BTreeMap::new();
        if !holding.is_empty() {
            for a in world.allocations.values() {
                if holding.contains(&a.order_id) {
                    by_order.entry(a.order_id).or_default().push(a);
                }
            }
        }
        let running: Vec<engine::Running> = by_order
            .into_iter()
            .filter_map(|(id, mut allocations)| {
                allocations.sort_by_key(|a| a.id);
                names.running(world.orders.get(&id)?, &allocations)
            })
            .collect();
        replace_sorted(&mut snapshot.running, |r| &r.workload.id, &ids, running);
        before.dirty = ids;
        Some(before)
    }

    /// Builds the nodes `ids` again in place: their GPUs and free MIG
    /// instances; answers whether the engine's view of any changed.
    fn patch_nodes(&self, kept: &mut Loaded, names: &Names<'_>, ids: &HashSet<Uuid>) -> bool {
        let world = names.world;
        let present: Vec<&node::Model> = ids.iter().filter_map(|id| world.nodes.get(id)).collect();
        let mut changed = false;
        if present.is_empty() {
            return changed;
        }
        let mut gpus_by_node: HashMap<Uuid, Vec<&gpu::Model>> = HashMap::new();
        for g in world.gpus.values().filter(|g| ids.contains(&g.node_id)) {
            gpus_by_node.entry(g.node_id).or_default().push(g);
        }
        let mig_held = mig_held(
            world
                .allocations
                .values()
                .filter(|a| ids.contains(&a.node_id)),
        );
        for n in present {
            if let Some((_, indices)) = kept.nodes.get(&n.name) {
                for gpu in indices.values() {
                    kept.mig_free.remove(gpu);
                }
            }
            let mut gpus = gpus_by_node.remove(&n.id).unwrap_or_default();
            let (node, indices) = names.engine_node(n, &mut gpus, &mig_held, &mut kept.mig_free);
            kept.nodes.insert(n.name.clone(), (n.id, indices));
            if let Some(slot) = self
                .book
                .position
                .get(&n.id)
                .and_then(|(at, _, _)| kept.snapshot.cluster.nodes.get_mut(*at))
            {
                changed |= *slot != node;
                *slot = node;
            }
        }
        changed
    }

    /// Takes jobs the gate holds and orders over a narrow quota out of the
    /// waiting work, and narrows the regions of others; returns every order
    /// so touched, for the next cycle to build again.
    fn hold_back(
        &self,
        loaded: &mut Loaded,
        world: &World,
        names: &Names<'_>,
        gate: Gate,
    ) -> HashSet<Uuid> {
        let gated: Vec<String> = gate
            .blocked
            .keys()
            .chain(gate.broken.keys())
            .map(ToString::to_string)
            .collect();
        replace_sorted(&mut loaded.snapshot.pending, |w| &w.id, &gated, Vec::new());
        let mut altered: HashSet<Uuid> = gate
            .blocked
            .keys()
            .chain(gate.broken.keys())
            .copied()
            .collect();
        let narrow = crate::scoped::hold_back(
            &mut loaded.snapshot.pending,
            &world.orders,
            &world.quotas,
            || {
                let mut used: crate::scoped::Use = HashMap::new();
                for a in world.allocations.values() {
                    if let (Some(o), Some(n)) =
                        (world.orders.get(&a.order_id), world.nodes.get(&a.node_id))
                    {
                        *used
                            .entry((o.org_id, o.gpu_model_id, n.region_id, o.project_id))
                            .or_default() += a.gpu_count();
                    }
                }
                used
            },
            &names.regions,
        );
        altered.extend(narrow.held.iter().map(|h| h.order_id));
        altered.extend(narrow.narrowed);
        loaded.held = narrow.held;
        loaded.held.extend(gate.blocked.into_values());
        loaded.broken = gate.broken;
        altered
    }
}

/// The rows a patch built again, as they were before it.
#[derive(Default)]
struct Before {
    nodes_changed: bool,
    /// The orders built again, and the waiting and running entries each
    /// had.
    dirty: Vec<String>,
    waiting: HashMap<String, engine::Workload>,
    running: HashMap<String, engine::Running>,
}

impl Before {
    /// What changed between the kept input and `now`.
    fn delta(self, now: &engine::OwnedSnapshot, mut unsettled: bool) -> Delta {
        unsettled |= self.nodes_changed;
        let find = |id: &str| {
            now.pending
                .binary_search_by(|w| w.id.as_str().cmp(id))
                .ok()
                .map(|at| &now.pending[at])
        };
        let running = |id: &str| {
            now.running
                .binary_search_by(|r| r.workload.id.as_str().cmp(id))
                .ok()
                .map(|at| &now.running[at])
        };
        // Only orders built again can have arrived: the rest of the waiting
        // work is what it was, less what the gate and quotas hold.
        let mut arrived = Vec::new();
        for id in &self.dirty {
            let (was, is) = (self.running.get(id), running(id));
            // A start is the plan carried out; running work that moves,
            // stops or ends may open room.
            unsettled |= match (was, is) {
                (Some(was), Some(now)) => {
                    was.placements != now.placements || was.stopping_at != now.stopping_at
                }
                (Some(_), None) => true,
                _ => false,
            };
            match (self.waiting.get(id), find(id)) {
                (Some(was), Some(now)) => unsettled |= !alike(was, now),
                (Some(_), None) => unsettled |= is.is_none(),
                (None, Some(_)) => arrived.push(id.clone()),
                (None, None) => {}
            }
        }
        arrived.sort();
        Delta { arrived, unsettled }
    }
}

/// Whether two builds of one waiting workload differ at most in its
/// estimated length, which follows the clock inside a reservation.
fn alike(a: &engine::Workload, b: &engine::Workload) -> bool {
    engine::Workload {
        duration_estimate: b.duration_estimate,
        ..a.clone()
    } == *b
}

/// Whether `now` is `was` with only unlimited queues added: a tenant's
/// first order brings its queue, which changes nothing for the rest.
fn only_added(was: &[engine::Queue], now: &[engine::Queue]) -> bool {
    let before: HashMap<&str, &engine::Queue> = was.iter().map(|q| (q.name.as_str(), q)).collect();
    let kept = now
        .iter()
        .filter(|q| before.contains_key(q.name.as_str()))
        .count();
    kept == was.len()
        && now.iter().all(|q| match before.get(q.name.as_str()) {
            Some(old) => *old == q,
            None => *q == engine::Queue::new(&q.name),
        })
}

/// Puts `new` in `slot`; answers whether it differs from what was there.
fn replace<T: PartialEq>(slot: &mut T, new: T) -> bool {
    let differs = *slot != new;
    *slot = new;
    differs
}

/// The MIG instances the allocations hold.
fn mig_held<'a>(allocations: impl Iterator<Item = &'a allocation::Model>) -> HashSet<&'a str> {
    allocations
        .filter_map(|a| a.mig_device.as_deref())
        .collect()
}

/// Drops the items of `items` (sorted by `id`) whose id is in `drop` and
/// puts `add` (sorted) in, keeping the order.
fn replace_sorted<T>(items: &mut Vec<T>, id: impl Fn(&T) -> &String, drop: &[String], add: Vec<T>) {
    if drop.len() + add.len() <= ONE_BY_ONE {
        for gone in drop {
            if let Ok(at) = items.binary_search_by(|item| id(item).cmp(gone)) {
                items.remove(at);
            }
        }
        for item in add {
            let at = items
                .binary_search_by(|kept| id(kept).cmp(id(&item)))
                .unwrap_or_else(|at| at);
            items.insert(at, item);
        }
        return;
    }
    let mut gone: Vec<usize> = drop
        .iter()
        .filter_map(|key| items.binary_search_by(|item| id(item).cmp(key)).ok())
        .collect();
    gone.sort_unstable();
    let mut at = 0;
    let mut next = gone.iter().peekable();
    items.retain(|_| {
        let keep = next.peek().is_none_or(|&&g| g != at);
        if !keep {
            next.next();
        }
        at += 1;
        keep
    });
    if add.is_empty() {
        return;
    }
    // Two sorted runs: the stable sort merges them in one pass.
    items.extend(add);
    items.sort_by(|a, b| id(a).cmp(id(b)));
}

/// The parts in which two inputs differ, by name; none when equal.
pub fn differences(kept: &Loaded, whole: &Loaded) -> Vec<&'static str> {
    let (a, b) = (&kept.snapshot, &whole.snapshot);
    [
        ("nodes", a.cluster.nodes == b.cluster.nodes),
        ("regions", a.cluster.regions == b.cluster.regions),
        ("queues", a.queues == b.queues),
        ("running", a.running == b.running),
        ("pending", a.pending == b.pending),
        ("reservations", a.reservations == b.reservations),
        ("node ids", kept.nodes == whole.nodes),
        ("free MIG instances", kept.mig_free == whole.mig_free),
        (
            "held",
            kept.held.iter().map(|h| h.order_id).collect::<HashSet<_>>()
                == whole.held.iter().map(|h| h.order_id).collect(),
        ),
    ]
    .into_iter()
    .filter(|(_, same)| !same)
    .map(|(part, _)| part)
    .collect()
}

#[cfg(test)]
mod tests;
