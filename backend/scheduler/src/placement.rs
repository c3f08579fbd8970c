//! The choice of exact nodes and GPUs for one workload, under the chosen
//! strategy.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use crate::policy::{PlacementStrategy, Policy};
use crate::state::{Bucket, FastMap, Mask, NO_MODEL, NodeState, Room, State, View, WHOLE, bits};
use crate::workload::{GpuRequest, Workload};

/// The distinct shapes per GPU model the fragmentation score weighs.
const SHAPES_PER_MODEL: usize = 64;

/// One shape of waiting work and how common it is, for the fragmentation
/// score.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shape {
    pub(crate) gpus: GpuRequest,
    pub(crate) cpu: u64,
    pub(crate) mem: u64,
    pub(crate) weight: f64,
}

/// A shape (GPUs, CPU, memory per node) and how often it occurs.
type ShapeCount = ((GpuRequest, u64, u64), f64);

/// The shapes of waiting work per GPU model.
pub(crate) type Shapes = FastMap<u32, Vec<Shape>>;

/// How often each (model, GPUs, CPU, memory) shape occurs in some work.
#[derive(Default)]
pub(crate) struct ShapeTally {
    counts: FastMap<(u32, GpuRequest, u64, u64), f64>,
    /// Work that asks for GPUs, each counted once whatever its models.
    gpu_work: f64,
}

impl ShapeTally {
    /// Counts `workload` once under each of `models`, the ones it may run on.
    pub(crate) fn add(&mut self, models: impl IntoIterator<Item = u32>, workload: &Workload) {
        if workload.gpus != GpuRequest::Whole(0) {
            self.gpu_work += 1.0;
        }
        for model in models {
            *self
                .counts
                .entry((
                    model,
                    workload.gpus,
                    workload.cpu_milli_per_node,
                    workload.memory_mib_per_node,
                ))
                .or_default() += 1.0;
        }
    }
}

/// The most common shapes per GPU model, each weighted by its share of all
/// work that asks for GPUs: a model's weights sum to the share of that work
/// which may run on it, so the work that may not counts its free GPUs as
/// lost, as FGD's "no access" does. Work that may run anywhere then goes
/// where fewer others could have gone.
pub(crate) fn shapes_of(tally: ShapeTally) -> Shapes {
    let mut by_model: FastMap<u32, Vec<ShapeCount>> = FastMap::default();
    for ((model, gpus, cpu, mem), count) in tally.counts {
        by_model
            .entry(model)
            .or_default()
            .push(((gpus, cpu, mem), count));
    }
    by_model
        .into_iter()
        .map(|(model, mut shapes)| {
            let all: f64 = shapes.iter().map(|(_, count)| count).sum();
            let access = if tally.gpu_work > 0.0 {
                (all / tally.gpu_work).min(1.0)
            } else {
                1.0
            };
            shapes.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            shapes.truncate(SHAPES_PER_MODEL);
            let kept: f64 = shapes.iter().map(|(_, count)| count).sum();
            let weighted = shapes
                .into_iter()
                .map(|((gpus, cpu, mem), count)| Shape {
                    gpus,
                    cpu,
                    mem,
                    weight: count / kept * access,
                })
                .collect();
            (model, weighted)
        })
        .collect()
}

/// The expected free thousandths of a GPU on `node`, for GPUs of `model`,
/// that a request drawn from `shapes` could not use, with `cpu` and `mem`
/// left on the node.
pub(crate) fn node_fragmentation(
    node: &NodeState<'_>,
    model: u32,
    cpu: u64,
    mem: u64,
    shapes: &[Shape],
) -> f64 {
    node_fragmentation_by(Measure::Gantry, node, model, cpu, mem, shapes)
}

fn node_fragmentation_by(
    measure: Measure,
    node: &NodeState<'_>,
    model: u32,
    cpu: u64,
    mem: u64,
    shapes: &[Shape],
) -> f64 {
    let partials: Vec<u16> = node.partial_free(model).collect();
    let free = bits(node.free_whole & node.model_mask(model));
    fragmentation(measure, free, &partials, cpu, mem, shapes)
}

/// Which fragmentation a score minimises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Measure {
    /// Ours: whole GPUs a request of k leaves over count, and so do GPUs
    /// the node's CPU or memory could not feed.
    Gantry,
    /// FGD's as published, for the simulator's peer.
    Fgd,
}

/// What one workload needs, resolved against the cycle's names.
pub(crate) struct Demand<'w> {
    pub(crate) workload: &'w Workload,
    pub(crate) model: u32,
    pub(crate) regions: Vec<u32>,
    pub(crate) view: View,
}

/// What one node would give a workload.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Offer {
    pub(crate) node: u32,
    pub(crate) mask: Mask,
    pub(crate) units: u16,
    spans_domains: bool,
    left_over: u32,
    fragmentation: f64,
    /// GPU capacity the node keeps free, in thousandths, all models.
    gpu_left: u64,
    /// CPU the node keeps free.
    cpu_left: u64,
    /// The node's free CPU, memory and GPU capacity afterwards, each as a
    /// share of what it has, summed: best-fit takes the smallest.
    leftover_share: f64,
}

impl Offer {
    /// Adds `cost`, in thousandths of a GPU, to what the fragmentation-aware
    /// strategy weighs against other offers.
    pub(crate) fn add_cost(&mut self, cost: f64) {
        self.fragmentation += cost;
    }
}

/// Whether `node` may host `workload` at all: schedulable, carrying its
/// labels. Regions are filtered by the index.
pub(crate) fn eligible(node: &NodeState<'_>, workload: &Workload) -> bool {
    node.node.schedulable && workload.required_labels.is_subset(&node.node.labels)
}

/// Fragmentation of one node's free capacity for `shapes`: the expected
/// free thousandths of a GPU that a request drawn from them could not use,
/// plus those the node's CPU or memory could not feed at the shapes' mean
/// CPU and memory per GPU. The second term looks past the next request: a
/// node whose CPU runs out strands its GPUs for every later one.
fn fragmentation(
    measure: Measure,
    free: u32,
    partials: &[u16],
    cpu: u64,
    mem: u64,
    shapes: &[Shape],
) -> f64 {
    let partial: u64 = partials.iter().map(|p| u64::from(*p)).sum();
    let total = u64::from(free) * u64::from(WHOLE) + partial;
    let fgd = measure == Measure::Fgd;
    let (mut unusable_mean, mut cpu_mean, mut mem_mean, mut gpu_mean) = (0.0, 0.0, 0.0, 0.0);
    let mut access = 0.0;
    for shape in shapes {
        let unusable = if cpu < shape.cpu || (!fgd && mem < shape.mem) {
            total
        } else {
            match shape.gpus {
                GpuRequest::Whole(0) | GpuRequest::Mig(_) => 0,
                GpuRequest::Whole(k) if fgd => {
                    if free >= k {
                        partial
                    } else {
                        total
                    }
                }
                GpuRequest::Whole(k) => u64::from(free % k) * u64::from(WHOLE) + partial,
                GpuRequest::Milli(x) => partials
                    .iter()
                    .filter(|p| u32::from(**p) < x)
                    .map(|p| u64::from(*p))
                    .sum(),
            }
        };
        let gpus = match shape.gpus {
            GpuRequest::Whole(k) => k * u32::from(WHOLE),
            GpuRequest::Milli(x) => x,
            GpuRequest::Mig(_) => 0,
        };
        unusable_mean += shape.weight * unusable as f64;
        cpu_mean += shape.weight * shape.cpu as f64;
        mem_mean += shape.weight * shape.mem as f64;
        gpu_mean += shape.weight * f64::from(gpus);
        access += shape.weight;
    }
    let no_access = (1.0 - access).max(0.0) * total as f64;
    if fgd {
        return unusable_mean + no_access;
    }
    // The thousandths of a GPU that `left` of a resource can feed, at the
    // shapes' mean use of it per GPU.
    let fed = |left: u64, per_shape: f64| {
        if per_shape > 0.0 {
            left as f64 * gpu_mean / per_shape
        } else {
            f64::INFINITY
        }
    };
    let starved = (total as f64 - fed(cpu, cpu_mean).min(fed(mem, mem_mean))).max(0.0);
    unusable_mean + no_access + access * starved
}

fn offer(
    state: &State<'_>,
    id: u32,
    demand: &Demand<'_>,
    strategy: PlacementStrategy,
    shapes: Option<&Shapes>,
) -> Option<Offer> {
    let node = state.node(id);
    let workload = demand.workload;
    if !eligible(node, workload) {
        return None;
    }
    let room = node.room(demand.model, demand.view, state.now);
    if room.cpu < workload.cpu_milli_per_node || room.mem < workload.memory_mib_per_node {
        return None;
    }
    let (mask, units, spans_domains, partial_taken) = match workload.gpus {
        GpuRequest::Whole(k) => {
            let (mask, spans) = node.choose(room.mask, k)?;
            (mask, WHOLE, spans, None)
        }
        GpuRequest::Milli(x) => {
            let (mask, partial) = shared_gpu(node, demand.model, &room, x)?;
            (mask, u16::try_from(x).ok()?, false, partial)
        }
        GpuRequest::Mig(slices) => (
            mig_gpu(node, demand.model, &room, slices)?,
            u16::from(slices),
            false,
            None,
        ),
    };
    let free = bits(room.mask);
    let left_over = free - bits(mask & room.mask);
    let (cpu_after, mem_after) = (
        room.cpu - workload.cpu_milli_per_node,
        room.mem - workload.memory_mib_per_node,
    );
    let measure = if strategy == PlacementStrategy::Fgd {
        Measure::Fgd
    } else {
        Measure::Gantry
    };
    let fragmentation = shapes.map_or(0.0, |shapes| {
        if demand.model == NO_MODEL {
            // CPU-only work strands GPUs when it takes the CPU or memory
            // they need: score it against the node's own GPU models.
            return node
                .models
                .iter()
                .filter_map(|m| shapes.get(m).map(|s| (*m, s)))
                .map(|(m, s)| {
                    node_fragmentation_by(measure, node, m, cpu_after, mem_after, s)
                        - node_fragmentation_by(measure, node, m, room.cpu, room.mem, s)
                })
                .sum();
        }
        let Some(shapes) = shapes.get(&demand.model) else {
            return 0.0;
        };
        let mut partials: Vec<u16> = node.partial_free(demand.model).collect();
        let before = fragmentation(measure, free, &partials, room.cpu, room.mem, shapes);
        match (workload.gpus, partial_taken) {
            (GpuRequest::Milli(x), Some(position)) => {
                if let Some(p) = partials.get_mut(position) {
                    *p = p.saturating_sub(u16::try_from(x).unwrap_or(WHOLE));
                }
            }
            (GpuRequest::Milli(x), None) => {
                partials.push(WHOLE.saturating_sub(u16::try_from(x).unwrap_or(WHOLE)));
            }
            _ => {}
        }
        partials.retain(|p| *p > 0);
        let after = fragmentation(measure, left_over, &partials, cpu_after, mem_after, shapes);
        after - before
    });
    // What stays free of the kind of GPU it takes: MIG slices for a MIG
    // request (so instances pack onto nodes whose MIG GPUs are in use, as
    // fractions do), whole-GPU thousandths otherwise.
    let mig = matches!(workload.gpus, GpuRequest::Mig(_));
    let gpu_left = node
        .gpus
        .iter()
        .filter(|g| g.healthy && g.mig_slices.is_some() == mig)
        .filter(|g| !mig || g.model == demand.model)
        .map(|g| u64::from(g.capacity().saturating_sub(g.used)))
        .sum::<u64>()
        .saturating_sub(u64::from(bits(mask)) * u64::from(units));
    let share = |left: u64, total: u64| left as f64 / total.max(1) as f64;
    let gpu_total = node
        .gpus
        .iter()
        .filter(|g| g.healthy && g.mig_slices.is_none())
        .count() as u64
        * u64::from(WHOLE);
    let leftover_share = share(cpu_after, node.node.cpu_milli)
        + share(mem_after, node.node.memory_mib)
        + share(gpu_left, gpu_total);
    Some(Offer {
        node: id,
        mask,
        units,
        spans_domains,
        left_over,
        fragmentation,
        gpu_left,
        cpu_left: cpu_after,
        leftover_share,
    })
}

/// The GPU for a fraction: the tightest partly used GPU it fits on, else a
/// free one from the tightest NVLink domain. Returns the GPU's bit and, for a
/// partly used GPU, its position among the node's partly used GPUs.
fn shared_gpu(
    node: &NodeState<'_>,
    model: u32,
    room: &Room,
    milli: u32,
) -> Option<(Mask, Option<usize>)> {
    let mut best: Option<(u16, Mask, usize)> = None;
    let mut partial_position = 0;
    for (position, gpu) in node.gpus.iter().enumerate() {
        let bit: Mask = 1 << position;
        let partly_used = gpu.model == model
            && gpu.healthy
            && gpu.mig_slices.is_none()
            && gpu.used > 0
            && gpu.used < WHOLE;
        if !partly_used {
            continue;
        }
        let free = WHOLE - gpu.used;
        if room.held & bit == 0 && u32::from(free) >= milli && best.is_none_or(|(f, _, _)| free < f)
        {
            best = Some((free, bit, partial_position));
        }
        partial_position += 1;
    }
    if let Some((_, bit, position)) = best {
        return Some((bit, Some(position)));
    }
    node.choose(room.mask, 1).map(|(mask, _)| (mask, None))
}

/// The tightest MIG GPU of `model` with `slices` free.
fn mig_gpu(node: &NodeState<'_>, model: u32, room: &Room, slices: u8) -> Option<Mask> {
    node.gpus
        .iter()
        .enumerate()
        .filter(|(position, gpu)| {
            gpu.model == model
                && gpu.healthy
                && room.held & (1 << position) == 0
                && gpu.fits_mig(slices)
        })
        .min_by_key(|(position, gpu)| (gpu.capacity() - gpu.used, *position))
        .map(|(position, _)| 1 << position)
}

/// A repeatable pseudo-random draw per workload and node.
fn draw(seed: u64, workload: &str, node: u32) -> u64 {
    let mut hash = seed ^ 0xcbf2_9ce4_8422_2325;
    for byte in workload.bytes().chain(node.to_le_bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash ^= hash >> 33;
    hash = hash.wrapping_mul(0xff51_afd7_ed55_8ccd);
    hash ^ (hash >> 33)
}

pub(crate) fn compare(
    strategy: PlacementStrategy,
    workload: &str,
    a: &Offer,
    b: &Offer,
) -> Ordering {
    match strategy {
        PlacementStrategy::FirstFit => a.node.cmp(&b.node),
        PlacementStrategy::Random { seed } => draw(seed, workload, a.node)
            .cmp(&draw(seed, workload, b.node))
            .then(a.node.cmp(&b.node)),
        PlacementStrategy::BestFit => (a.spans_domains, a.left_over)
            .cmp(&(b.spans_domains, b.left_over))
            .then(a.leftover_share.total_cmp(&b.leftover_share))
            .then(a.node.cmp(&b.node)),
        PlacementStrategy::Spread => (a.spans_domains, std::cmp::Reverse(a.left_over), a.node)
            .cmp(&(b.spans_domains, std::cmp::Reverse(b.left_over), b.node)),
        // Among equal fragmentation, the node that keeps the least GPU
        // capacity free, then the most CPU: work lands where GPUs are
        // already taken and CPU is plentiful, so CPU stays beside free GPUs.
        PlacementStrategy::FragmentationAware => a
            .spans_domains
            .cmp(&b.spans_domains)
            .then(a.fragmentation.total_cmp(&b.fragmentation))
            .then(a.gpu_left.cmp(&b.gpu_left))
            .then(b.cpu_left.cmp(&a.cpu_left))
            .then((a.left_over, a.node).cmp(&(b.left_over, b.node))),
        PlacementStrategy::Fgd => a
            .fragmentation
            .total_cmp(&b.fragmentation)
            .then(draw(0, workload, a.node).cmp(&draw(0, workload, b.node)))
            .then(a.node.cmp(&b.node)),
    }
}

/// Candidate nodes in the order the strategy looks at them, bucket by
/// bucket, and the first bucket from which on buckets are only sampled
/// (nodes in one bucket look alike to the index, so a few of each tell the
/// best). First-fit and random look at every node.
fn candidates<'s>(
    state: &'s State<'_>,
    demand: &Demand<'_>,
    strategy: PlacementStrategy,
) -> (Vec<Bucket<'s>>, usize) {
    let regions = &demand.regions;
    let samples = matches!(
        strategy,
        PlacementStrategy::FragmentationAware
            | PlacementStrategy::Fgd
            | PlacementStrategy::BestFit
            | PlacementStrategy::Spread
    );
    let from = |first: usize| if samples { first } else { usize::MAX };
    match demand.workload.gpus {
        GpuRequest::Whole(0) => (vec![Bucket::Ids(state.nodes_in(regions))], usize::MAX),
        GpuRequest::Whole(k) => {
            let descending = strategy == PlacementStrategy::Spread;
            (state.buckets(demand.model, regions, k, descending), from(0))
        }
        GpuRequest::Milli(_) => {
            // Every partly used GPU is looked at: packing fractions there
            // keeps whole GPUs whole.
            let mut buckets = vec![Bucket::Ids(state.sharing(demand.model, regions, false))];
            buckets.extend(state.buckets(demand.model, regions, 1, false));
            (buckets, from(1))
        }
        GpuRequest::Mig(_) => (
            vec![Bucket::Ids(state.sharing(demand.model, regions, true))],
            usize::MAX,
        ),
    }
}

/// The nodes and GPUs `demand` would get now, all of them or none.
pub(crate) fn find(
    state: &State<'_>,
    demand: &Demand<'_>,
    policy: &Policy,
    shapes: &Shapes,
) -> Option<Vec<Offer>> {
    let workload = demand.workload;
    let count = usize::try_from(workload.node_count).ok()?;
    if count == 0 {
        return None;
    }
    // Too few nodes with enough free GPUs: no need to look at any of them.
    if let GpuRequest::Whole(k) = workload.gpus
        && k > 0
        && (state.free_summary(demand.model, &demand.regions, k).1 as usize) < count
    {
        return None;
    }
    let strategy = policy.placement;
    let scored = matches!(
        strategy,
        PlacementStrategy::FragmentationAware | PlacementStrategy::Fgd
    )
    .then_some(shapes);
    let (buckets, sampled_from) = candidates(state, demand, strategy);
    let order = |a: &Offer, b: &Offer| compare(strategy, &workload.id, a, b);
    let mut offers: Vec<Offer> = Vec::new();
    let mut per_rack: BTreeMap<u32, usize> = BTreeMap::new();
    for (position, bucket) in buckets.iter().enumerate() {
        let sampled = position >= sampled_from;
        let mut found = 0;
        for id in bucket.ids() {
            if sampled && count == 1 && found >= policy.scored_per_bucket {
                break;
            }
            if let Some(offer) = offer(state, id, demand, strategy, scored) {
                found += 1;
                offers.push(offer);
                let in_rack = per_rack.entry(state.node(id).rack).or_default();
                *in_rack += 1;
                if count > 1 && *in_rack >= count {
                    break;
                }
            }
        }
        let gang_ready = count > 1 && per_rack.values().any(|n| *n >= count);
        let single_done = count == 1
            && sampled
            && !matches!(
                strategy,
                PlacementStrategy::FragmentationAware | PlacementStrategy::Fgd
            )
            && offers.iter().any(|o| !o.spans_domains);
        if gang_ready || single_done {
            break;
        }
    }
    if offers.len() < count {
        return None;
    }
    offers.sort_by(order);
    if count == 1 {
        offers.truncate(1);
        return Some(offers);
    }
    // The rack whose best offers pack tightest; else the best offers
    // anywhere.
    let mut racks: BTreeMap<u32, Vec<Offer>> = BTreeMap::new();
    for offer in &offers {
        racks
            .entry(state.node(offer.node).rack)
            .or_default()
            .push(*offer);
    }
    let in_one_rack = racks
        .into_values()
        .filter(|rack| rack.len() >= count)
        .map(|mut rack| {
            rack.truncate(count);
            rack
        })
        .min_by_key(|rack| rack.iter().map(|o| o.left_over).sum::<u32>());
    Some(in_one_rack.unwrap_or_else(|| {
        offers.truncate(count);
        offers
    }))
}
