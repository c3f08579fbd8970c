//! Defragmentation: when work that needs whole nodes (or many GPUs on each
//! node) waits on fragmentation while enough GPUs are free in all, a plan of
//! moves of checkpointable or preemptible work that frees the nodes it
//! needs, within a disruption budget per queue and hour.

use std::collections::{BTreeMap, BTreeSet};

use crate::cluster::Node;
use crate::decision::{Decisions, Preemption, PreemptionCause, Reason};
use crate::policy::Policy;
use crate::schedule::{Snapshot, schedule};
use crate::workload::{GpuRequest, Placement, PriorityClass, Running, Workload};

/// How much disruption moves may cause.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DisruptionBudget {
    /// GPU-seconds of work each queue may lose to moves per hour.
    pub gpu_seconds_per_queue_hour: f64,
    /// What each queue has lost to moves in the past hour.
    pub spent: BTreeMap<String, f64>,
}

impl DisruptionBudget {
    fn left(&self, queue: &str) -> f64 {
        self.gpu_seconds_per_queue_hour - self.spent.get(queue).copied().unwrap_or(0.0)
    }
}

/// The moves of the past hour, from which each plan's budget is drawn.
#[derive(Debug, Clone, Default)]
pub struct DisruptionLedger {
    /// When each move was made, for which queue, at what cost.
    moves: Vec<(i64, String, f64)>,
}

impl DisruptionLedger {
    /// What each queue may still lose now, `per_hour` being the hourly
    /// allowance; moves older than an hour are forgotten.
    pub fn budget(&mut self, per_hour: f64, now: i64) -> DisruptionBudget {
        self.moves
            .retain(|(at, _, _)| *at > now.saturating_sub(3_600));
        let mut spent: BTreeMap<String, f64> = BTreeMap::new();
        for (_, queue, lost) in &self.moves {
            *spent.entry(queue.clone()).or_default() += lost;
        }
        DisruptionBudget {
            gpu_seconds_per_queue_hour: per_hour,
            spent,
        }
    }

    /// Records `plan`'s moves as made at `now`.
    pub fn record(&mut self, plan: &DefragPlan, now: i64) {
        for m in plan.steps.iter().flat_map(|s| &s.moves) {
            self.moves.push((now, m.queue.clone(), m.lost_gpu_seconds));
        }
    }
}

/// One running workload to move.
#[derive(Debug, Clone, PartialEq)]
pub struct Move {
    /// The running workload.
    pub workload: String,
    /// Its queue, whose budget pays.
    pub queue: String,
    /// It is told to checkpoint and restarts from there; otherwise it is
    /// preemptible and restarts from its last checkpoint or the start.
    pub checkpoint: bool,
    /// Where it runs.
    pub from: Placement,
    /// Where it restarts.
    pub to: Placement,
    /// GPU-seconds of work lost: its GPUs through the grace period, and for
    /// work that is not told to checkpoint, the work since its last one.
    pub lost_gpu_seconds: f64,
}

/// The moves that let one waiting workload start.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The waiting workload.
    pub workload: String,
    /// The nodes it would start on once the moves are done.
    pub nodes: Vec<String>,
    /// The moves, possibly none where a node is free already.
    pub moves: Vec<Move>,
    /// Their cost.
    pub lost_gpu_seconds: f64,
}

/// A defragmentation plan.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DefragPlan {
    /// One step per waiting workload it lets start, in rank order.
    pub steps: Vec<Step>,
    /// GPU-seconds lost in all.
    pub lost_gpu_seconds: f64,
    /// Waiting workloads blocked by fragmentation that no move within the
    /// budget can help.
    pub unhelped: Vec<String>,
}

impl DefragPlan {
    /// The plan's moves as preemptions, for a caller that moves work by
    /// stopping it and letting the engine place it again: each is told now
    /// and stops after the policy's grace period.
    pub fn preemptions(&self, policy: &Policy, now: i64) -> Vec<Preemption> {
        self.steps
            .iter()
            .flat_map(|step| {
                step.moves.iter().map(|m| Preemption {
                    workload: m.workload.clone(),
                    by: step.workload.clone(),
                    cause: PreemptionCause::Defragmentation,
                    gpu_seconds_lost: m.lost_gpu_seconds,
                    grace_seconds: policy.grace_seconds,
                    stop_at: now.saturating_add(policy.grace_seconds),
                })
            })
            .collect()
    }
}

/// One node as the planner sees it.
struct Host<'a> {
    node: &'a Node,
    /// Healthy, unused whole GPUs of each model.
    free: BTreeMap<&'a str, BTreeSet<u32>>,
    cpu_free: u64,
    mem_free: u64,
    /// Running work that may be moved off it, by index.
    movable: Vec<usize>,
    /// Already promised to a step.
    taken: bool,
}

impl<'a> Host<'a> {
    /// Takes `gpus` and the workload's CPU and memory off what is free.
    fn occupy(&mut self, gpus: &[u32], workload: &Workload) {
        for free in self.free.values_mut() {
            for gpu in gpus {
                free.remove(gpu);
            }
        }
        self.cpu_free = self.cpu_free.saturating_sub(workload.cpu_milli_per_node);
        self.mem_free = self.mem_free.saturating_sub(workload.memory_mib_per_node);
    }

    fn free_of(&self, model: &str) -> usize {
        self.free.get(model).map_or(0, BTreeSet::len)
    }

    fn may_host(&self, workload: &Workload, model: &str, gpus: usize) -> bool {
        self.node.schedulable
            && workload.required_labels.is_subset(&self.node.labels)
            && (workload.regions.is_empty() || workload.regions.contains(&self.node.region))
            && self
                .node
                .gpus
                .iter()
                .filter(|g| g.healthy && g.mig_slices.is_none() && g.model == model)
                .count()
                >= gpus
            && self.node.cpu_milli >= workload.cpu_milli_per_node
            && self.node.memory_mib >= workload.memory_mib_per_node
    }
}

/// The one placement and the GPU count of single-node, whole-GPU work.
fn whole_gpus(run: &Running) -> Option<(&Placement, u32)> {
    match (run.workload.gpus, run.placements.as_slice()) {
        (GpuRequest::Whole(k), [placement]) if k > 0 => Some((placement, k)),
        _ => None,
    }
}

/// Whether `run` may be moved now: single-node whole-GPU work that can
/// checkpoint or is preemptible, past its minimum runtime, not stopping.
fn movable(run: &Running, now: i64) -> bool {
    let workload = &run.workload;
    whole_gpus(run).is_some()
        && (workload.checkpointable || workload.priority == PriorityClass::Preemptible)
        && run.stopping_at.is_none()
        && now.saturating_sub(run.started_at) >= workload.min_runtime
}

/// What moving `run` now costs in GPU-seconds, or `None` when it may not
/// be moved.
fn cost(run: &Running, policy: &Policy, now: i64) -> Option<f64> {
    let (_, gpus) = whole_gpus(run).filter(|_| movable(run, now))?;
    let since = run
        .last_checkpoint_at
        .unwrap_or(run.started_at)
        .max(run.started_at);
    let lost_seconds = if run.workload.checkpointable {
        policy.grace_seconds
    } else {
        policy.grace_seconds + now.saturating_sub(since)
    };
    Some(f64::from(gpus) * lost_seconds.max(0) as f64)
}

/// A plan that lets waiting work blocked by fragmentation start, cheapest
/// moves first, taking waiting work in rank order: for each, the nodes
/// whose free GPUs plus those of movable work cover its need, each moved
/// workload restarting at once on GPUs free elsewhere. Moves never leave
/// work waiting, never touch protected, stopping or multi-node work, and
/// keep each queue within `budget`.
pub fn plan_defragmentation(
    snapshot: &Snapshot<'_>,
    policy: &Policy,
    budget: &DisruptionBudget,
) -> DefragPlan {
    // The plan reads why work waits, whatever the caller's policy says.
    let explained = Policy {
        reasons: true,
        ..policy.clone()
    };
    let decisions = schedule(snapshot, &explained);
    plan_for_decisions(snapshot, &decisions, policy, budget)
}

/// [`plan_defragmentation`] for a caller that already holds the cycle's
/// `decisions` for `snapshot`, made with reasons: the engine is not run
/// again.
pub fn plan_for_decisions(
    snapshot: &Snapshot<'_>,
    decisions: &Decisions,
    policy: &Policy,
    budget: &DisruptionBudget,
) -> DefragPlan {
    let mut hosts = hosts(snapshot);
    let mut budget = budget.clone();
    let mut plan = DefragPlan::default();
    let pending: BTreeMap<&str, &Workload> = snapshot
        .pending
        .iter()
        .map(|w| (w.id.as_str(), w))
        .collect();
    // What the cycle starts is not free to land on.
    for start in &decisions.starts {
        let Some(workload) = pending.get(start.workload.as_str()) else {
            continue;
        };
        for placement in &start.placements {
            if let Some(host) = hosts.iter_mut().find(|h| h.node.name == placement.node) {
                host.occupy(&placement.gpus, workload);
            }
        }
    }
    for waiting in &decisions.waiting {
        if !waiting
            .reasons
            .iter()
            .any(|r| matches!(r, Reason::Fragmentation { .. }))
        {
            continue;
        }
        let Some(workload) = pending.get(waiting.workload.as_str()) else {
            continue;
        };
        match step(snapshot, policy, &mut hosts, &budget, workload) {
            Some(step) => {
                for m in &step.moves {
                    *budget.spent.entry(m.queue.clone()).or_default() += m.lost_gpu_seconds;
                }
                plan.lost_gpu_seconds += step.lost_gpu_seconds;
                plan.steps.push(step);
            }
            None => plan.unhelped.push(workload.id.clone()),
        }
    }
    plan
}

fn hosts<'a>(snapshot: &Snapshot<'a>) -> Vec<Host<'a>> {
    let mut index: BTreeMap<&str, usize> = BTreeMap::new();
    let mut hosts: Vec<Host<'a>> = Vec::with_capacity(snapshot.cluster.nodes.len());
    for node in &snapshot.cluster.nodes {
        let mut free: BTreeMap<&str, BTreeSet<u32>> = BTreeMap::new();
        for gpu in node
            .gpus
            .iter()
            .filter(|g| g.healthy && g.mig_slices.is_none())
        {
            free.entry(gpu.model.as_str())
                .or_default()
                .insert(gpu.index);
        }
        index.insert(node.name.as_str(), hosts.len());
        hosts.push(Host {
            node,
            free,
            cpu_free: node.cpu_milli,
            mem_free: node.memory_mib,
            movable: Vec::new(),
            taken: false,
        });
    }
    let current = snapshot
        .reservations
        .iter()
        .filter(|r| r.start <= snapshot.now && snapshot.now < r.end)
        .flat_map(|r| r.placements.iter());
    for placement in current {
        if let Some(host) = index.get(placement.node.as_str()).map(|i| &mut hosts[*i]) {
            host.taken = true;
        }
    }
    for (r, run) in snapshot.running.iter().enumerate() {
        for placement in &run.placements {
            let Some(host) = index.get(placement.node.as_str()).map(|i| &mut hosts[*i]) else {
                continue;
            };
            host.occupy(&placement.gpus, &run.workload);
            if movable(run, snapshot.now) {
                host.movable.push(r);
            }
        }
    }
    hosts
}

/// The model of `run`'s GPUs on `host`.
fn model_of<'a>(host: &Host<'a>, placement: &Placement) -> Option<&'a str> {
    host.node
        .gpus
        .iter()
        .find(|g| placement.gpus.contains(&g.index))
        .map(|g| g.model.as_str())
}

/// The moves that free one node for `workload`, each with its cost, and
/// their total.
fn clear(
    snapshot: &Snapshot<'_>,
    policy: &Policy,
    host: &Host<'_>,
    budget: &DisruptionBudget,
    workload: &Workload,
    model: &str,
    gpus: usize,
) -> Option<(f64, Vec<(usize, f64)>)> {
    let mut need = gpus.saturating_sub(host.free_of(model));
    let mut cpu = host.cpu_free;
    let mut mem = host.mem_free;
    let mut candidates: Vec<(f64, usize)> = host
        .movable
        .iter()
        .filter_map(|r| {
            let run = &snapshot.running[*r];
            let (placement, _) = whole_gpus(run)?;
            (model_of(host, placement) == Some(model))
                .then(|| cost(run, policy, snapshot.now))
                .flatten()
                .filter(|c| *c <= budget.left(&run.workload.queue))
                .map(|c| (c, *r))
        })
        .collect();
    candidates.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut chosen = Vec::new();
    let mut total = 0.0;
    for (c, r) in candidates {
        if need == 0 && cpu >= workload.cpu_milli_per_node && mem >= workload.memory_mib_per_node {
            break;
        }
        let run = &snapshot.running[r];
        need = need.saturating_sub(run.placements[0].gpus.len());
        cpu += run.workload.cpu_milli_per_node;
        mem += run.workload.memory_mib_per_node;
        total += c;
        chosen.push((r, c));
    }
    (need == 0 && cpu >= workload.cpu_milli_per_node && mem >= workload.memory_mib_per_node)
        .then_some((total, chosen))
}

fn step(
    snapshot: &Snapshot<'_>,
    policy: &Policy,
    hosts: &mut [Host<'_>],
    budget: &DisruptionBudget,
    workload: &Workload,
) -> Option<Step> {
    let GpuRequest::Whole(k) = workload.gpus else {
        return None;
    };
    let gpus = usize::try_from(k).ok()?;
    let count = usize::try_from(workload.node_count).ok()?;
    for model in &workload.gpu_models {
        let mut options: Vec<Clearing> = hosts
            .iter()
            .enumerate()
            .filter(|(_, h)| !h.taken && h.may_host(workload, model, gpus))
            .filter_map(|(i, h)| {
                clear(snapshot, policy, h, budget, workload, model, gpus)
                    .map(|(cost, moves)| (cost, i, moves))
            })
            .collect();
        if options.len() < count {
            continue;
        }
        options.sort_by(|a, b| {
            a.0.total_cmp(&b.0)
                .then(a.2.len().cmp(&b.2.len()))
                .then(hosts[a.1].node.name.cmp(&hosts[b.1].node.name))
        });
        options.truncate(count);
        if let Some(step) = commit(snapshot, hosts, budget, workload, model, &options) {
            return Some(step);
        }
    }
    None
}

/// A node to clear: the cost, the node's index, and the running work to
/// move off it with each one's cost.
type Clearing = (f64, usize, Vec<(usize, f64)>);

/// Re-places the moved work elsewhere (on GPUs of `model`, which is what
/// [`clear`] moves) and, when all of it fits, takes the chosen nodes for
/// `workload`.
fn commit(
    snapshot: &Snapshot<'_>,
    hosts: &mut [Host<'_>],
    budget: &DisruptionBudget,
    workload: &Workload,
    model: &str,
    options: &[Clearing],
) -> Option<Step> {
    let chosen: BTreeSet<usize> = options.iter().map(|o| o.1).collect();
    let mut moved: Vec<(usize, f64)> = options.iter().flat_map(|o| o.2.iter().copied()).collect();
    // The widest first: they are the hardest to place.
    moved.sort_by_key(|(r, _)| std::cmp::Reverse(snapshot.running[*r].placements[0].gpus.len()));
    let mut spent: BTreeMap<&str, f64> = BTreeMap::new();
    let mut landing: Vec<(usize, f64, usize, Vec<u32>)> = Vec::new();
    let mut claimed: BTreeMap<usize, (BTreeSet<u32>, u64, u64)> = BTreeMap::new();
    for &(r, c) in &moved {
        let run = &snapshot.running[r];
        let queue = run.workload.queue.as_str();
        let total = spent.entry(queue).or_default();
        *total += c;
        if *total > budget.left(queue) {
            return None;
        }
        let k = run.placements[0].gpus.len();
        let (_, host, gpus) = hosts
            .iter()
            .enumerate()
            .filter(|(i, h)| !chosen.contains(i) && !h.taken && h.may_host(&run.workload, model, k))
            .filter_map(|(i, h)| {
                let (used, cpu, mem) = claimed.get(&i).cloned().unwrap_or_default();
                let free: Vec<u32> = h
                    .free
                    .get(model)?
                    .iter()
                    .filter(|g| !used.contains(g))
                    .copied()
                    .collect();
                (free.len() >= k
                    && h.cpu_free >= cpu + run.workload.cpu_milli_per_node
                    && h.mem_free >= mem + run.workload.memory_mib_per_node)
                    .then(|| (free.len() - k, i, free[..k].to_vec()))
            })
            .min_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)))?;
        let entry = claimed.entry(host).or_default();
        entry.0.extend(gpus.iter().copied());
        entry.1 += run.workload.cpu_milli_per_node;
        entry.2 += run.workload.memory_mib_per_node;
        landing.push((r, c, host, gpus));
    }
    let mut moves = Vec::with_capacity(landing.len());
    let mut lost = 0.0;
    for (r, c, host, gpus) in landing {
        let run = &snapshot.running[r];
        lost += c;
        let h = &mut hosts[host];
        h.occupy(&gpus, &run.workload);
        h.movable.retain(|m| *m != r);
        moves.push(Move {
            workload: run.workload.id.clone(),
            queue: run.workload.queue.clone(),
            checkpoint: run.workload.checkpointable,
            from: run.placements[0].clone(),
            to: Placement {
                node: h.node.name.clone(),
                gpus,
            },
            lost_gpu_seconds: c,
        });
    }
    for index in &chosen {
        hosts[*index].taken = true;
    }
    Some(Step {
        workload: workload.id.clone(),
        nodes: chosen.iter().map(|i| hosts[*i].node.name.clone()).collect(),
        moves,
        lost_gpu_seconds: lost,
    })
}
