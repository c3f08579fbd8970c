//! Defragmentation measured: a seeded two days of mixed work on sixteen
//! 8-GPU nodes, where checkpointable jobs of 1, 2 and 4 GPUs from three
//! teams share the nodes with whole-node training runs, replayed without
//! and with defragmentation, comparing the waits of whole-node work with
//! the work the moves cost.

use std::collections::BTreeMap;

use gantry_scheduler::{Cluster, GpuRequest, Node, Policy, Workload};
use serde::Serialize;

use crate::replay::{self, Job, ReplayRun};
use crate::rng::Rng;
use crate::stats::{Summary, summary};
use crate::trace::gpus;

const NODES: u32 = 16;
const HOUR: i64 = 3_600;
const SPAN: i64 = 48 * HOUR;

/// The cluster and jobs of one seed.
pub fn scenario(seed: u64) -> (Cluster, Vec<Job>) {
    let nodes = (0..NODES)
        .map(|i| Node {
            name: format!("gpu-{i:02}"),
            region: "lab".into(),
            rack: format!("rack-{}", i / 8),
            labels: Default::default(),
            cpu_milli: 128_000,
            memory_mib: 1_024 * 1_024,
            schedulable: true,
            gpus: gpus(8, "H100", 4),
        })
        .collect();
    let mut rng = Rng::new(seed);
    let mut jobs = Vec::new();
    let mut at = 0;
    // About 0.9 of the GPU-hours the cluster has, a quarter of them in
    // whole-node runs.
    while at < SPAN {
        at += 60 + i64::try_from(rng.below(600)).unwrap_or(0);
        let whole = rng.below(100) < 6;
        let (team, gpus_per_node, nodes, hours) = if whole {
            (
                "training",
                8,
                1 + u32::from(rng.below(4) == 0),
                2 + rng.below(5),
            )
        } else {
            let team = ["team-a", "team-b", "team-c"][rng.below(3)];
            (team, [1, 1, 2, 2, 4][rng.below(5)], 1, 1 + rng.below(8))
        };
        let run =
            i64::try_from(hours).unwrap_or(1) * HOUR + i64::try_from(rng.below(1_800)).unwrap_or(0);
        jobs.push(Job {
            workload: Workload {
                id: format!("job-{:05}", jobs.len()),
                queue: team.into(),
                gpu_models: vec!["H100".into()],
                gpus: GpuRequest::Whole(gpus_per_node),
                node_count: nodes,
                cpu_milli_per_node: u64::from(gpus_per_node) * 12_000,
                memory_mib_per_node: u64::from(gpus_per_node) * 96 * 1_024,
                submitted_at: at,
                duration_estimate: Some(run),
                checkpointable: !whole,
                ..Workload::default()
            },
            submit: at,
            run,
        });
    }
    (
        Cluster {
            nodes,
            regions: Vec::new(),
        },
        jobs,
    )
}

/// One replay's figures.
#[derive(Debug, Clone, Serialize)]
pub struct Side {
    /// Waits of whole-node work, seconds.
    pub whole_node_wait: Summary,
    /// Waits of the rest, seconds.
    pub other_wait: Summary,
    /// Moves made.
    pub moves: usize,
    /// GPU-seconds of work the moves lost.
    pub lost_gpu_seconds: f64,
    /// Those as a share of the GPU-seconds delivered.
    pub lost_share: f64,
    /// Time-weighted share of GPUs held.
    pub utilization: f64,
}

/// The same seed without and with defragmentation.
#[derive(Debug, Clone, Serialize)]
pub struct DefragReport {
    /// The mode.
    pub mode: &'static str,
    /// The seed.
    pub seed: u64,
    /// Jobs replayed.
    pub jobs: usize,
    /// The disruption budget, GPU-seconds per queue and hour.
    pub budget_gpu_seconds_per_queue_hour: f64,
    /// Without moves.
    pub without: Side,
    /// With them.
    pub with: Side,
}

fn side(run: &ReplayRun, jobs: &[Job]) -> Side {
    let mut waits: BTreeMap<bool, Vec<f64>> = BTreeMap::new();
    for (outcome, job) in run.outcomes.iter().zip(jobs) {
        if let Some(wait) = outcome.wait {
            waits
                .entry(job.workload.gpus == GpuRequest::Whole(8))
                .or_default()
                .push(wait as f64);
        }
    }
    let delivered: f64 = run.gpu_seconds_by_queue.values().sum();
    Side {
        whole_node_wait: summary(waits.get(&true).map_or(&[][..], Vec::as_slice)),
        other_wait: summary(waits.get(&false).map_or(&[][..], Vec::as_slice)),
        moves: run.moves,
        lost_gpu_seconds: run.lost_gpu_seconds,
        lost_share: run.lost_gpu_seconds / delivered.max(1.0),
        utilization: run.utilization,
    }
}

/// Replays the seed's scenario under the default policy with a five-minute
/// grace period, without and with
/// defragmentation within `budget` GPU-seconds per queue and hour.
pub fn compare(seed: u64, budget: f64) -> DefragReport {
    let (cluster, jobs) = scenario(seed);
    // Five minutes to checkpoint, as large models take, rather than the
    // default grace of half a minute.
    let policy = Policy {
        grace_seconds: 300,
        ..Policy::default()
    };
    let without = replay::run_with(&cluster, &[], &jobs, &policy, None, |_| {});
    let with = replay::run_with(&cluster, &[], &jobs, &policy, Some(budget), |_| {});
    DefragReport {
        mode: "defrag",
        seed,
        jobs: jobs.len(),
        budget_gpu_seconds_per_queue_hour: budget,
        without: side(&without, &jobs),
        with: side(&with, &jobs),
    }
}
