//! The cluster as one cycle sees it: every node's GPUs, what holds them and
//! until when, and indexes of free capacity by GPU model, region and free
//! count, so that placing a workload looks at a handful of nodes instead of
//! all of them.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::cluster::{Cluster, MAX_GPUS_PER_NODE, Node};

/// Hash maps keyed by the cycle's small ids: a fast hash with a fixed seed,
/// so nothing depends on a random state.
pub(crate) type FastMap<K, V> = HashMap<K, V, foldhash::fast::FixedState>;

/// The set form of [`FastMap`].
pub(crate) type FastSet<K> = std::collections::HashSet<K, foldhash::fast::FixedState>;

/// One bit per GPU position on a node.
pub(crate) type Mask = u64;

/// The model id of CPU-only work, which uses no GPU.
pub(crate) const NO_MODEL: u32 = u32::MAX;

/// Thousandths of a GPU in a whole GPU.
pub(crate) const WHOLE: u16 = 1000;

pub(crate) fn bits(mask: Mask) -> u32 {
    mask.count_ones()
}

/// The lowest `count` set bits of `mask`.
pub(crate) fn lowest(mask: Mask, count: u32) -> Mask {
    let mut left = mask;
    let mut taken = 0;
    for _ in 0..count {
        let bit = left & left.wrapping_neg();
        taken |= bit;
        left &= !bit;
    }
    taken
}

/// Small dense ids for the names a cycle compares often.
#[derive(Default)]
pub(crate) struct Names<'a> {
    ids: FastMap<&'a str, u32>,
    pub(crate) names: Vec<&'a str>,
}

impl<'a> Names<'a> {
    pub(crate) fn intern(&mut self, name: &'a str) -> u32 {
        if let Some(id) = self.ids.get(name) {
            return *id;
        }
        let id = u32::try_from(self.names.len()).unwrap_or(u32::MAX);
        self.ids.insert(name, id);
        self.names.push(name);
        id
    }

    pub(crate) fn get(&self, name: &str) -> Option<u32> {
        self.ids.get(name).copied()
    }

    pub(crate) fn name(&self, id: u32) -> &'a str {
        self.names.get(id as usize).copied().unwrap_or_default()
    }
}

/// One GPU position on a node.
pub(crate) struct GpuSlot {
    pub(crate) index: u32,
    pub(crate) model: u32,
    pub(crate) healthy: bool,
    pub(crate) mig_slices: Option<u8>,
    /// The size every MIG instance on it has, when they are alike.
    pub(crate) mig_instance_slices: Option<u8>,
    /// Thousandths held on a shared GPU (`WHOLE` when held whole), or MIG
    /// slices held on a MIG GPU.
    pub(crate) used: u16,
}

impl GpuSlot {
    pub(crate) fn capacity(&self) -> u16 {
        self.mig_slices.map_or(WHOLE, u16::from)
    }

    /// Whether a request for `slices` MIG slices fits in what is free.
    pub(crate) fn fits_mig(&self, slices: u8) -> bool {
        self.mig_slices
            .is_some_and(|total| u16::from(total) >= self.used + u16::from(slices))
            && self.mig_instance_slices.is_none_or(|size| size == slices)
    }
}

/// Who holds an allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Holder {
    /// An entry of the running list.
    Running(u32),
    /// A pending workload started this cycle.
    Started(u32),
}

/// GPUs, CPU and memory held on one node by one workload.
pub(crate) struct Alloc {
    pub(crate) holder: Holder,
    pub(crate) mask: Mask,
    /// Units held on each GPU of the mask.
    pub(crate) units: u16,
    pub(crate) cpu: u64,
    pub(crate) mem: u64,
    /// When it is expected to end; never, as far as planning knows, when
    /// `None`.
    pub(crate) release_at: Option<i64>,
}

/// Who a hold on future capacity is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HoldFor {
    /// A blocked pending workload's planned start.
    Planned(u32),
    /// An advance reservation.
    Advance(u32),
    /// A pending workload waiting for its victims to stop.
    Preemptor(u32),
}

/// GPUs, CPU and memory kept for someone over a window.
#[derive(Clone, Copy)]
pub(crate) struct Hold {
    pub(crate) mask: Mask,
    pub(crate) cpu: u64,
    pub(crate) mem: u64,
    pub(crate) from: i64,
    pub(crate) until: Option<i64>,
    /// Binding holds keep other work off; the others only shape estimates.
    pub(crate) binding: bool,
    pub(crate) holder: HoldFor,
}

impl Hold {
    pub(crate) fn overlaps(&self, from: i64, until: Option<i64>) -> bool {
        let starts_before_end = until.is_none_or(|end| self.from < end);
        let ends_after_start = self.until.is_none_or(|end| end > from);
        starts_before_end && ends_after_start
    }
}

/// What a node can give over a window: GPUs by position, CPU and memory.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Room {
    pub(crate) mask: Mask,
    /// GPUs the counted holds keep for others.
    pub(crate) held: Mask,
    pub(crate) cpu: u64,
    pub(crate) mem: u64,
}

/// Which holds a look at free capacity respects.
#[derive(Debug, Clone, Copy)]
pub(crate) struct View {
    pub(crate) from: i64,
    pub(crate) until: Option<i64>,
    /// The advance reservation the workload runs inside, whose holds it may
    /// use and must stay within.
    pub(crate) reservation: Option<u32>,
    /// Tentative holds count too (for estimates).
    pub(crate) tentative: bool,
    /// Binding holds count (off when asking what holds cost).
    pub(crate) binding: bool,
}

/// One node in the cycle.
pub(crate) struct NodeState<'a> {
    pub(crate) node: &'a Node,
    pub(crate) region: u32,
    pub(crate) rack: u32,
    pub(crate) gpus: Vec<GpuSlot>,
    /// Every GPU model on the node.
    pub(crate) models: Vec<u32>,
    /// Healthy, non-MIG GPUs per model.
    pub(crate) whole_by_model: Vec<(u32, Mask)>,
    /// GPUs per NVLink domain.
    pub(crate) domains: Vec<Mask>,
    /// Healthy non-MIG GPUs nobody holds any part of.
    pub(crate) free_whole: Mask,
    pub(crate) cpu_free: u64,
    pub(crate) mem_free: u64,
    pub(crate) allocs: Vec<Alloc>,
    pub(crate) holds: Vec<Hold>,
}

impl NodeState<'_> {
    pub(crate) fn model_mask(&self, model: u32) -> Mask {
        self.whole_by_model
            .iter()
            .find(|(m, _)| *m == model)
            .map_or(0, |(_, mask)| *mask)
    }

    pub(crate) fn has_model(&self, model: u32) -> bool {
        self.gpus.iter().any(|g| g.model == model && g.healthy)
    }

    /// Room for whole GPUs of `model` over the view's window.
    pub(crate) fn room(&self, model: u32, view: View, now: i64) -> Room {
        let model_mask = self.model_mask(model);
        let mut room = if view.from <= now {
            Room {
                mask: self.free_whole & model_mask,
                held: 0,
                cpu: self.cpu_free,
                mem: self.mem_free,
            }
        } else {
            let mut room = Room {
                mask: model_mask,
                held: 0,
                cpu: self.node.cpu_milli,
                mem: self.node.memory_mib,
            };
            for alloc in &self.allocs {
                if alloc.release_at.is_none_or(|at| at > view.from) {
                    room.mask &= !alloc.mask;
                    room.cpu = room.cpu.saturating_sub(alloc.cpu);
                    room.mem = room.mem.saturating_sub(alloc.mem);
                }
            }
            room
        };
        let mut inside: Option<Mask> = view.reservation.map(|_| 0);
        for hold in &self.holds {
            let own = matches!((hold.holder, view.reservation), (HoldFor::Advance(r), Some(mine)) if r == mine);
            if own {
                if let Some(inside) = inside.as_mut() {
                    *inside |= hold.mask;
                }
                continue;
            }
            let counts = if hold.binding {
                view.binding
            } else {
                view.tentative
            };
            if counts && hold.overlaps(view.from, view.until) {
                room.mask &= !hold.mask;
                room.held |= hold.mask;
                room.cpu = room.cpu.saturating_sub(hold.cpu);
                room.mem = room.mem.saturating_sub(hold.mem);
            }
        }
        if let Some(inside) = inside {
            room.mask &= inside;
            room.held |= !inside;
        }
        room
    }

    /// The tightest way to take `count` GPUs out of `mask`: one NVLink
    /// domain if any holds them (the fullest-used one), else the fullest
    /// domains first. The flag tells whether the choice spans domains.
    pub(crate) fn choose(&self, mask: Mask, count: u32) -> Option<(Mask, bool)> {
        if bits(mask) < count {
            return None;
        }
        if count == 0 {
            return Some((0, false));
        }
        let single = self
            .domains
            .iter()
            .map(|domain| mask & domain)
            .filter(|free| bits(*free) >= count)
            .min_by_key(|free| bits(*free));
        if let Some(free) = single {
            return Some((lowest(free, count), false));
        }
        let mut by_size: Vec<Mask> = self.domains.iter().map(|d| mask & d).collect();
        by_size.sort_by_key(|free| std::cmp::Reverse(bits(*free)));
        let mut chosen = 0;
        for free in by_size {
            let missing = count - bits(chosen);
            chosen |= lowest(free, missing.min(bits(free)));
            if bits(chosen) == count {
                break;
            }
        }
        Some((chosen, true))
    }

    /// Free units on each partially used shared GPU of `model`.
    pub(crate) fn partial_free(&self, model: u32) -> impl Iterator<Item = u16> + '_ {
        self.gpus
            .iter()
            .filter(move |g| {
                g.model == model
                    && g.healthy
                    && g.mig_slices.is_none()
                    && g.used > 0
                    && g.used < WHOLE
            })
            .map(|g| WHOLE - g.used)
    }

    pub(crate) fn indices(&self, mask: Mask) -> Vec<u32> {
        self.gpus
            .iter()
            .enumerate()
            .filter(|(position, _)| mask & (1 << position) != 0)
            .map(|(_, g)| g.index)
            .collect()
    }

    pub(crate) fn mask_of(&self, indices: &[u32]) -> Mask {
        self.gpus
            .iter()
            .enumerate()
            .filter(|(_, g)| indices.contains(&g.index))
            .fold(0, |mask, (position, _)| mask | (1 << position))
    }
}

/// Candidate nodes that look alike to the index: sets borrowed from it, or
/// ids gathered for the occasion.
pub(crate) enum Bucket<'s> {
    Sets(Vec<&'s BTreeSet<u32>>),
    Ids(Vec<u32>),
}

impl Bucket<'_> {
    pub(crate) fn ids(&self) -> impl Iterator<Item = u32> + '_ {
        let (sets, ids): (&[&BTreeSet<u32>], &[u32]) = match self {
            Self::Sets(sets) => (sets, &[]),
            Self::Ids(ids) => (&[], ids),
        };
        sets.iter()
            .flat_map(|set| set.iter().copied())
            .chain(ids.iter().copied())
    }
}

/// Per model and region: schedulable nodes bucketed by free whole GPUs, and
/// nodes with room on shared or MIG GPUs.
#[derive(Default)]
struct Index {
    by_free: FastMap<(u32, u32), Vec<BTreeSet<u32>>>,
    shared: FastMap<(u32, u32), BTreeSet<u32>>,
    mig: FastMap<(u32, u32), BTreeSet<u32>>,
}

/// The whole cluster during one cycle.
pub(crate) struct State<'a> {
    pub(crate) now: i64,
    pub(crate) models: Names<'a>,
    pub(crate) regions: Names<'a>,
    pub(crate) nodes: Vec<NodeState<'a>>,
    by_name: FastMap<&'a str, u32>,
    index: Index,
    by_region: FastMap<u32, Vec<u32>>,
    all: Vec<u32>,
    /// Moments a node's capacity grows (an allocation or a hold ends), in
    /// time order: planning looks only at these.
    pub(crate) events: BTreeSet<(i64, u32)>,
    /// Binding holds anywhere: without any, no workload waits on one.
    pub(crate) binding_holds: usize,
    /// Healthy thousandths of a GPU per model, for shares.
    pub(crate) capacity_milli: BTreeMap<u32, u64>,
}

impl<'a> State<'a> {
    pub(crate) fn new(cluster: &'a Cluster, now: i64) -> Self {
        let mut sorted: Vec<&'a Node> = cluster.nodes.iter().collect();
        sorted.sort_by(|a, b| a.name.cmp(&b.name));
        sorted.dedup_by(|a, b| a.name == b.name);
        let mut models = Names::default();
        let mut regions = Names::default();
        let mut racks = Names::default();
        let mut capacity_milli: BTreeMap<u32, u64> = BTreeMap::new();
        let mut nodes = Vec::with_capacity(sorted.len());
        for node in sorted {
            let gpus: Vec<GpuSlot> = node
                .gpus
                .iter()
                .take(MAX_GPUS_PER_NODE)
                .map(|g| GpuSlot {
                    index: g.index,
                    model: models.intern(&g.model),
                    healthy: g.healthy,
                    mig_slices: g.mig_slices.filter(|s| *s > 0),
                    mig_instance_slices: g.mig_instance_slices.filter(|s| *s > 0),
                    used: 0,
                })
                .collect();
            let mut whole_by_model: Vec<(u32, Mask)> = Vec::new();
            let mut domain_ids: Vec<(u32, Mask)> = Vec::new();
            for (position, (slot, gpu)) in gpus.iter().zip(&node.gpus).enumerate() {
                let bit = 1 << position;
                match domain_ids.iter_mut().find(|(d, _)| *d == gpu.nvlink_domain) {
                    Some((_, mask)) => *mask |= bit,
                    None => domain_ids.push((gpu.nvlink_domain, bit)),
                }
                if slot.healthy {
                    *capacity_milli.entry(slot.model).or_default() += 1000;
                }
                if slot.healthy && slot.mig_slices.is_none() {
                    match whole_by_model.iter_mut().find(|(m, _)| *m == slot.model) {
                        Some((_, mask)) => *mask |= bit,
                        None => whole_by_model.push((slot.model, bit)),
                    }
                }
            }
            domain_ids.sort_by_key(|(d, _)| *d);
            let mut node_models: Vec<u32> = gpus.iter().map(|g| g.model).collect();
            node_models.sort_unstable();
            node_models.dedup();
            let free_whole = whole_by_model.iter().fold(0, |all, (_, m)| all | m);
            nodes.push(NodeState {
                node,
                region: regions.intern(&node.region),
                rack: racks.intern(&node.rack),
                gpus,
                models: node_models,
                whole_by_model,
                domains: domain_ids.into_iter().map(|(_, m)| m).collect(),
                free_whole,
                cpu_free: node.cpu_milli,
                mem_free: node.memory_mib,
                allocs: Vec::new(),
                holds: Vec::new(),
            });
        }
        for region in &cluster.regions {
            regions.intern(&region.name);
        }
        let mut state = Self {
            now,
            models,
            regions,
            by_name: FastMap::default(),
            index: Index::default(),
            by_region: FastMap::default(),
            all: Vec::with_capacity(nodes.len()),
            capacity_milli,
            binding_holds: 0,
            events: BTreeSet::new(),
            nodes,
        };
        for id in 0..state.nodes.len() {
            let id = u32::try_from(id).unwrap_or(u32::MAX);
            let node = &state.nodes[id as usize];
            state.by_name.insert(&node.node.name, id);
            state.by_region.entry(node.region).or_default().push(id);
            state.all.push(id);
            state.add_to_index(id);
        }
        state
    }

    pub(crate) fn node_id(&self, name: &str) -> Option<u32> {
        self.by_name.get(name).copied()
    }

    pub(crate) fn node(&self, id: u32) -> &NodeState<'a> {
        &self.nodes[id as usize]
    }

    /// Nodes in `regions` (all when empty), by name.
    pub(crate) fn nodes_in(&self, regions: &[u32]) -> Vec<u32> {
        if regions.is_empty() {
            return self.all.clone();
        }
        let mut ids: Vec<u32> = regions
            .iter()
            .filter_map(|r| self.by_region.get(r))
            .flatten()
            .copied()
            .collect();
        ids.sort_unstable();
        ids
    }

    fn region_keys(&self, regions: &[u32]) -> Vec<u32> {
        if regions.is_empty() {
            (0..u32::try_from(self.regions.names.len()).unwrap_or(u32::MAX)).collect()
        } else {
            regions.to_vec()
        }
    }

    /// Schedulable nodes in `regions` with at least `least` free whole GPUs
    /// of `model`, bucket by bucket: ascending from `least`, or descending.
    /// Within a bucket, nodes come region by region, each by name.
    pub(crate) fn buckets(
        &self,
        model: u32,
        regions: &[u32],
        least: u32,
        descending: bool,
    ) -> Vec<Bucket<'_>> {
        let indexes: Vec<&Vec<BTreeSet<u32>>> = self
            .region_keys(regions)
            .iter()
            .filter_map(|r| self.index.by_free.get(&(model, *r)))
            .collect();
        let top = indexes.iter().map(|b| b.len()).max().unwrap_or(0);
        let mut sizes: Vec<usize> = (least as usize..top).collect();
        if descending {
            sizes.reverse();
        }
        sizes
            .into_iter()
            .map(|size| {
                Bucket::Sets(
                    indexes
                        .iter()
                        .filter_map(|buckets| buckets.get(size))
                        .filter(|set| !set.is_empty())
                        .collect(),
                )
            })
            .filter(|bucket| matches!(bucket, Bucket::Sets(sets) if !sets.is_empty()))
            .collect()
    }

    /// Free whole GPUs of `model` on schedulable nodes in `regions`, nodes
    /// with at least `least` of them, and the most on one node.
    pub(crate) fn free_summary(&self, model: u32, regions: &[u32], least: u32) -> (u32, u32, u32) {
        let mut counts = (0, 0, 0);
        for region in self.region_keys(regions) {
            let Some(buckets) = self.index.by_free.get(&(model, region)) else {
                continue;
            };
            for (free, nodes) in buckets.iter().enumerate().filter(|(_, n)| !n.is_empty()) {
                let free = u32::try_from(free).unwrap_or(u32::MAX);
                let nodes = u32::try_from(nodes.len()).unwrap_or(u32::MAX);
                counts.0 += free * nodes;
                if free >= least {
                    counts.1 += nodes;
                }
                counts.2 = counts.2.max(free);
            }
        }
        counts
    }

    /// Schedulable nodes with a partly used shared GPU (or, with `mig`, a
    /// MIG GPU with free slices) of `model`.
    pub(crate) fn sharing(&self, model: u32, regions: &[u32], mig: bool) -> Vec<u32> {
        let index = if mig {
            &self.index.mig
        } else {
            &self.index.shared
        };
        let mut ids: Vec<u32> = self
            .region_keys(regions)
            .iter()
            .filter_map(|r| index.get(&(model, *r)))
            .flatten()
            .copied()
            .collect();
        ids.sort_unstable();
        ids
    }

    /// Per model on the node: free whole GPUs, whether a shared GPU has
    /// room, whether a MIG GPU has free slices.
    fn index_entry(node: &NodeState<'_>, model: u32) -> (usize, bool, bool) {
        let free = bits(node.free_whole & node.model_mask(model)) as usize;
        let mut shared = false;
        let mut mig = false;
        for gpu in node.gpus.iter().filter(|g| g.model == model && g.healthy) {
            match gpu.mig_slices {
                Some(slices) => mig |= gpu.used < u16::from(slices),
                None => shared |= gpu.used > 0 && gpu.used < WHOLE,
            }
        }
        (free, shared, mig)
    }

    fn add_to_index(&mut self, id: u32) {
        let node = &self.nodes[id as usize];
        if !node.node.schedulable {
            return;
        }
        for model in &node.models {
            let (free, shared, mig) = Self::index_entry(node, *model);
            let key = (*model, node.region);
            let buckets = self.index.by_free.entry(key).or_default();
            if buckets.len() <= free {
                buckets.resize_with(free + 1, BTreeSet::new);
            }
            buckets[free].insert(id);
            if shared {
                self.index.shared.entry(key).or_default().insert(id);
            }
            if mig {
                self.index.mig.entry(key).or_default().insert(id);
            }
        }
    }

    fn remove_from_index(&mut self, id: u32) {
        let node = &self.nodes[id as usize];
        if !node.node.schedulable {
            return;
        }
        for model in &node.models {
            let (free, _, _) = Self::index_entry(node, *model);
            let key = (*model, node.region);
            if let Some(bucket) = self
                .index
                .by_free
                .get_mut(&key)
                .and_then(|b| b.get_mut(free))
            {
                bucket.remove(&id);
            }
            for index in [&mut self.index.shared, &mut self.index.mig] {
                if let Some(set) = index.get_mut(&key) {
                    set.remove(&id);
                }
            }
        }
    }

    /// Records that `alloc` holds `alloc.units` on each GPU of its mask.
    pub(crate) fn hold(&mut self, id: u32, alloc: Alloc) {
        self.remove_from_index(id);
        let node = &mut self.nodes[id as usize];
        for (position, gpu) in node.gpus.iter_mut().enumerate() {
            if alloc.mask & (1 << position) != 0 {
                gpu.used = gpu.used.saturating_add(alloc.units).min(gpu.capacity());
                node.free_whole &= !(1 << position);
            }
        }
        node.cpu_free = node.cpu_free.saturating_sub(alloc.cpu);
        node.mem_free = node.mem_free.saturating_sub(alloc.mem);
        if let Some(at) = alloc.release_at {
            self.events.insert((at, id));
        }
        node.allocs.push(alloc);
        self.add_to_index(id);
    }

    /// Sets when an allocation's GPUs come free (a victim told to stop).
    pub(crate) fn set_release(&mut self, holder: Holder, at: i64) {
        for (id, node) in self.nodes.iter_mut().enumerate() {
            for alloc in node.allocs.iter_mut().filter(|a| a.holder == holder) {
                alloc.release_at = Some(at);
                self.events
                    .insert((at, u32::try_from(id).unwrap_or(u32::MAX)));
            }
        }
    }

    pub(crate) fn add_hold(&mut self, id: u32, hold: Hold) {
        self.binding_holds += usize::from(hold.binding);
        if let Some(until) = hold.until {
            self.events.insert((until, id));
        }
        self.nodes[id as usize].holds.push(hold);
    }
}
