//! Builds one scheduling cycle's engine snapshot from the rows the
//! scheduler plans with, keeping the ids that turn the engine's names back
//! into rows.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use chrono::{DateTime, Offset, TimeZone, Utc};
use gantry_scheduler as engine;
use sea_orm::{ConnectionTrait, DbErr};
use uuid::Uuid;

use crate::world::World;
use gantry_entities::{allocation, gpu, node, order, price, quota, region, reservation};
use gantry_types::classes::{AllocationState, NodeState, PricingClass};

/// The queue maintenance holds are made for; no workload is ever in it.
pub const MAINTENANCE_HOLDER: &str = "maintenance";

/// The snapshot and the lookups its decisions are written back with.
pub struct Loaded {
    pub snapshot: engine::OwnedSnapshot,
    /// Node ids by name, and each node's GPU ids by index.
    pub nodes: HashMap<String, (Uuid, HashMap<u32, Uuid>)>,
    /// The free MIG instances of each GPU in MIG mode, by GPU id, of the
    /// size the engine packs on it: a MIG start takes one of them.
    pub mig_free: HashMap<Uuid, Vec<String>>,
    /// Queued orders kept from the engine this cycle by a project or
    /// regional quota, or by jobs they wait for.
    pub held: Vec<crate::scoped::Held>,
    /// Queued jobs whose required dependency failed, with why; the loop
    /// fails them.
    pub broken: HashMap<Uuid, String>,
}

/// Reads everything and builds the engine's snapshot: for callers outside
/// the loop, which keeps its own copy.
pub async fn load(db: &impl ConnectionTrait, now: DateTime<Utc>) -> Result<Loaded, DbErr> {
    let world = World::load(db).await?;
    snapshot(&world, db, now).await
}

/// Builds the engine's snapshot whole from the leader's copy of the rows;
/// only job dependencies are read from the database.
pub async fn snapshot(
    world: &World,
    db: &impl ConnectionTrait,
    now: DateTime<Utc>,
) -> Result<Loaded, DbErr> {
    let gate = crate::gate::gate(db, world).await?;
    Ok(crate::input::Input::default()
        .prepare(world, None, gate, now)
        .0)
}

/// What turns the copy's ids into the engine's names in one cycle.
pub(crate) struct Names<'a> {
    pub(crate) world: &'a World,
    pub(crate) regions: HashMap<Uuid, String>,
    pub(crate) now: DateTime<Utc>,
}

impl<'a> Names<'a> {
    pub(crate) fn new(world: &'a World, now: DateTime<Utc>) -> Self {
        Self {
            world,
            regions: world
                .regions
                .values()
                .map(|r| (r.id, r.name.clone()))
                .collect(),
            now,
        }
    }

    pub(crate) fn model(&self, id: &Uuid) -> String {
        self.world
            .gpu_models
            .get(id)
            .map(|m| m.name.clone())
            .unwrap_or_default()
    }

    pub(crate) fn node(&self, id: &Uuid) -> Option<&'a str> {
        self.world.nodes.get(id).map(|n| n.name.as_str())
    }

    /// The engine's regions, by name.
    pub(crate) fn engine_regions(&self) -> Vec<engine::Region> {
        let mut rows: Vec<&region::Model> = self.world.regions.values().collect();
        rows.sort_by(|a, b| a.name.cmp(&b.name));
        let prices: Vec<&price::Model> = self
            .world
            .prices
            .values()
            .filter(|p| p.pricing_class == PricingClass::OnDemand && p.effective_from <= self.now)
            .collect();
        rows.iter()
            .map(|r| engine_region(r, &prices, self))
            .collect()
    }

    /// The engine's node for `n`, with its GPU ids by index; the free MIG
    /// instances of its GPUs go to `mig_free`.
    pub(crate) fn engine_node(
        &self,
        n: &node::Model,
        gpus: &mut [&gpu::Model],
        mig_held: &HashSet<&str>,
        mig_free: &mut HashMap<Uuid, Vec<String>>,
    ) -> (engine::Node, HashMap<u32, Uuid>) {
        gpus.sort_by_key(|g| g.index);
        let indices = gpus
            .iter()
            .map(|g| (u32::try_from(g.index).unwrap_or(u32::MAX), g.id))
            .collect();
        let node = engine::Node {
            name: n.name.clone(),
            region: self.regions.get(&n.region_id).cloned().unwrap_or_default(),
            rack: n.rack.clone(),
            labels: {
                let mut labels =
                    serde_json::from_str::<BTreeSet<String>>(&n.labels).unwrap_or_default();
                labels.insert(node_label(&n.name));
                labels
            },
            cpu_milli: u64::try_from(n.cpu_milli).unwrap_or(0),
            memory_mib: u64::try_from(n.memory_mib).unwrap_or(0),
            schedulable: n.state == NodeState::Ready,
            gpus: gpus
                .iter()
                .map(|g| {
                    let layout = mig(g, mig_held, mig_free);
                    engine::Gpu {
                        index: u32::try_from(g.index).unwrap_or(u32::MAX),
                        model: self.model(&g.gpu_model_id),
                        nvlink_domain: u32::try_from(g.nvlink_domain).unwrap_or(0),
                        // A GPU in MIG mode without instances serves nothing
                        // until its agent reports some; one held by work
                        // Gantry did not place serves nothing of Gantry's.
                        healthy: g.healthy
                            && !g.held_outside
                            && n.state != NodeState::Unhealthy
                            && (!g.mig_enabled || layout.is_some()),
                        mig_slices: layout.map(|(slices, _)| slices),
                        mig_instance_slices: layout.map(|(_, size)| size),
                    }
                })
                .collect(),
        };
        (node, indices)
    }

    /// The running entry of order `o` from its allocations, in id order.
    pub(crate) fn running(
        &self,
        o: &order::Model,
        allocations: &[&allocation::Model],
    ) -> Option<engine::Running> {
        let first = allocations.first()?;
        let mut entry = engine::Running {
            workload: self.workload(o),
            placements: Vec::with_capacity(allocations.len()),
            started_at: o.started_at.unwrap_or(first.created_at).timestamp(),
            last_checkpoint_at: None,
            stopping_at: None,
        };
        for a in allocations {
            if let Some(stop_at) = a.stop_at.filter(|_| a.state == AllocationState::Stopping) {
                entry.stopping_at = Some(stop_at.timestamp());
            }
            entry.placements.push(engine::Placement {
                node: self.node(&a.node_id).unwrap_or_default().to_owned(),
                gpus: a.gpu_list(),
            });
        }
        Some(entry)
    }

    pub(crate) fn workload(&self, o: &order::Model) -> engine::Workload {
        let (cpu, memory) =
            self.world
                .instance_types
                .get(&o.instance_type_id)
                .map_or((0, 0), |t| {
                    (
                        u64::try_from(t.vcpus).unwrap_or(0) * 1000,
                        u64::try_from(t.memory_gib).unwrap_or(0) * 1024,
                    )
                });
        // Work in a reservation ends with its window, so it is planned to:
        // its GPUs are free for whoever holds them next.
        let reservation = o
            .reservation_id
            .and_then(|id| self.world.reservations.get(&id));
        let duration_estimate = match reservation {
            Some(r) => {
                let begins = o.started_at.unwrap_or(self.now).max(r.starts_at);
                let left = (r.ends_at - begins).num_seconds().max(1);
                Some(o.duration_seconds.map_or(left, |d| d.min(left)))
            }
            None => o.duration_seconds,
        };
        engine::Workload {
            id: o.id.to_string(),
            queue: o.org_id.to_string(),
            gpu_models: vec![self.model(&o.gpu_model_id)],
            gpus: gantry_core::catalog::shares::GpuShape::of_order(o).request(),
            node_count: u32::try_from(o.node_count).unwrap_or(1),
            cpu_milli_per_node: cpu,
            memory_mib_per_node: memory,
            priority: o.priority_class.into(),
            class: o.workload_class.into(),
            submitted_at: o.created_at.timestamp(),
            duration_estimate,
            deadline: o.deadline.map(|d| d.timestamp()),
            earliest_start: None,
            min_runtime: 0,
            checkpointable: o.checkpointable,
            regions: o
                .region_id
                .and_then(|r| self.regions.get(&r).cloned())
                .into_iter()
                .collect(),
            // An order pinned to a node (its local volumes live there) may
            // run only on it; a node that is gone leaves it nowhere to run,
            // which the engine says.
            required_labels: o
                .node_id
                .map(|id| {
                    self.node(&id)
                        .map_or_else(|| node_label(&id.to_string()), node_label)
                })
                .into_iter()
                .collect(),
            reservation: o.reservation_id.map(|id| id.to_string()),
        }
    }

    /// One queue per organization with quotas, and an unlimited one for
    /// every other organization in `orgs` (those with work).
    pub(crate) fn queues<'o>(&self, orgs: impl Iterator<Item = &'o Uuid>) -> Vec<engine::Queue> {
        let mut rows: Vec<&quota::Model> = self.world.quotas.values().collect();
        rows.sort_by_key(|q| q.id);
        let mut queues: BTreeMap<Uuid, engine::Queue> = BTreeMap::new();
        for q in rows
            .iter()
            .filter(|q| q.project_id.is_none() && q.region_id.is_none())
        {
            let queue = queues
                .entry(q.org_id)
                .or_insert_with(|| engine::Queue::new(&q.org_id.to_string()));
            queue.quotas.insert(
                self.model(&q.gpu_model_id),
                engine::Quota {
                    guaranteed: u32::try_from(q.guaranteed_gpus).unwrap_or(0),
                    borrow_limit: None,
                    max: q.max_gpus.map(|m| u32::try_from(m).unwrap_or(0)),
                },
            );
        }
        let unlimited: BTreeSet<String> = orgs
            .filter(|org| !queues.contains_key(org))
            .map(ToString::to_string)
            .collect();
        let mut queues: Vec<engine::Queue> = queues.into_values().collect();
        queues.extend(unlimited.iter().map(|org| engine::Queue::new(org)));
        queues
    }

    /// The confirmed reservations whose window is not over, with their
    /// GPUs, and the maintenance windows, each holding every GPU of its
    /// node.
    pub(crate) fn advance_reservations(
        &self,
        nodes: &HashMap<String, (Uuid, HashMap<u32, Uuid>)>,
    ) -> Vec<engine::AdvanceReservation> {
        let mut held = self.tenant_reservations();
        let mut windows: Vec<_> = self
            .world
            .maintenance
            .values()
            .filter(|m| m.ends_at > self.now)
            .collect();
        windows.sort_by_key(|m| m.id);
        for m in windows {
            let node = self.node(&m.node_id).unwrap_or_default();
            let mut gpus: Vec<u32> = nodes
                .get(node)
                .map(|(_, indices)| indices.keys().copied().collect())
                .unwrap_or_default();
            gpus.sort_unstable();
            held.push(engine::AdvanceReservation {
                id: format!("{} {}", MAINTENANCE_HOLDER, m.id),
                queue: MAINTENANCE_HOLDER.to_owned(),
                start: m.starts_at.timestamp(),
                end: m.ends_at.timestamp(),
                placements: vec![engine::Placement {
                    node: node.to_owned(),
                    gpus,
                }],
            });
        }
        held
    }

    fn tenant_reservations(&self) -> Vec<engine::AdvanceReservation> {
        let mut rows: Vec<&reservation::Model> = self
            .world
            .reservations
            .values()
            .filter(|r| r.ends_at > self.now)
            .collect();
        rows.sort_by_key(|r| r.id);
        rows.into_iter()
            .map(|r| engine::AdvanceReservation {
                id: r.id.to_string(),
                queue: r.org_id.to_string(),
                start: r.starts_at.timestamp(),
                end: r.ends_at.timestamp(),
                placements: self
                    .world
                    .reservation_nodes
                    .get(&r.id)
                    .into_iter()
                    .flatten()
                    .map(|held| engine::Placement {
                        node: self.node(&held.node_id).unwrap_or_default().to_owned(),
                        gpus: held.gpu_list(),
                    })
                    .collect(),
            })
            .collect()
    }
}

/// A GPU in MIG mode as the engine packs it: the slices of its instances
/// of one size, and that size; its free instances go to `free`.
fn mig(
    g: &gpu::Model,
    held: &HashSet<&str>,
    free: &mut HashMap<Uuid, Vec<String>>,
) -> Option<(u8, u8)> {
    if !g.mig_enabled {
        return None;
    }
    let devices = gantry_core::catalog::shares::mig_devices(g.mig_devices.as_deref());
    let (size, chosen) = gantry_core::catalog::shares::mig_layout(&devices)?;
    let count = u8::try_from(chosen.len()).unwrap_or(0);
    free.insert(
        g.id,
        chosen
            .iter()
            .filter(|d| !held.contains(d.uuid.as_str()))
            .map(|d| d.uuid.clone())
            .collect(),
    );
    Some((count.saturating_mul(size), size))
}

fn engine_region(
    row: &region::Model,
    prices: &[&price::Model],
    names: &Names<'_>,
) -> engine::Region {
    let now = names.now;
    let utc_offset_minutes = row
        .time_zone
        .parse::<chrono_tz::Tz>()
        .map(|tz| {
            tz.offset_from_utc_datetime(&now.naive_utc())
                .fix()
                .local_minus_utc()
                / 60
        })
        .unwrap_or(0);
    let off_peak = match (
        row.off_peak_start_hour,
        row.off_peak_end_hour,
        row.off_peak_multiplier_permille,
    ) {
        (Some(start), Some(end), Some(permille)) => Some(engine::OffPeak {
            start_minute: u32::try_from(start).unwrap_or(0) * 60,
            end_minute: u32::try_from(end).unwrap_or(0) * 60,
            price_permille: u32::try_from(permille).unwrap_or(1000),
        }),
        _ => None,
    };
    // The cheapest on-demand GPU-hour per model here, for time-aware
    // placement of flexible work.
    let mut gpu_hour_micros: BTreeMap<String, u64> = BTreeMap::new();
    for p in prices
        .iter()
        .filter(|p| p.region_id.is_none_or(|r| r == row.id))
    {
        let Some(t) = names.world.instance_types.get(&p.instance_type_id) else {
            continue;
        };
        let per_gpu = u64::try_from(p.hourly_micros).unwrap_or(0)
            / u64::try_from(t.gpus_per_node.max(1)).unwrap_or(1);
        let entry = gpu_hour_micros
            .entry(names.model(&t.gpu_model_id))
            .or_insert(per_gpu);
        *entry = (*entry).min(per_gpu);
    }
    engine::Region {
        name: row.name.clone(),
        utc_offset_minutes,
        off_peak,
        gpu_hour_micros,
    }
}

/// The label every node carries with its own name: labels an operator
/// gives have no `:`, so none can pose as it.
pub fn node_label(name: &str) -> String {
    format!("node:{name}")
}
