//! The capacity report: per GPU model, what exists, what is held, what is
//! free, and how much of the free capacity can actually host each job shape,
//! so operators see fragmentation.

use std::collections::{BTreeMap, BTreeSet};

use crate::policy::Policy;
use crate::schedule::{Snapshot, prepared};
use crate::state::{NodeState, Room, State, View, WHOLE, bits};
use crate::workload::{GpuRequest, Workload};

/// Single-node shapes the report counts slots for.
pub const SHAPES: [u32; 4] = [1, 2, 4, 8];

/// How many workloads of one shape could start now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShapeSlots {
    /// GPUs on one node.
    pub gpus_per_node: u32,
    /// Workloads of that shape that fit side by side in the free capacity.
    pub slots: u32,
}

/// Capacity of one GPU model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelCapacity {
    /// The GPU model.
    pub model: String,
    /// Every GPU of the model.
    pub total: u32,
    /// GPUs not marked unhealthy.
    pub healthy: u32,
    /// GPUs held, whole or in part, by running work.
    pub allocated: u32,
    /// Healthy, unheld GPUs on schedulable nodes.
    pub free: u32,
    /// Slots per single-node shape.
    pub shapes: Vec<ShapeSlots>,
    /// Schedulable nodes with every GPU free: how many nodes an N-node gang
    /// of whole nodes could have now.
    pub whole_free_nodes: u32,
    /// Share of free GPUs, in thousandths, that cannot serve a request for a
    /// whole node of the model's largest size: 0 when free capacity is in
    /// whole nodes, 1000 when none of it is.
    pub fragmentation_permille: u32,
}

/// The capacity of the cluster, one entry per GPU model, by model name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CapacityReport {
    /// Per model, ordered by name.
    pub models: Vec<ModelCapacity>,
}

/// Reports the capacity running work leaves free in the snapshot's cluster.
pub fn capacity_report(snapshot: &Snapshot<'_>) -> CapacityReport {
    let policy = Policy::default();
    let cycle = prepared(snapshot, &policy);
    report(cycle.state(), |_| true)
}

/// [`capacity_report`], and the same for each region by region name (what
/// monitoring shows per region and model), from one preparation of the
/// snapshot.
pub fn capacity_reports(
    snapshot: &Snapshot<'_>,
) -> (CapacityReport, BTreeMap<String, CapacityReport>) {
    let policy = Policy::default();
    let cycle = prepared(snapshot, &policy);
    let state = cycle.state();
    (report(state, |_| true), by_region(state))
}

fn by_region(state: &State<'_>) -> BTreeMap<String, CapacityReport> {
    let regions: BTreeSet<&str> = state.nodes.iter().map(|n| n.node.region.as_str()).collect();
    regions
        .into_iter()
        .map(|region| {
            (
                region.to_owned(),
                report(state, |node| node.node.region == region),
            )
        })
        .collect()
}

fn report(state: &State<'_>, keep: impl Fn(&NodeState<'_>) -> bool) -> CapacityReport {
    let mut models: BTreeMap<&str, ModelCapacity> = BTreeMap::new();
    let mut largest: BTreeMap<&str, u32> = BTreeMap::new();
    let mut free_per_node: BTreeMap<&str, Vec<(u32, u32)>> = BTreeMap::new();
    for node in state.nodes.iter().filter(|n| keep(n)) {
        let mut sizes: BTreeMap<u32, u32> = BTreeMap::new();
        for gpu in &node.gpus {
            let name = state.models.name(gpu.model);
            let entry = models.entry(name).or_insert_with(|| empty(name));
            entry.total += 1;
            entry.healthy += u32::from(gpu.healthy);
            entry.allocated += u32::from(gpu.used > 0);
            *sizes.entry(gpu.model).or_default() += 1;
        }
        for (model, size) in sizes {
            let name = state.models.name(model);
            let biggest = largest.entry(name).or_default();
            *biggest = (*biggest).max(size);
            if node.node.schedulable {
                let free = bits(node.free_whole & node.model_mask(model));
                free_per_node.entry(name).or_default().push((size, free));
            }
        }
    }
    for (model, entry) in &mut models {
        let nodes = free_per_node
            .get(model)
            .map(Vec::as_slice)
            .unwrap_or_default();
        entry.free = nodes.iter().map(|(_, free)| free).sum();
        entry.shapes = SHAPES
            .iter()
            .map(|shape| ShapeSlots {
                gpus_per_node: *shape,
                slots: nodes.iter().map(|(_, free)| free / shape).sum(),
            })
            .collect();
        entry.whole_free_nodes = u32::try_from(
            nodes
                .iter()
                .filter(|(size, free)| free == size && *size > 0)
                .count(),
        )
        .unwrap_or(u32::MAX);
        let whole = largest.get(model).copied().unwrap_or(1).max(1);
        let usable: u32 = nodes.iter().map(|(_, free)| free / whole * whole).sum();
        entry.fragmentation_permille = (usable * 1000)
            .checked_div(entry.free)
            .map_or(0, |whole_share| 1000 - whole_share);
    }
    CapacityReport {
        models: models.into_values().collect(),
    }
}

fn empty(model: &str) -> ModelCapacity {
    ModelCapacity {
        model: model.to_owned(),
        total: 0,
        healthy: 0,
        allocated: 0,
        free: 0,
        shapes: Vec::new(),
        whole_free_nodes: 0,
        fragmentation_permille: 0,
    }
}

/// The on-demand shape a tenant is about to launch: GPUs of one model, CPU
/// in thousandths of a core and memory in MiB on one node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LaunchShape {
    pub model: String,
    pub gpus: GpuRequest,
    pub cpu_milli: u64,
    pub memory_mib: u64,
}

/// What a launch of one shape would meet in one region now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionRoom {
    /// The region's name.
    pub region: String,
    /// Instances of the shape that could start side by side now and keep
    /// running: free GPUs, CPU and memory on schedulable nodes, less what
    /// advance reservations hold now or later. Fractions count on free
    /// GPUs and on what shared GPUs have left, MIG instances on the free
    /// slices of MIG GPUs laid out for their size; `None` for work without
    /// GPUs, which is not counted.
    pub instances: Option<u32>,
    /// GPUs of the model that waiting work may take in the region: what a
    /// launch that does not fit now may queue behind.
    pub waiting_gpus: u32,
}

/// How many instances asking for `gpus` the node's GPUs of `model` take
/// side by side, within `room`.
fn by_gpus(node: &NodeState<'_>, model: u32, room: &Room, gpus: GpuRequest) -> u32 {
    let open = node
        .gpus
        .iter()
        .enumerate()
        .filter(|(position, gpu)| {
            gpu.model == model && gpu.healthy && room.held & (1 << position) == 0
        })
        .map(|(_, gpu)| gpu);
    match gpus {
        GpuRequest::Whole(0) => 0,
        GpuRequest::Whole(k) => bits(room.mask) / k,
        GpuRequest::Milli(milli) => {
            let milli = milli.clamp(1, u32::from(WHOLE));
            let shared: u32 = open
                .filter(|gpu| gpu.mig_slices.is_none() && gpu.used > 0 && gpu.used < WHOLE)
                .map(|gpu| u32::from(WHOLE - gpu.used) / milli)
                .sum();
            bits(room.mask) * (u32::from(WHOLE) / milli) + shared
        }
        GpuRequest::Mig(slices) if slices > 0 => open
            .filter(|gpu| {
                gpu.mig_slices.is_some()
                    && gpu.mig_instance_slices.is_none_or(|size| size == slices)
            })
            .map(|gpu| u32::from(gpu.capacity().saturating_sub(gpu.used) / u16::from(slices)))
            .sum(),
        GpuRequest::Mig(_) => 0,
    }
}

/// Per region holding the shape's GPU model, ordered by region name, what a
/// launch of `shape` would meet now.
pub fn launch_room(snapshot: &Snapshot<'_>, shape: &LaunchShape) -> Vec<RegionRoom> {
    let policy = Policy::default();
    let cycle = prepared(snapshot, &policy);
    launch_rooms(cycle.state(), snapshot.pending, std::slice::from_ref(shape))
        .pop()
        .unwrap_or_default()
}

/// What a cycle reports beside its decisions.
#[derive(Debug, Clone, Copy, Default)]
pub struct Asked<'a> {
    /// The fleet's capacity and each region's.
    pub capacity: bool,
    /// Launch shapes to find room for.
    pub launch: &'a [LaunchShape],
}

/// What a cycle reports, read off the state it prepared before placing
/// anything: one preparation serves the decisions and the reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reports {
    /// The fleet's capacity, and each region's by name, when asked.
    pub capacity: Option<(CapacityReport, BTreeMap<String, CapacityReport>)>,
    /// Per launch shape asked, in the order asked, [`launch_room`]'s answer.
    pub launch: Vec<Vec<RegionRoom>>,
}

pub(crate) fn reports(state: &State<'_>, pending: &[Workload], asked: &Asked<'_>) -> Reports {
    Reports {
        capacity: asked
            .capacity
            .then(|| (report(state, |_| true), by_region(state))),
        launch: if asked.launch.is_empty() {
            Vec::new()
        } else {
            launch_rooms(state, pending, asked.launch)
        },
    }
}

/// [`launch_room`] for each of `shapes`: each node's room is worked out
/// once per GPU model, and the waiting work summed once per model, so many
/// shapes cost about what one does.
fn launch_rooms(
    state: &State<'_>,
    pending: &[Workload],
    shapes: &[LaunchShape],
) -> Vec<Vec<RegionRoom>> {
    // Open-ended: an on-demand instance has no end, so a reservation that
    // starts later still takes its GPUs away.
    let view = View {
        from: state.now,
        until: None,
        reservation: None,
        tentative: false,
        binding: true,
    };
    let mut rooms: Vec<BTreeMap<&str, RegionRoom>> = vec![BTreeMap::new(); shapes.len()];
    let mut by_model: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (at, shape) in shapes.iter().enumerate() {
        by_model.entry(shape.model.as_str()).or_default().push(at);
    }
    for (name, asking) in &by_model {
        let Some(model) = state.models.get(name) else {
            continue;
        };
        for node in &state.nodes {
            if !node.has_model(model) {
                continue;
            }
            let room = node
                .node
                .schedulable
                .then(|| node.room(model, view, state.now));
            for &at in asking {
                let shape = &shapes[at];
                let counted = !matches!(shape.gpus, GpuRequest::Whole(0));
                let entry = rooms[at]
                    .entry(node.node.region.as_str())
                    .or_insert_with(|| RegionRoom {
                        region: node.node.region.clone(),
                        instances: counted.then_some(0),
                        waiting_gpus: 0,
                    });
                let (Some(instances), Some(room)) = (entry.instances.as_mut(), room.as_ref())
                else {
                    continue;
                };
                let by_resource = |free: u64, each: u64| {
                    free.checked_div(each)
                        .map_or(u32::MAX, |n| u32::try_from(n).unwrap_or(u32::MAX))
                };
                *instances = instances.saturating_add(
                    by_gpus(node, model, room, shape.gpus)
                        .min(by_resource(room.cpu, shape.cpu_milli))
                        .min(by_resource(room.mem, shape.memory_mib)),
                );
            }
        }
        // GPUs waiting for the model: anywhere, and per region named.
        let mut anywhere = 0u32;
        let mut named: BTreeMap<&str, u32> = BTreeMap::new();
        for work in pending {
            if !work.gpu_models.iter().any(|m| m == name) {
                continue;
            }
            let gpus = work.gpus.milli_per_node() * u64::from(work.node_count) / 1000;
            let gpus = u32::try_from(gpus).unwrap_or(u32::MAX);
            if work.regions.is_empty() {
                anywhere = anywhere.saturating_add(gpus);
            } else {
                let regions: BTreeSet<&str> = work.regions.iter().map(String::as_str).collect();
                for region in regions {
                    let sum = named.entry(region).or_default();
                    *sum = sum.saturating_add(gpus);
                }
            }
        }
        for &at in asking {
            for (region, room) in &mut rooms[at] {
                room.waiting_gpus =
                    anywhere.saturating_add(named.get(region).copied().unwrap_or(0));
            }
        }
    }
    rooms
        .into_iter()
        .map(|rooms| rooms.into_values().collect())
        .collect()
}
