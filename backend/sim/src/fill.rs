//! The arrival-only fill protocol of the FGD paper: pods arrive in a
//! shuffled order, each is placed at once or fails, nothing leaves; after
//! every +1 % of arrived GPU request the allocation and fragmentation of the
//! cluster are recorded.

use gantry_scheduler::{Cluster, Placer, Policy};
use serde::Serialize;

use crate::alibaba::Pod;
use crate::rng::Rng;

/// One point of the curves.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct FillPoint {
    /// Arrived GPU request, in whole percent of the cluster's GPUs.
    pub arrived_percent: u32,
    /// The arrived GPU request when the point was taken (one pod may cross
    /// several percents at once), as a share of the cluster's GPUs.
    pub arrived: f64,
    /// Allocated share of the cluster's GPU capacity (milli-GPU).
    pub allocation: f64,
    /// Free capacity the expected work could not use, as a share of the
    /// cluster's GPU capacity.
    pub fragmentation: f64,
}

/// One arriving pod and where it went, as `--placements-out` writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacementRow {
    /// Arrival order, from 0.
    pub seq: usize,
    /// The pod.
    pub pod: Pod,
    /// The node, `None` when it fit nowhere.
    pub node: Option<String>,
    /// GPU indices on that node.
    pub gpus: Vec<u32>,
}

impl PlacementRow {
    /// The CSV header.
    pub const HEADER: &'static str =
        "seq,pod,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,node,gpus";

    /// The row as CSV.
    pub fn csv(&self) -> String {
        let gpus: Vec<String> = self.gpus.iter().map(u32::to_string).collect();
        format!(
            "{},{},{},{},{},{},{},{},{}",
            self.seq,
            self.pod.name,
            self.pod.cpu_milli,
            self.pod.memory_mib,
            self.pod.num_gpu,
            self.pod.gpu_milli,
            self.pod.gpu_spec.join("|"),
            self.node.as_deref().unwrap_or_default(),
            gpus.join(";")
        )
    }
}

/// What one run of the protocol measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FillRun {
    /// The seed of the arrival order.
    pub seed: u64,
    /// Pods that arrived.
    pub arrived: usize,
    /// Pods that fit nowhere.
    pub failed: usize,
    /// Unallocated share of GPU capacity when arrived work reached 100 %.
    pub unallocated_at_100: f64,
    /// The curves, one point per +1 % of arrived work.
    pub curve: Vec<FillPoint>,
}

/// The arrival order: every pod once in shuffled order, then pods drawn at
/// random (with replacement) until the next would take the arrived GPU
/// request past `inflate` × the cluster's GPUs.
pub fn arrivals(pods: &[Pod], total_milli: u64, seed: u64, inflate: f64) -> Vec<usize> {
    let mut rng = Rng::new(seed);
    let mut order: Vec<usize> = (0..pods.len()).collect();
    rng.shuffle(&mut order);
    let limit = (total_milli as f64 * inflate) as u64;
    let mut arrived: u64 = 0;
    let mut kept = Vec::with_capacity(order.len() * 2);
    for index in order {
        let next = arrived + pods[index].gpu_request_milli();
        if next > limit {
            return kept;
        }
        arrived = next;
        kept.push(index);
    }
    if pods.is_empty() {
        return kept;
    }
    loop {
        let index = rng.below(pods.len());
        let next = arrived + pods[index].gpu_request_milli();
        if next > limit {
            return kept;
        }
        arrived = next;
        kept.push(index);
    }
}

/// Runs the protocol for one seed and policy; `placed` sees every arrival
/// in order.
pub fn run(
    cluster: &Cluster,
    pods: &[Pod],
    policy: &Policy,
    seed: u64,
    inflate: f64,
    mut placed: impl FnMut(&PlacementRow),
) -> FillRun {
    let mut models: Vec<String> = cluster
        .nodes
        .iter()
        .flat_map(|n| n.gpus.iter().map(|g| g.model.clone()))
        .collect();
    models.sort();
    models.dedup();
    let expected: Vec<_> = pods
        .iter()
        .map(|pod| pod.workload(pod.name.clone(), &models))
        .collect();
    let mut placer = Placer::new(cluster, policy, &expected);
    let total = placer.fill().total_milli.max(1);
    let order = arrivals(pods, total, seed, inflate);
    let mut run = FillRun {
        seed,
        arrived: order.len(),
        failed: 0,
        unallocated_at_100: 0.0,
        curve: Vec::new(),
    };
    let mut arrived_milli: u64 = 0;
    let mut next_percent = 1;
    for (seq, index) in order.into_iter().enumerate() {
        let pod = &pods[index];
        let placement = placer.place(&expected[index]);
        run.failed += usize::from(placement.is_none());
        let first = placement.and_then(|p| p.into_iter().next());
        placed(&PlacementRow {
            seq,
            pod: pod.clone(),
            node: first.as_ref().map(|p| p.node.clone()),
            gpus: first.map(|p| p.gpus).unwrap_or_default(),
        });
        arrived_milli += pod.gpu_request_milli();
        while u128::from(arrived_milli) * 100 >= u128::from(total) * u128::from(next_percent) {
            let fill = placer.fill();
            run.curve.push(FillPoint {
                arrived_percent: next_percent,
                arrived: arrived_milli as f64 / total as f64,
                allocation: fill.allocated_milli as f64 / total as f64,
                fragmentation: fill.fragmented_milli / total as f64,
            });
            if next_percent == 100 {
                run.unallocated_at_100 = 1.0 - fill.allocated_milli as f64 / total as f64;
            }
            next_percent += 1;
        }
    }
    run
}
