//! What-if: the same cluster and queue with a change (more nodes, other
//! quotas, another policy, a defragmentation plan carried out), decided by
//! the engine both ways, so an operator sees what the change would do before
//! making it. The server feeds it the state it loads for its own scheduling
//! cycle.

use std::collections::BTreeMap;

use gantry_scheduler::{
    Decisions, DefragPlan, DisruptionBudget, Node, OwnedSnapshot, Policy, Queue, Workload,
    plan_defragmentation,
};
use serde::Serialize;

/// A change to try.
#[derive(Debug, Clone, Default)]
pub struct Change {
    /// Nodes to add.
    pub extra_nodes: Vec<Node>,
    /// Queues to replace (by name) or add.
    pub queues: Vec<Queue>,
    /// Another policy.
    pub policy: Option<Policy>,
    /// Carry out a defragmentation plan within this budget first.
    pub defragment: Option<DisruptionBudget>,
}

/// What one side decided, per queue and in all.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Side {
    /// Workloads that would start now.
    pub starts: usize,
    /// GPUs (thousandths) they would take.
    pub started_milli: u64,
    /// Workloads that would wait.
    pub waiting: usize,
    /// Workloads that would be rejected.
    pub rejected: usize,
    /// Running workloads that would be preempted.
    pub preempted: usize,
    /// Mean seconds from now to the estimated start, over waiting work that
    /// has one.
    pub mean_estimated_wait: Option<f64>,
    /// Starts and waits per queue.
    pub by_queue: BTreeMap<String, (usize, usize)>,
}

/// Both sides.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WhatIf {
    /// As things are.
    pub before: Side,
    /// With the change.
    pub after: Side,
    /// The defragmentation plan carried out, when one was asked for.
    #[serde(skip)]
    pub plan: Option<DefragPlan>,
}

fn side(state: &OwnedSnapshot, decisions: &Decisions) -> Side {
    let by_id: BTreeMap<&str, &Workload> =
        state.pending.iter().map(|w| (w.id.as_str(), w)).collect();
    let mut side = Side {
        starts: decisions.starts.len(),
        waiting: decisions.waiting.len(),
        rejected: decisions.rejections.len(),
        preempted: decisions.preemptions.len(),
        ..Side::default()
    };
    for start in &decisions.starts {
        if let Some(workload) = by_id.get(start.workload.as_str()) {
            side.started_milli += workload.total_milli();
            side.by_queue.entry(workload.queue.clone()).or_default().0 += 1;
        }
    }
    let mut estimated = Vec::new();
    for waiting in &decisions.waiting {
        if let Some(workload) = by_id.get(waiting.workload.as_str()) {
            side.by_queue.entry(workload.queue.clone()).or_default().1 += 1;
        }
        if let Some(at) = waiting.estimated_start {
            estimated.push((at - state.now).max(0) as f64);
        }
    }
    side.mean_estimated_wait =
        (!estimated.is_empty()).then(|| estimated.iter().sum::<f64>() / estimated.len() as f64);
    side
}

/// Decides `state` under `policy`, then with `change` applied.
pub fn what_if(state: &OwnedSnapshot, policy: &Policy, change: &Change) -> WhatIf {
    let before = side(state, &state.decide(policy));
    let mut changed = state.clone();
    changed
        .cluster
        .nodes
        .extend(change.extra_nodes.iter().cloned());
    for queue in &change.queues {
        match changed.queues.iter_mut().find(|q| q.name == queue.name) {
            Some(existing) => *existing = queue.clone(),
            None => changed.queues.push(queue.clone()),
        }
    }
    let policy = change.policy.as_ref().unwrap_or(policy);
    let plan = change.defragment.as_ref().map(|budget| {
        let plan = plan_defragmentation(&changed.snapshot(), policy, budget);
        // The moves done: each moved workload runs where the plan puts it.
        for m in plan.steps.iter().flat_map(|s| &s.moves) {
            if let Some(run) = changed
                .running
                .iter_mut()
                .find(|r| r.workload.id == m.workload)
            {
                run.placements = vec![m.to.clone()];
            }
        }
        plan
    });
    let after = side(&changed, &changed.decide(policy));
    WhatIf {
        before,
        after,
        plan,
    }
}
