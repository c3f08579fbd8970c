//! One scheduling cycle: admission, ranking by class, aging, deadlines and
//! fair share, placement, preemption, backfill planning, and the reasons for
//! everything that waits.

use std::collections::BTreeSet;
use std::rc::Rc;

use crate::cluster::Cluster;
use crate::decision::{Decisions, EstimateConfidence, Reason, Reservation, Start};
use crate::placement::{Demand, Shapes, find};
use crate::plan::earliest;
use crate::policy::{Backfill, Policy};
use crate::queue::{Queue, Quota};
use crate::report::{Asked, Reports};
use crate::state::{Alloc, FastMap, FastSet, Hold, HoldFor, Holder, Mask, State, View, WHOLE};
use crate::usage::UsageLedger;
use crate::workload::{
    AdvanceReservation, GpuRequest, Placement, PriorityClass, Running, Workload,
};

mod admission;
mod preemption;
mod ranking;
mod reasons;
mod regions;

/// Stands for "no GPU model" in CPU-only work and for "no such region".
const NONE: u32 = crate::state::NO_MODEL;

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

/// A [`Snapshot`] that owns what it holds: what the server loads for a
/// cycle, what a what-if changes, what tests build.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OwnedSnapshot {
    /// Nodes, GPUs and regions.
    pub cluster: Cluster,
    /// Queues.
    pub queues: Vec<Queue>,
    /// Work holding GPUs now.
    pub running: Vec<Running>,
    /// Work waiting.
    pub pending: Vec<Workload>,
    /// Advance reservations.
    pub reservations: Vec<AdvanceReservation>,
    /// Decayed past usage per queue.
    pub usage: UsageLedger,
    /// The cycle's time, seconds since the epoch.
    pub now: i64,
}

impl OwnedSnapshot {
    /// The borrowed view a cycle reads.
    pub fn snapshot(&self) -> Snapshot<'_> {
        Snapshot {
            cluster: &self.cluster,
            queues: &self.queues,
            running: &self.running,
            pending: &self.pending,
            reservations: &self.reservations,
            usage: &self.usage,
            now: self.now,
        }
    }

    /// One cycle's decisions under `policy`.
    pub fn decide(&self, policy: &Policy) -> Decisions {
        schedule(&self.snapshot(), policy)
    }

    /// [`schedule_reporting`] of this snapshot.
    pub fn decide_reporting(&self, policy: &Policy, asked: &Asked<'_>) -> (Decisions, Reports) {
        schedule_reporting(&self.snapshot(), policy, asked)
    }
}

/// What a workload needs of each node, and of how many: two workloads of
/// one size fit or fail together within a cycle, but for when they would
/// end and any reservation they run in.
#[derive(Clone, PartialEq, Eq, Hash)]
struct ShapeKey<'a> {
    gpus: GpuRequest,
    nodes: u32,
    cpu: u64,
    mem: u64,
    labels: &'a BTreeSet<String>,
    regions: &'a [String],
}

/// A shape, a GPU model and a region group (or `ANY`).
type FitKey = (u32, u32, u32);

/// The region key of a group that may use any region.
const ANY: u32 = u32::MAX - 1;

/// What a cycle resolves about a pending workload once.
struct Prepared {
    shape: u32,
    /// The shape without duration or reservation: what decides whether it
    /// could ever fit.
    size: u32,
    /// Shared by the run of workloads that resolve alike.
    models: Rc<[u32]>,
    regions: Rc<[u32]>,
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
    estimate: Option<Estimate>,
}

/// A waiting workload's planned start.
struct Estimate {
    at: i64,
    rests_on: Vec<String>,
    confidence: EstimateConfidence,
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
    /// Set once work blocks under strict order: nothing after it starts.
    closed: bool,
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

/// [`schedule`], and the reports `asked` names, read off the same
/// preparation of the snapshot before anything is placed: a leader that
/// publishes capacity does not prepare the cluster twice.
pub fn schedule_reporting(
    snapshot: &Snapshot<'_>,
    policy: &Policy,
    asked: &Asked<'_>,
) -> (Decisions, Reports) {
    let mut cycle = prepared(snapshot, policy);
    let reports = crate::report::reports(cycle.state(), snapshot.pending, asked);
    let ranked = cycle.admit();
    cycle.run(ranked);
    cycle.explain();
    (cycle.decisions, reports)
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
            shapes: Shapes::default(),
            prepared: Vec::new(),
            failed: FastSet::default(),
            failed_evictions: FastSet::default(),
            planned: 0,
            reserved: 0,
            searches: 0,
            closed: false,
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
                loss: milli as f64 / 1000.0 * now.saturating_sub(since).max(0) as f64,
                protected: now.saturating_sub(run.started_at) < run.workload.min_runtime,
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

    fn process(&mut self, p: u32, slot: usize) {
        let pending = self.snap.pending;
        let workload = &pending[p as usize];
        let now = self.now;
        let mut wait = Wait {
            p,
            workload,
            models: self.prepared[p as usize].models.to_vec(),
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
        if self.closed {
            self.waits.push(wait);
            return;
        }
        let groups = self.region_groups(workload);
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
        if let Some(model) = wait.models.first().copied().filter(|_| self.policy.reasons) {
            let reasons = self.blocked_reasons(p, model);
            wait.reasons.extend(reasons);
        }
        self.closed = self.policy.backfill == Backfill::None;
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
        let Some(offers) = find(&self.state, &demand, self.policy, &self.shapes) else {
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
        for regions in self.region_groups(workload) {
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
        let binding =
            self.policy.backfill == Backfill::Easy && self.reserved < self.policy.reservation_depth;
        wait.estimate = Some(Estimate {
            at: plan.at,
            rests_on,
            confidence: if binding {
                EstimateConfidence::Reserved
            } else {
                EstimateConfidence::Planned
            },
        });
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
        let hold = Hold {
            mask: 0,
            cpu: workload.cpu_milli_per_node,
            mem: workload.memory_mib_per_node,
            from: plan.at,
            until: workload
                .duration_estimate
                .map(|d| plan.at.saturating_add(d)),
            binding,
            holder: HoldFor::Planned(p),
        };
        self.hold_nodes(&plan.nodes, &hold);
    }

    /// Holds the given GPUs of each node, with `hold`'s CPU, memory, window
    /// and holder.
    fn hold_nodes(&mut self, nodes: &[(u32, Mask)], hold: &Hold) {
        self.epoch += 1;
        for (node, mask) in nodes {
            self.state.add_hold(
                *node,
                Hold {
                    mask: *mask,
                    ..*hold
                },
            );
        }
    }
}
