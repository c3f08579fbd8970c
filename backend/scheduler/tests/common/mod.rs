//! Builders shared by the engine's scenario tests, and a small driver that
//! runs cycles the way the server's loop does: start what the engine starts,
//! stop what it preempts once the grace period is over, end work when its
//! duration is up, and record usage for fair share.

#![allow(dead_code)]

use std::collections::BTreeSet;

use gantry_scheduler::{
    Cluster, Decisions, Gpu, GpuRequest, Node, OwnedSnapshot, Placement, Policy, Queue, Running,
    Workload,
};

pub const H100: &str = "H100-SXM-80GB";
pub const L40S: &str = "L40S-48GB";
/// 2026-12-02 12:00 UTC.
pub const NOON: i64 = 1_796_212_800;

/// A schedulable node in `eu-west-1` with `gpus` healthy GPUs of `model`,
/// four to an NVLink domain.
pub fn node(name: &str, rack: &str, model: &str, gpus: u32) -> Node {
    Node {
        name: name.into(),
        region: "eu-west-1".into(),
        rack: rack.into(),
        labels: BTreeSet::new(),
        cpu_milli: 128_000,
        memory_mib: 1_024 * 1_024,
        schedulable: true,
        gpus: (0..gpus)
            .map(|index| Gpu {
                index,
                model: model.into(),
                nvlink_domain: index / 4,
                healthy: true,
                mig_slices: None,
                mig_instance_slices: None,
            })
            .collect(),
    }
}

/// `count` 8-GPU H100 nodes named `n0`, `n1`, … in one rack.
pub fn nodes(count: u32) -> Vec<Node> {
    (0..count)
        .map(|i| node(&format!("n{i}"), "r1", H100, 8))
        .collect()
}

/// A standard-class H100 job of queue `queue` with 8 cores and 64 GiB per
/// node.
pub fn job(id: &str, queue: &str, gpus: u32, node_count: u32) -> Workload {
    Workload {
        id: id.into(),
        queue: queue.into(),
        gpu_models: vec![H100.into()],
        gpus: GpuRequest::Whole(gpus),
        node_count,
        cpu_milli_per_node: 8_000,
        memory_mib_per_node: 64 * 1_024,
        submitted_at: NOON,
        ..Workload::default()
    }
}

/// `workload` running since `started_at` on `placements`.
pub fn running(workload: Workload, placements: &[(&str, &[u32])], started_at: i64) -> Running {
    Running {
        workload,
        placements: placements
            .iter()
            .map(|(node, gpus)| Placement {
                node: (*node).into(),
                gpus: gpus.to_vec(),
            })
            .collect(),
        started_at,
        last_checkpoint_at: None,
        stopping_at: None,
    }
}

/// A queue with `guaranteed` H100s and the given weight.
pub fn queue(name: &str, guaranteed: u32, weight: u32) -> Queue {
    let mut queue = Queue::new(name);
    queue.weight = weight;
    queue.quotas.insert(
        H100.into(),
        gantry_scheduler::Quota {
            guaranteed,
            borrow_limit: None,
            max: None,
        },
    );
    queue
}

/// Everything a cycle reads, owned.
pub type World = OwnedSnapshot;

/// Building worlds and driving them cycle by cycle.
pub trait Drive {
    /// Schedulable `nodes` at noon, nothing else.
    fn new(nodes: Vec<Node>) -> Self;

    /// One cycle at `self.now`, its decisions applied; then time moves on by
    /// `step` seconds, ending work whose duration is up and victims whose
    /// grace is over. Preempted work goes back to the queue.
    fn cycle(&mut self, policy: &Policy, step: i64) -> Decisions;
}

impl Drive for World {
    fn new(nodes: Vec<Node>) -> Self {
        Self {
            cluster: Cluster {
                nodes,
                regions: Vec::new(),
            },
            now: NOON,
            ..Self::default()
        }
    }

    fn cycle(&mut self, policy: &Policy, step: i64) -> Decisions {
        let decisions = self.decide(policy);
        for start in &decisions.starts {
            if let Some(at) = self.pending.iter().position(|w| w.id == start.workload) {
                let workload = self.pending.remove(at);
                self.running.push(Running {
                    workload,
                    placements: start.placements.clone(),
                    started_at: self.now,
                    last_checkpoint_at: None,
                    stopping_at: None,
                });
            }
        }
        for preemption in &decisions.preemptions {
            if let Some(run) = self
                .running
                .iter_mut()
                .find(|r| r.workload.id == preemption.workload)
            {
                run.stopping_at = Some(preemption.stop_at);
            }
        }
        let rejected: BTreeSet<&str> = decisions
            .rejections
            .iter()
            .map(|r| r.workload.as_str())
            .collect();
        self.pending.retain(|w| !rejected.contains(w.id.as_str()));
        let end = self.now + step;
        for run in &self.running {
            let until = run
                .workload
                .duration_estimate
                .map_or(end, |d| (run.started_at + d).min(end))
                .min(run.stopping_at.unwrap_or(end));
            let gpus: usize = run.placements.iter().map(|p| p.gpus.len()).sum();
            let seconds = (until - self.now).max(0) as f64 * gpus as f64;
            let model = run.workload.gpu_models.first().cloned().unwrap_or_default();
            self.usage.record(&run.workload.queue, &model, seconds, end);
        }
        let mut still = Vec::new();
        for run in std::mem::take(&mut self.running) {
            let finished = run
                .workload
                .duration_estimate
                .is_some_and(|d| run.started_at + d <= end);
            let stopped = run.stopping_at.is_some_and(|at| at <= end);
            if stopped && !finished {
                self.pending.push(run.workload);
            } else if !finished {
                still.push(run);
            }
        }
        self.running = still;
        self.now = end;
        decisions
    }
}
