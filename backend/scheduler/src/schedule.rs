//! One scheduling cycle: admission, ranking by class, aging, deadlines and
//! fair share, placement, preemption, backfill planning, and the reasons for
//! everything that waits.

use std::cmp::Ordering;
use std::collections::{BTreeSet, BinaryHeap};

use crate::cluster::Cluster;
use crate::decision::{
    Decisions, NextRelease, Preemption, PreemptionCause, QuotaLimit, Reason, RejectReason,
    Rejection, Reservation, Start, Waiting,
};
use crate::placement::{Demand, Shape, Shapes, eligible, find};
use crate::plan::earliest;
use crate::policy::Policy;
use crate::preempt::{Candidate, Status, evict};
use crate::queue::{Queue, Quota};
use crate::state::{
    Alloc, FastMap, FastSet, Hold, HoldFor, Holder, Mask, State, View, WHOLE, bits,
};
use crate::usage::UsageLedger;
use crate::workload::{
    AdvanceReservation, GpuRequest, Placement, PriorityClass, Running, Workload,
};

/// The distinct shapes per GPU model the fragmentation score weighs.
const SHAPES_PER_MODEL: usize = 16;

/// Stands for "no GPU model" in CPU-only work and for "no such region".
const NONE: u32 = u32::MAX;

/// Everything one cycle looks at.
#[derive(Debug, Clone, Copy)]
pub struct Snapshot<'a> {
    /// Nodes, GPUs and regions.
    pub cluster: &'a Cluster,
    /// Queues with quotas and weights; with none, every queue is unlimited.
    pub queues: &'a [Queue],
    /// Work holding GPUs now.
    pub running: &'a [Running],
    /// Work waiting.
    pub pending: &'a [Workload],
    /// Advance reservations, past ones ignored.
    pub reservations: &'a [AdvanceReservation],
    /// Decayed past usage per queue, for fair share.
    pub usage: &'a UsageLedger,
    /// The cycle's time, seconds since the epoch.
    pub now: i64,
}

/// Everything but the GPU model and region that decides whether a
/// workload fits: two workloads of one shape fit or fail together within a
/// cycle.
#[derive(Clone, PartialEq, Eq, Hash)]
struct ShapeKey<'a> {
    gpus: GpuRequest,
    nodes: u32,
    cpu: u64,
    mem: u64,
    labels: &'a BTreeSet<String>,
    regions: Vec<u32>,
    duration: Option<i64>,
    reservation: Option<u32>,
}

/// A shape, a GPU model and a region group (or `ANY`).
type FitKey = (u32, u32, u32);

/// The region key of a group that may use any region.
const ANY: u32 = u32::MAX - 1;

/// A shape of waiting work (GPUs, CPU, memory per node) and how many wait.
type ShapeCount = ((GpuRequest, u64, u64), f64);

/// What a cycle resolves about a pending workload once.
struct Prepared {
    shape: u32,
    /// The shape without duration or reservation: what decides whether it
    /// could ever fit.
    size: u32,
    models: Vec<u32>,
    regions: Vec<u32>,
    groups: Vec<Vec<u32>>,
}

/// One queue as a cycle sees it; work naming no known queue gets its own.
struct Slot<'a> {
    config: Option<&'a Queue>,
    weight: f64,
}

/// A running entry as preemption sees it.
struct Run {
    slot: usize,
    model: u32,
    class: PriorityClass,
    loss: f64,
    protected: bool,
    stopping: bool,
    borrowing: bool,
    milli: u64,
}

/// A waiting workload's context, explained once the cycle is over.
struct Wait<'a> {
    p: u32,
    workload: &'a Workload,
    /// The models it may use (within quota, once that is checked).
    models: Vec<u32>,
    reasons: Vec<Reason>,
    estimate: Option<(i64, Vec<String>)>,
}

/// The head of one queue in the cross-queue heap.
struct Head<'a> {
    /// Work within its queue's guarantee goes before work that would
    /// borrow, whatever their classes: otherwise a borrower could take back
    /// the GPUs a reclaim just freed, again and again.
    within: bool,
    key: f64,
    submitted: i64,
    id: &'a str,
    slot: usize,
    position: usize,
}

impl PartialEq for Head<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Head<'_> {}

impl PartialOrd for Head<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Head<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.within
            .cmp(&other.within)
            .then(self.key.total_cmp(&other.key))
            .then(other.submitted.cmp(&self.submitted))
            .then(other.id.cmp(self.id))
    }
}

/// Rank points of a priority class: one class is worth 1,000.
fn class_points(class: PriorityClass) -> f64 {
    f64::from(class as u8) * 1_000.0
}

pub(crate) struct Cycle<'a> {
    snap: &'a Snapshot<'a>,
    policy: &'a Policy,
    now: i64,
    state: State<'a>,
    slots: Vec<Slot<'a>>,
    slot_ids: FastMap<&'a str, usize>,
    used: FastMap<(usize, u32), u64>,
    /// Quotas by slot and model id.
    quotas: FastMap<(usize, u32), Quota>,
    /// Each slot's fair-share rank penalty, kept current as work starts.
    fair: Vec<f64>,
    history: FastMap<(usize, u32), f64>,
    runs: Vec<Run>,
    reservations: FastMap<&'a str, u32>,
    shapes: Shapes,
    prepared: Vec<Prepared>,
    failed: FastSet<FitKey>,
    failed_evictions: FastSet<(FitKey, PriorityClass, usize, bool)>,
    planned: usize,
    reserved: usize,
    searches: usize,
    /// Counts changes to capacity (starts and holds), so that reasons are
    /// computed once per shape between changes.
    epoch: usize,
    reasons: FastMap<(FitKey, usize), Vec<Reason>>,
    waits: Vec<Wait<'a>>,
    decisions: Decisions,
}

/// Places `snapshot.pending` work onto the cluster under `policy`.
///
/// Work is admitted (malformed, never-fitting, over-quota and over-limit
/// requests are rejected), ranked by priority class plus aging and deadline
/// urgency, and taken queue by queue in weighted fair-share order. Each
/// workload starts whole on exact GPUs, or preempts lower-ranked work, or
/// waits with its reasons and, from the backfill plan, an estimated start.
/// The same snapshot always yields the same decisions.
pub fn schedule(snapshot: &Snapshot<'_>, policy: &Policy) -> Decisions {
    let mut cycle = prepared(snapshot, policy);
    let ranked = cycle.admit();
    cycle.run(ranked);
    cycle.explain();
    cycle.decisions
}

/// A cycle with running work and advance reservations applied and nothing
/// placed yet: the state other questions about the cluster start from.
pub(crate) fn prepared<'a>(snapshot: &'a Snapshot<'a>, policy: &'a Policy) -> Cycle<'a> {
    let mut cycle = Cycle::new(snapshot, policy);
    cycle.apply_running();
    cycle.apply_advance_reservations();
    cycle
}

impl<'a> Cycle<'a> {
    pub(crate) fn state(&self) -> &State<'a> {
        &self.state
    }

    pub(crate) fn regions_of(&self, workload: &Workload) -> Vec<u32> {
        self.all_regions(workload)
    }

    fn new(snap: &'a Snapshot<'a>, policy: &'a Policy) -> Self {
        let mut cycle = Self {
            snap,
            policy,
            now: snap.now,
            state: State::new(snap.cluster, snap.now),
            slots: Vec::new(),
            slot_ids: FastMap::default(),
            used: FastMap::default(),
            quotas: FastMap::default(),
            fair: Vec::new(),
            history: FastMap::default(),
            runs: Vec::new(),
            reservations: FastMap::default(),
            shapes: Shapes::new(),
            prepared: Vec::new(),
            failed: FastSet::default(),
            failed_evictions: FastSet::default(),
            planned: 0,
            reserved: 0,
            searches: 0,
            epoch: 0,
            reasons: FastMap::default(),
            waits: Vec::new(),
            decisions: Decisions::default(),
        };
        for queue in snap.queues {
            if cycle.slot_ids.contains_key(queue.name.as_str()) {
                continue;
            }
            cycle.slots.push(Slot {
                config: Some(queue),
                weight: f64::from(queue.weight.max(1)),
            });
            let slot = cycle.slots.len() - 1;
            cycle.slot_ids.insert(&queue.name, slot);
            for (model, quota) in &queue.quotas {
                if let Some(id) = cycle.state.models.get(model) {
                    cycle.quotas.insert((slot, id), *quota);
                }
            }
        }
        for (index, reservation) in snap.reservations.iter().enumerate() {
            cycle
                .reservations
                .insert(&reservation.id, u32::try_from(index).unwrap_or(NONE));
        }
        cycle
    }

    fn slot(&mut self, queue: &'a str) -> usize {
        if let Some(slot) = self.slot_ids.get(queue) {
            return *slot;
        }
        self.slots.push(Slot {
            config: None,
            weight: 1.0,
        });
        let slot = self.slots.len() - 1;
        self.slot_ids.insert(queue, slot);
        for model in self.snap.usage.models_of(queue) {
            if let Some(id) = self.state.models.get(model) {
                self.history
                    .insert((slot, id), self.snap.usage.decayed(queue, model, self.now));
            }
        }
        slot
    }

    fn models_of(&self, workload: &Workload) -> Vec<u32> {
        if workload.gpus == GpuRequest::Whole(0) {
            return vec![NONE];
        }
        workload
            .gpu_models
            .iter()
            .filter_map(|m| self.state.models.get(m))
            .collect()
    }

    fn holder_name(&self, holder: Holder) -> String {
        match holder {
            Holder::Running(r) => self.snap.running[r as usize].workload.id.clone(),
            Holder::Started(p) => self.snap.pending[p as usize].id.clone(),
        }
    }

    fn units(request: GpuRequest) -> u16 {
        match request {
            GpuRequest::Whole(_) => WHOLE,
            GpuRequest::Milli(milli) => u16::try_from(milli).unwrap_or(WHOLE),
            GpuRequest::Mig(slices) => u16::from(slices),
        }
    }

    fn apply_running(&mut self) {
        let now = self.now;
        for (index, run) in self.snap.running.iter().enumerate() {
            let r = u32::try_from(index).unwrap_or(NONE);
            let slot = self.slot(&run.workload.queue);
            let mut model = NONE;
            let release_at = run.expected_end(now);
            for placement in &run.placements {
                let Some(id) = self.state.node_id(&placement.node) else {
                    continue;
                };
                let node = self.state.node(id);
                let mask = node.mask_of(&placement.gpus);
                if model == NONE {
                    model = node
                        .gpus
                        .iter()
                        .find(|g| placement.gpus.contains(&g.index))
                        .map_or(NONE, |g| g.model);
                }
                self.state.hold(
                    id,
                    Alloc {
                        holder: Holder::Running(r),
                        mask,
                        units: Self::units(run.workload.gpus),
                        cpu: run.workload.cpu_milli_per_node,
                        mem: run.workload.memory_mib_per_node,
                        release_at,
                    },
                );
            }
            let milli = run.workload.total_milli();
            *self.used.entry((slot, model)).or_default() += milli;
            let since = run
                .last_checkpoint_at
                .unwrap_or(run.started_at)
                .max(run.started_at);
            self.runs.push(Run {
                slot,
                model,
                class: run.workload.priority,
                loss: milli as f64 / 1000.0 * (now - since).max(0) as f64,
                protected: now - run.started_at < run.workload.min_runtime,
                stopping: run.stopping_at.is_some(),
                borrowing: true,
                milli,
            });
        }
        self.mark_borrowers();
    }

    /// Within each queue and model, the work beyond the guarantee (the
    /// latest started of the lowest classes) is borrowing.
    fn mark_borrowers(&mut self) {
        let mut groups: FastMap<(usize, u32), Vec<usize>> = FastMap::default();
        for (index, run) in self.runs.iter().enumerate() {
            groups.entry((run.slot, run.model)).or_default().push(index);
        }
        let mut keys: Vec<(usize, u32)> = groups.keys().copied().collect();
        keys.sort_unstable();
        for key in keys {
            if !self.policy.quotas || self.slots[key.0].config.is_none() {
                continue;
            }
            let guaranteed = u64::from(self.quotas.get(&key).map_or(0, |q| q.guaranteed)) * 1000;
            let mut members = groups.remove(&key).unwrap_or_default();
            members.sort_by(|a, b| {
                let (ra, rb) = (&self.snap.running[*a], &self.snap.running[*b]);
                rb.workload
                    .priority
                    .cmp(&ra.workload.priority)
                    .then(ra.started_at.cmp(&rb.started_at))
                    .then_with(|| ra.workload.id.cmp(&rb.workload.id))
            });
            let mut total = 0;
            for index in members {
                total += self.runs[index].milli;
                self.runs[index].borrowing = total > guaranteed;
            }
        }
    }

    fn apply_advance_reservations(&mut self) {
        let now = self.now;
        let mut evictions: Vec<(u32, usize)> = Vec::new();
        for (index, reservation) in self.snap.reservations.iter().enumerate() {
            if reservation.end <= now {
                continue;
            }
            let ri = u32::try_from(index).unwrap_or(NONE);
            for placement in &reservation.placements {
                let Some(id) = self.state.node_id(&placement.node) else {
                    continue;
                };
                let mask = self.state.node(id).mask_of(&placement.gpus);
                if reservation.start <= now {
                    for alloc in &self.state.node(id).allocs {
                        if let Holder::Running(r) = alloc.holder
                            && alloc.mask & mask != 0
                            && self.snap.running[r as usize]
                                .workload
                                .reservation
                                .as_deref()
                                != Some(reservation.id.as_str())
                        {
                            evictions.push((r, index));
                        }
                    }
                }
                self.state.add_hold(
                    id,
                    Hold {
                        mask,
                        cpu: 0,
                        mem: 0,
                        from: reservation.start,
                        until: Some(reservation.end),
                        binding: true,
                        holder: HoldFor::Advance(ri),
                    },
                );
            }
        }
        evictions.sort_unstable();
        evictions.dedup_by_key(|(r, _)| *r);
        for (r, index) in evictions {
            let by = self.snap.reservations[index].id.clone();
            self.preempt(r, by, PreemptionCause::AdvanceReservation);
        }
    }

    fn preempt(&mut self, r: u32, by: String, cause: PreemptionCause) {
        let run = &mut self.runs[r as usize];
        if run.stopping {
            return;
        }
        run.stopping = true;
        let stop_at = self.now + self.policy.grace_seconds.max(0);
        self.state.set_release(Holder::Running(r), stop_at);
        self.decisions.preemptions.push(Preemption {
            workload: self.snap.running[r as usize].workload.id.clone(),
            by,
            cause,
            gpu_seconds_lost: self.runs[r as usize].loss,
            grace_seconds: self.policy.grace_seconds.max(0),
            stop_at,
        });
    }

    /// Why `workload` can never be admitted, if it cannot.
    fn refusal(&self, p: u32, could: &mut FastMap<(u32, u32), u32>) -> Option<RejectReason> {
        let workload = &self.snap.pending[p as usize];
        let prepared = &self.prepared[p as usize];
        let invalid = |message: &str| Some(RejectReason::Invalid(message.to_owned()));
        match workload.gpus {
            GpuRequest::Whole(k) if k as usize > crate::cluster::MAX_GPUS_PER_NODE => {
                return invalid("more GPUs per node than any node has");
            }
            GpuRequest::Milli(m) if m == 0 || m >= 1000 => {
                return invalid("a GPU fraction is 1 to 999 thousandths");
            }
            GpuRequest::Mig(0) => return invalid("a MIG request needs at least one slice"),
            GpuRequest::Milli(_) | GpuRequest::Mig(_) if workload.node_count > 1 => {
                return invalid("a GPU fraction runs on one node");
            }
            _ => {}
        }
        if workload.node_count == 0 {
            return invalid("node count must be at least 1");
        }
        if workload.gpus != GpuRequest::Whole(0) && workload.gpu_models.is_empty() {
            return invalid("no GPU model given");
        }
        if self.policy.quotas
            && !self.snap.queues.is_empty()
            && self
                .slot_ids
                .get(workload.queue.as_str())
                .is_none_or(|s| self.slots[*s].config.is_none())
        {
            return Some(RejectReason::UnknownQueue(workload.queue.clone()));
        }
        if let Some(id) = &workload.reservation {
            let fits = self.reservations.get(id.as_str()).is_some_and(|r| {
                let reservation = &self.snap.reservations[*r as usize];
                reservation.queue == workload.queue && reservation.end > self.now
            });
            if !fits {
                return Some(RejectReason::UnknownReservation(id.clone()));
            }
        }
        let best = prepared
            .models
            .iter()
            .map(|model| {
                *could
                    .entry((prepared.size, *model))
                    .or_insert_with(|| self.nodes_that_could(workload, *model, &prepared.regions))
            })
            .max()
            .unwrap_or(0);
        if best < workload.node_count {
            return Some(RejectReason::NeverFits {
                nodes_needed: workload.node_count,
                nodes_that_could: best,
            });
        }
        self.over_max(workload)
    }

    fn nodes_that_could(&self, workload: &Workload, model: u32, regions: &[u32]) -> u32 {
        let count = self
            .state
            .nodes_in(regions)
            .into_iter()
            .filter(|id| {
                let node = self.state.node(*id);
                let gpus = node.gpus.iter().filter(|g| g.model == model);
                workload.required_labels.is_subset(&node.node.labels)
                    && node.node.cpu_milli >= workload.cpu_milli_per_node
                    && node.node.memory_mib >= workload.memory_mib_per_node
                    && match workload.gpus {
                        GpuRequest::Whole(0) => true,
                        GpuRequest::Whole(k) => {
                            gpus.filter(|g| g.mig_slices.is_none()).count() >= k as usize
                        }
                        GpuRequest::Milli(_) => gpus.clone().any(|g| g.mig_slices.is_none()),
                        GpuRequest::Mig(s) => {
                            gpus.clone().any(|g| g.mig_slices.is_some_and(|t| t >= s))
                        }
                    }
            })
            .count();
        u32::try_from(count).unwrap_or(NONE)
    }

    fn over_max(&self, workload: &Workload) -> Option<RejectReason> {
        if !self.policy.quotas || workload.gpus == GpuRequest::Whole(0) {
            return None;
        }
        let config = self
            .slot_ids
            .get(workload.queue.as_str())
            .and_then(|s| self.slots[*s].config)?;
        let needed = workload.total_milli();
        let mut ceilings = Vec::new();
        for model in &workload.gpu_models {
            match config.quota(model).max {
                Some(max) if u64::from(max) * 1000 < needed => ceilings.push((max, model)),
                _ => return None,
            }
        }
        ceilings.sort();
        ceilings.last().map(|(max, model)| RejectReason::OverQuota {
            model: (*model).clone(),
            needed_milli: needed,
            max_milli: u64::from(*max) * 1000,
        })
    }

    /// The regions a workload may run in, resolved; `[]` for anywhere.
    fn all_regions(&self, workload: &Workload) -> Vec<u32> {
        if workload.regions.is_empty() {
            return Vec::new();
        }
        let resolved: Vec<u32> = workload
            .regions
            .iter()
            .filter_map(|r| self.state.regions.get(r))
            .collect();
        if resolved.is_empty() {
            vec![NONE]
        } else {
            resolved
        }
    }

    /// The regions to try, one group at a time: deferrable work tries the
    /// cheapest region now first, other work its home region first.
    fn region_groups(&self, workload: &Workload) -> Vec<Vec<u32>> {
        let regions = self.all_regions(workload);
        if regions.len() <= 1 {
            return vec![regions];
        }
        let mut groups: Vec<(u64, usize, u32)> = regions
            .iter()
            .enumerate()
            .map(|(position, region)| {
                let price = if self.policy.follow_the_sun && workload.class.is_deferrable() {
                    self.snap
                        .cluster
                        .region(self.state.regions.name(*region))
                        .and_then(|r| {
                            workload
                                .gpu_models
                                .iter()
                                .filter_map(|m| r.gpu_hour_price(m, self.now))
                                .min()
                        })
                        .unwrap_or(u64::MAX)
                } else {
                    0
                };
                (price, position, *region)
            })
            .collect();
        groups.sort_unstable();
        groups
            .into_iter()
            .map(|(_, _, region)| vec![region])
            .collect()
    }

    /// The off-peak window deferrable work waits for, when no region it may
    /// use is off-peak now and its deadline allows waiting.
    fn deferral(&self, workload: &Workload) -> Option<(String, i64)> {
        if !self.policy.follow_the_sun || !workload.class.is_deferrable() {
            return None;
        }
        let (deadline, duration) = (workload.deadline?, workload.duration_estimate?);
        let windows: Vec<&crate::cluster::Region> = workload
            .regions
            .iter()
            .filter_map(|r| self.snap.cluster.region(r))
            .filter(|r| r.off_peak.is_some())
            .collect();
        if windows.is_empty() || windows.iter().any(|r| r.is_off_peak(self.now)) {
            return None;
        }
        let (region, at) = windows
            .iter()
            .filter_map(|r| r.next_off_peak(self.now).map(|at| (at, r.name.clone())))
            .min()
            .map(|(at, name)| (name, at))?;
        (at - self.now <= self.policy.max_deferral && at.saturating_add(duration) <= deadline)
            .then_some((region, at))
    }

    fn score(&self, workload: &Workload) -> f64 {
        let waited_hours =
            (self.now - workload.submitted_at - self.policy.aging_after).max(0) as f64 / 3_600.0;
        let aging = (self.policy.aging_per_hour * waited_hours).min(self.policy.aging_cap);
        let urgency = workload.deadline.map_or(0.0, |deadline| {
            let slack = deadline - self.now - workload.duration_estimate.unwrap_or(0);
            let window = self.policy.deadline_window.max(1);
            if slack >= window {
                0.0
            } else {
                self.policy.deadline_boost * (1.0 - slack.max(0) as f64 / window as f64)
            }
        });
        class_points(workload.priority) + aging + urgency
    }

    /// A queue's weighted dominant share: its largest share of any GPU
    /// model, from decayed past usage and what it holds now, over its
    /// weight.
    fn share(&self, slot: usize) -> f64 {
        let half_life = self.snap.usage.half_life() as f64;
        let mut dominant: f64 = 0.0;
        for (model, capacity) in &self.state.capacity_milli {
            let capacity = *capacity as f64;
            if capacity <= 0.0 {
                continue;
            }
            let past = self.history.get(&(slot, *model)).copied().unwrap_or(0.0)
                * 1000.0
                * std::f64::consts::LN_2
                / half_life;
            let now = self.used.get(&(slot, *model)).copied().unwrap_or(0) as f64;
            dominant = dominant.max((past + now) / capacity);
        }
        dominant / self.slots[slot].weight
    }

    fn fairness(&self, slot: usize) -> f64 {
        self.fair.get(slot).copied().unwrap_or(0.0)
    }

    /// Recomputes a slot's fair-share penalty: up to half a class, growing
    /// with its weighted dominant share.
    fn refresh_fairness(&mut self, slot: usize) {
        if self.fair.len() < self.slots.len() {
            self.fair.resize(self.slots.len(), 0.0);
        }
        if self.policy.fair_share {
            let share = self.share(slot);
            self.fair[slot] = 500.0 * share / (1.0 + share);
        }
    }

    /// Resolves every pending workload's models, regions and shape once.
    fn prepare(&mut self) {
        let mut ids: FastMap<ShapeKey<'a>, u32> = FastMap::default();
        let mut sizes: FastMap<ShapeKey<'a>, u32> = FastMap::default();
        let pending = self.snap.pending;
        let prepared = pending
            .iter()
            .map(|workload| {
                let regions = self.all_regions(workload);
                let key = ShapeKey {
                    gpus: workload.gpus,
                    nodes: workload.node_count,
                    cpu: workload.cpu_milli_per_node,
                    mem: workload.memory_mib_per_node,
                    labels: &workload.required_labels,
                    regions: regions.clone(),
                    duration: workload.duration_estimate,
                    reservation: self.reservation_of(workload),
                };
                let size = ShapeKey {
                    duration: None,
                    reservation: None,
                    regions: key.regions.clone(),
                    ..key
                };
                let next_size = u32::try_from(sizes.len()).unwrap_or(NONE);
                let next = u32::try_from(ids.len()).unwrap_or(NONE);
                Prepared {
                    size: *sizes.entry(size).or_insert(next_size),
                    shape: *ids.entry(key).or_insert(next),
                    models: self.models_of(workload),
                    groups: self.region_groups(workload),
                    regions,
                }
            })
            .collect();
        self.prepared = prepared;
    }

    /// Rejects what can never run and ranks the rest, per queue.
    fn admit(&mut self) -> Vec<Vec<(u32, f64)>> {
        self.prepare();
        let mut could = FastMap::default();
        let mut seen: FastSet<&str> = FastSet::default();
        let mut lists: Vec<Vec<(u32, f64)>> = Vec::new();
        let mut shapes: FastMap<(u32, GpuRequest, u64, u64), f64> = FastMap::default();
        for (index, workload) in self.snap.pending.iter().enumerate() {
            let p = u32::try_from(index).unwrap_or(NONE);
            let refusal = if seen.insert(&workload.id) {
                self.refusal(p, &mut could)
            } else {
                Some(RejectReason::Invalid("duplicate workload id".to_owned()))
            };
            if let Some(reason) = refusal {
                self.decisions.rejections.push(Rejection {
                    workload: workload.id.clone(),
                    reason,
                });
                continue;
            }
            let slot = self.slot(&workload.queue);
            if lists.len() < self.slots.len() {
                lists.resize_with(self.slots.len(), Vec::new);
            }
            lists[slot].push((p, self.score(workload)));
            for model in self.prepared[index].models.iter().copied() {
                *shapes
                    .entry((
                        model,
                        workload.gpus,
                        workload.cpu_milli_per_node,
                        workload.memory_mib_per_node,
                    ))
                    .or_default() += 1.0;
            }
        }
        self.set_shapes(shapes);
        let pending = self.snap.pending;
        for (slot, list) in lists.iter_mut().enumerate() {
            let limit = self.slots[slot]
                .config
                .and_then(|q| q.max_pending)
                .filter(|_| self.policy.quotas);
            if let Some(limit) = limit
                && list.len() > limit as usize
            {
                list.sort_by(|a, b| {
                    let (wa, wb) = (&pending[a.0 as usize], &pending[b.0 as usize]);
                    wa.submitted_at
                        .cmp(&wb.submitted_at)
                        .then_with(|| wa.id.cmp(&wb.id))
                });
                for (p, _) in list.drain(limit as usize..) {
                    self.decisions.rejections.push(Rejection {
                        workload: pending[p as usize].id.clone(),
                        reason: RejectReason::QueueFull { limit },
                    });
                }
            }
            list.sort_by(|a, b| {
                let (wa, wb) = (&pending[a.0 as usize], &pending[b.0 as usize]);
                b.1.total_cmp(&a.1)
                    .then(wa.submitted_at.cmp(&wb.submitted_at))
                    .then_with(|| wa.id.cmp(&wb.id))
            });
        }
        lists
    }

    fn set_shapes(&mut self, counts: FastMap<(u32, GpuRequest, u64, u64), f64>) {
        let mut by_model: FastMap<u32, Vec<ShapeCount>> = FastMap::default();
        for ((model, gpus, cpu, mem), count) in counts {
            by_model
                .entry(model)
                .or_default()
                .push(((gpus, cpu, mem), count));
        }
        for (model, mut shapes) in by_model {
            shapes.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            shapes.truncate(SHAPES_PER_MODEL);
            let total: f64 = shapes.iter().map(|(_, count)| count).sum();
            self.shapes.insert(
                model,
                shapes
                    .into_iter()
                    .map(|((gpus, cpu, mem), count)| Shape {
                        gpus,
                        cpu,
                        mem,
                        weight: count / total,
                    })
                    .collect(),
            );
        }
    }

    fn head(&self, slot: usize, position: usize, ranked: &[Vec<(u32, f64)>]) -> Option<Head<'a>> {
        let pending = self.snap.pending;
        let (p, score) = ranked[slot].get(position)?;
        let workload = &pending[*p as usize];
        let within = self.prepared[*p as usize]
            .models
            .iter()
            .any(|model| self.quota(slot, workload, *model) == Ok(true));
        Some(Head {
            within,
            key: score - self.fairness(slot),
            submitted: workload.submitted_at,
            id: &workload.id,
            slot,
            position,
        })
    }

    fn run(&mut self, ranked: Vec<Vec<(u32, f64)>>) {
        for slot in 0..self.slots.len() {
            self.refresh_fairness(slot);
        }
        let mut heap: BinaryHeap<Head<'a>> = (0..ranked.len())
            .filter_map(|slot| self.head(slot, 0, &ranked))
            .collect();
        while let Some(head) = heap.pop() {
            let (p, _) = ranked[head.slot][head.position];
            self.process(p, head.slot);
            if let Some(next) = self.head(head.slot, head.position + 1, &ranked) {
                heap.push(next);
            }
        }
    }

    fn fit_key(&self, p: u32, model: u32, group: &[u32]) -> FitKey {
        (
            self.prepared[p as usize].shape,
            model,
            group.first().copied().unwrap_or(ANY),
        )
    }

    fn reservation_of(&self, workload: &Workload) -> Option<u32> {
        workload
            .reservation
            .as_deref()
            .and_then(|id| self.reservations.get(id).copied())
    }

    fn view(&self, workload: &Workload, from: i64) -> View {
        View {
            from,
            until: workload.duration_estimate.map(|d| from.saturating_add(d)),
            reservation: self.reservation_of(workload),
            tentative: false,
            binding: true,
        }
    }

    /// Whether `workload` may use `model` under its queue's quota: `Ok`
    /// with whether it stays within the guarantee, or the quota reason.
    fn quota(&self, slot: usize, workload: &Workload, model: u32) -> Result<bool, Reason> {
        let config = match self.slots[slot].config {
            Some(config) if self.policy.quotas && model != NONE => config,
            _ => return Ok(false),
        };
        let name = self.state.models.name(model);
        let quota = self.quotas.get(&(slot, model)).copied().unwrap_or_default();
        let used = self.used.get(&(slot, model)).copied().unwrap_or(0);
        let needed = workload.total_milli();
        let after = used + needed;
        let reason = |limit_milli: u64, limit: QuotaLimit| Reason::Quota {
            queue: config.name.clone(),
            model: name.to_owned(),
            used_milli: used,
            limit_milli,
            needed_milli: needed,
            limit,
        };
        if let Some(max) = quota.max
            && after > u64::from(max) * 1000
        {
            return Err(reason(u64::from(max) * 1000, QuotaLimit::Max));
        }
        let guaranteed = u64::from(quota.guaranteed) * 1000;
        if after <= guaranteed {
            return Ok(true);
        }
        if workload.priority == PriorityClass::Preemptible {
            return Ok(false);
        }
        match quota.borrow_limit {
            Some(limit) if after > guaranteed + u64::from(limit) * 1000 => Err(reason(
                guaranteed + u64::from(limit) * 1000,
                QuotaLimit::Borrowing,
            )),
            _ => Ok(false),
        }
    }

    fn process(&mut self, p: u32, slot: usize) {
        let pending = self.snap.pending;
        let workload = &pending[p as usize];
        let now = self.now;
        let mut wait = Wait {
            p,
            workload,
            models: self.prepared[p as usize].models.clone(),
            reasons: Vec::new(),
            estimate: None,
        };
        let window_opens = self
            .reservation_of(workload)
            .map(|r| self.snap.reservations[r as usize].start);
        let not_before = workload
            .earliest_start
            .into_iter()
            .chain(window_opens)
            .max()
            .unwrap_or(now);
        if not_before > now {
            wait.reasons.push(Reason::NotBefore { at: not_before });
            self.plan(p, &mut wait, not_before);
            self.waits.push(wait);
            return;
        }
        if let Some((region, at)) = self.deferral(workload) {
            wait.reasons.push(Reason::OffPeak { region, at });
            self.plan(p, &mut wait, at);
            self.waits.push(wait);
            return;
        }
        let mut allowed: Vec<(u32, bool)> = Vec::new();
        for model in &wait.models {
            match self.quota(slot, workload, *model) {
                Ok(within) => allowed.push((*model, within)),
                Err(reason) => wait.reasons.push(reason),
            }
        }
        if allowed.is_empty() {
            self.waits.push(wait);
            return;
        }
        wait.models = allowed.iter().map(|(m, _)| *m).collect();
        let groups = self.prepared[p as usize].groups.clone();
        for regions in &groups {
            for (model, _) in &allowed {
                if self.try_start(p, slot, *model, regions) {
                    return;
                }
            }
        }
        for regions in &groups {
            for (model, within) in &allowed {
                if let Some(reason) = self.try_preempt(p, slot, *model, *within, regions) {
                    wait.reasons.push(reason);
                    self.waits.push(wait);
                    return;
                }
            }
        }
        if let Some(model) = wait.models.first().copied() {
            let reasons = self.blocked_reasons(p, model);
            wait.reasons.extend(reasons);
        }
        self.plan(p, &mut wait, now);
        self.waits.push(wait);
    }

    fn try_start(&mut self, p: u32, slot: usize, model: u32, regions: &[u32]) -> bool {
        let workload = &self.snap.pending[p as usize];
        let view = self.view(workload, self.now);
        let key = self.fit_key(p, model, regions);
        if self.failed.contains(&key) {
            return false;
        }
        let demand = Demand {
            workload,
            model,
            regions: regions.to_vec(),
            view,
        };
        let Some(offers) = find(&self.state, &demand, self.policy.placement, &self.shapes) else {
            self.failed.insert(key);
            return false;
        };
        let release_at = workload
            .duration_estimate
            .map(|d| self.now.saturating_add(d));
        let mut placements = Vec::with_capacity(offers.len());
        for offer in offers {
            self.state.hold(
                offer.node,
                Alloc {
                    holder: Holder::Started(p),
                    mask: offer.mask,
                    units: offer.units,
                    cpu: workload.cpu_milli_per_node,
                    mem: workload.memory_mib_per_node,
                    release_at,
                },
            );
            let node = self.state.node(offer.node);
            placements.push(Placement {
                node: node.node.name.clone(),
                gpus: node.indices(offer.mask),
            });
        }
        *self.used.entry((slot, model)).or_default() += workload.total_milli();
        self.refresh_fairness(slot);
        self.epoch += 1;
        self.decisions.starts.push(Start {
            workload: workload.id.clone(),
            placements,
        });
        true
    }

    /// What running entry `r` is to a workload of `class` from `slot`,
    /// within its guarantee or not.
    fn status(&self, r: u32, class: PriorityClass, slot: usize, within: bool) -> Status {
        let run = &self.runs[r as usize];
        if run.stopping {
            return Status::Stopping;
        }
        let lower = run.class < class;
        let evictable = !run.protected
            && class != PriorityClass::Preemptible
            && ((self.policy.preemption && run.class == PriorityClass::Preemptible)
                || (self.policy.preemption && lower && (run.slot == slot || run.borrowing))
                || (self.policy.reclaim && within && run.slot != slot && run.borrowing));
        if !evictable {
            return Status::Kept;
        }
        Status::Evictable(Candidate {
            preemptible: run.class == PriorityClass::Preemptible,
            loss: run.loss,
        })
    }

    fn try_preempt(
        &mut self,
        p: u32,
        slot: usize,
        model: u32,
        within: bool,
        regions: &[u32],
    ) -> Option<Reason> {
        let workload = &self.snap.pending[p as usize];
        if !(self.policy.preemption || self.policy.reclaim)
            || workload.priority == PriorityClass::Preemptible
            || !matches!(workload.gpus, GpuRequest::Whole(k) if k > 0)
        {
            return None;
        }
        let view = self.view(workload, self.now);
        let key = (
            self.fit_key(p, model, regions),
            workload.priority,
            slot,
            within,
        );
        if self.failed_evictions.contains(&key) || self.searches >= self.policy.preemption_searches
        {
            return None;
        }
        self.searches += 1;
        let demand = Demand {
            workload,
            model,
            regions: regions.to_vec(),
            view,
        };
        let status = |r: u32| self.status(r, workload.priority, slot, within);
        let Some(eviction) = evict(&self.state, &demand, &status) else {
            self.failed_evictions.insert(key);
            return None;
        };
        let victims = eviction.victims.len();
        for r in eviction.victims {
            let run = &self.runs[r as usize];
            let cause = if run.class < workload.priority
                && (run.slot == slot || !within || !self.policy.reclaim)
            {
                PreemptionCause::Priority
            } else {
                PreemptionCause::Reclaim
            };
            self.preempt(r, workload.id.clone(), cause);
        }
        let stop_at = (victims > 0).then_some(self.now + self.policy.grace_seconds.max(0));
        for (node, mask) in eviction.nodes {
            self.state.add_hold(
                node,
                Hold {
                    mask,
                    cpu: workload.cpu_milli_per_node,
                    mem: workload.memory_mib_per_node,
                    from: self.now,
                    until: None,
                    binding: true,
                    holder: HoldFor::Preemptor(p),
                },
            );
        }
        self.epoch += 1;
        let stopping = self.runs.iter().filter(|r| r.stopping).count();
        Some(Reason::WaitingForPreemption {
            victims: u32::try_from(if victims > 0 {
                victims
            } else {
                stopping.min(1)
            })
            .unwrap_or(NONE),
            until: stop_at.into_iter().chain(eviction.ready_at).max(),
        })
    }

    /// Plans the earliest start of a blocked workload and holds its GPUs:
    /// bindingly for the first `reservation_depth`, which backfill must not
    /// delay, tentatively for estimates only after that.
    fn plan(&mut self, p: u32, wait: &mut Wait<'a>, not_before: i64) {
        if self.planned >= self.policy.planning_depth {
            return;
        }
        self.planned += 1;
        let workload = wait.workload;
        let mut best: Option<crate::plan::Plan> = None;
        for regions in self.prepared[p as usize].groups.clone() {
            for model in &wait.models {
                let demand = Demand {
                    workload,
                    model: *model,
                    regions: regions.clone(),
                    view: View {
                        tentative: true,
                        ..self.view(workload, not_before)
                    },
                };
                if let Some(plan) = earliest(&self.state, &demand, not_before)
                    && best.as_ref().is_none_or(|b| plan.at < b.at)
                {
                    best = Some(plan);
                }
            }
        }
        let Some(plan) = best else {
            return;
        };
        let mut rests_on: Vec<String> = plan
            .nodes
            .iter()
            .flat_map(|(id, mask)| {
                self.state
                    .node(*id)
                    .allocs
                    .iter()
                    .filter(|a| {
                        a.mask & mask != 0
                            && a.release_at
                                .is_some_and(|at| at > self.now && at <= plan.at)
                    })
                    .map(|a| a.holder)
                    .collect::<Vec<_>>()
            })
            .map(|holder| self.holder_name(holder))
            .collect();
        rests_on.sort();
        rests_on.dedup();
        wait.estimate = Some((plan.at, rests_on));
        let binding = self.policy.backfill && self.reserved < self.policy.reservation_depth;
        if binding {
            self.reserved += 1;
            self.decisions.reservations.push(Reservation {
                workload: workload.id.clone(),
                start_at: plan.at,
                placements: plan
                    .nodes
                    .iter()
                    .map(|(id, mask)| Placement {
                        node: self.state.node(*id).node.name.clone(),
                        gpus: self.state.node(*id).indices(*mask),
                    })
                    .collect(),
            });
        }
        let until = workload
            .duration_estimate
            .map(|d| plan.at.saturating_add(d));
        self.epoch += 1;
        for (node, mask) in plan.nodes {
            self.state.add_hold(
                node,
                Hold {
                    mask,
                    cpu: workload.cpu_milli_per_node,
                    mem: workload.memory_mib_per_node,
                    from: plan.at,
                    until,
                    binding,
                    holder: HoldFor::Planned(p),
                },
            );
        }
    }

    fn hold_name(&self, holder: HoldFor) -> String {
        match holder {
            HoldFor::Planned(p) | HoldFor::Preemptor(p) => self.snap.pending[p as usize].id.clone(),
            HoldFor::Advance(r) => self.snap.reservations[r as usize].id.clone(),
        }
    }

    /// Free GPUs of `model` where `workload` may run, nodes with room for
    /// its per-node share, and the most free on one node. From the index
    /// unless labels narrow the nodes; held GPUs count as free here (the
    /// holds have their own reason).
    fn free_counts(
        &self,
        workload: &Workload,
        model: u32,
        regions: &[u32],
        per_node: u32,
    ) -> (u32, u32, u32) {
        if workload.required_labels.is_empty() {
            return self.state.free_summary(model, regions, per_node);
        }
        let mut counts = (0, 0, 0);
        for id in self.state.nodes_in(regions) {
            let node = self.state.node(id);
            if eligible(node, workload) {
                let free = bits(node.free_whole & node.model_mask(model));
                counts.0 += free;
                counts.1 += u32::from(free >= per_node);
                counts.2 = counts.2.max(free);
            }
        }
        counts
    }

    /// The reason a workload blocked on capacity waits, with the numbers.
    fn capacity_reason(&self, workload: &Workload, model: u32, regions: &[u32]) -> Reason {
        let name = self.state.models.name(model).to_owned();
        let GpuRequest::Whole(per_node) = workload.gpus else {
            let free_milli: u64 = self
                .state
                .nodes_in(regions)
                .into_iter()
                .map(|id| self.state.node(id))
                .filter(|node| eligible(node, workload))
                .flat_map(|node| node.gpus.iter())
                .filter(|g| g.model == model && g.healthy)
                .map(|g| u64::from(g.capacity() - g.used) * 1000 / u64::from(g.capacity()))
                .sum();
            return Reason::Capacity {
                model: name,
                free_milli,
                needed_milli: workload.total_milli(),
                next_release: None,
            };
        };
        let (free_total, with_room, largest) = self.free_counts(workload, model, regions, per_node);
        let needed = per_node * workload.node_count;
        if free_total < needed {
            return Reason::Capacity {
                model: name,
                free_milli: u64::from(free_total) * 1000,
                needed_milli: u64::from(needed) * 1000,
                next_release: None,
            };
        }
        if with_room >= workload.node_count {
            return Reason::CpuOrMemory {
                nodes_with_free_gpus: with_room,
            };
        }
        Reason::Fragmentation {
            model: name,
            free_gpus: free_total,
            gpus_per_node: per_node,
            nodes_needed: workload.node_count,
            nodes_with_room: with_room,
            largest_free_on_one_node: largest,
            next_release: None,
        }
    }

    /// The first node expected to free enough GPUs of `model` for one node's
    /// share of `workload`, as the cycle ends: the counterfactual behind a
    /// capacity reason.
    fn next_release(
        &self,
        workload: &Workload,
        model: u32,
        regions: &[u32],
    ) -> Option<NextRelease> {
        let GpuRequest::Whole(per_node) = workload.gpus else {
            return None;
        };
        let view = self.view(workload, self.now);
        let mut next: Option<(i64, u32, Holder)> = None;
        for id in self.state.nodes_in(regions) {
            let node = self.state.node(id);
            if !eligible(node, workload) || !node.has_model(model) {
                continue;
            }
            let room = node.room(model, view, self.now);
            let free = bits(room.mask);
            let model_mask: Mask = node.model_mask(model);
            for alloc in &node.allocs {
                if let Some(at) = alloc.release_at
                    && at > self.now
                    && free + bits(alloc.mask & model_mask & !room.held) >= per_node
                    && next.is_none_or(|(best, ..)| at < best)
                {
                    next = Some((at, id, alloc.holder));
                }
            }
        }
        next.map(|(at, id, holder)| NextRelease {
            at,
            workload: self.holder_name(holder),
            node: self.state.node(id).node.name.clone(),
        })
    }

    /// Whether holds for others are what keeps `workload` waiting: the
    /// first hold on the GPUs it would get if no hold counted.
    fn held_for(&self, workload: &Workload, model: u32, regions: &[u32]) -> Option<Reason> {
        let view = View {
            binding: false,
            ..self.view(workload, self.now)
        };
        let demand = Demand {
            workload,
            model,
            regions: regions.to_vec(),
            view,
        };
        let offers = find(&self.state, &demand, self.policy.placement, &self.shapes)?;
        let own = self.view(workload, self.now);
        offers
            .iter()
            .flat_map(|offer| {
                self.state
                    .node(offer.node)
                    .holds
                    .iter()
                    .filter(move |h| h.binding && h.mask & offer.mask != 0)
            })
            .filter(|h| h.overlaps(own.from, own.until))
            .min_by_key(|h| h.from)
            .map(|hold| Reason::HeldForReservation {
                holder: self.hold_name(hold.holder),
                from: hold.from,
                fits_with_shorter_estimate: hold.from > self.now,
            })
    }

    /// Why a workload blocked on capacity waits, as the cluster stands when
    /// it was considered: the holds in its way and the capacity numbers.
    fn blocked_reasons(&mut self, p: u32, model: u32) -> Vec<Reason> {
        let key = ((self.prepared[p as usize].shape, model, ANY), self.epoch);
        if let Some(found) = self.reasons.get(&key) {
            return found.clone();
        }
        let workload = &self.snap.pending[p as usize];
        let regions = &self.prepared[p as usize].regions;
        let held = if self.state.binding_holds > 0 {
            self.held_for(workload, model, regions)
        } else {
            None
        };
        // When holds are all that is in the way, capacity is not.
        let found = match held {
            Some(held) => vec![held],
            None => vec![self.capacity_reason(workload, model, regions)],
        };
        self.reasons.insert(key, found.clone());
        found
    }

    fn explain(&mut self) {
        let waits = std::mem::take(&mut self.waits);
        let mut ahead: FastMap<u32, u32> = FastMap::default();
        let mut releases: FastMap<(u32, u32), Option<NextRelease>> = FastMap::default();
        for mut wait in waits {
            let p = wait.p as usize;
            for reason in &mut wait.reasons {
                if let (
                    Reason::Capacity { next_release, .. }
                    | Reason::Fragmentation { next_release, .. },
                    Some(model),
                ) = (reason, wait.models.first().copied())
                {
                    *next_release = releases
                        .entry((self.prepared[p].shape, model))
                        .or_insert_with(|| {
                            self.next_release(wait.workload, model, &self.prepared[p].regions)
                        })
                        .clone();
                }
            }
            let before = wait
                .models
                .iter()
                .filter_map(|m| ahead.get(m))
                .copied()
                .max()
                .unwrap_or(0);
            if before > 0 {
                wait.reasons
                    .push(Reason::BehindHigherRanked { ahead: before });
            }
            for model in &wait.models {
                *ahead.entry(*model).or_default() += 1;
            }
            let (estimated_start, estimate_rests_on) = wait.estimate.unzip();
            self.decisions.waiting.push(Waiting {
                workload: wait.workload.id.clone(),
                reasons: wait.reasons,
                estimated_start,
                estimate_rests_on: estimate_rests_on.unwrap_or_default(),
            });
        }
        self.decisions
            .rejections
            .sort_by(|a, b| a.workload.cmp(&b.workload));
    }
}
