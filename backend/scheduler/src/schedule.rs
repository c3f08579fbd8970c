//! One scheduling cycle: pending work in, decisions out.

use crate::cluster::Cluster;
use crate::placement::Capacity;
use crate::workload::{Allocation, Workload};

/// The GPUs a workload gets on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The node.
    pub node: String,
    /// Indices of the GPUs on that node.
    pub gpus: Vec<u32>,
}

/// A workload to start now, with every GPU it gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start {
    /// The workload.
    pub workload: String,
    /// One placement per node of the gang.
    pub placements: Vec<Placement>,
}

/// Why a workload cannot start now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PendingReason {
    /// Fewer nodes than it needs could ever host it (model, region, labels,
    /// GPU count, CPU or memory), even on an empty cluster.
    NoSuitableNode {
        /// Nodes it needs at once.
        nodes_needed: u32,
    },
    /// Fewer GPUs of its models are free, in its regions, than it needs.
    InsufficientGpus {
        /// GPUs of its models free where it may run.
        free_gpus: u32,
        /// GPUs it needs in all.
        needed: u32,
    },
    /// Enough GPUs are free in all, but not enough of them together on few
    /// enough nodes.
    Fragmentation {
        /// GPUs of its models free where it may run.
        free_gpus: u32,
        /// GPUs it needs on each node.
        gpus_per_node: u32,
        /// Nodes it needs at once.
        nodes_needed: u32,
        /// Nodes with that many GPUs free.
        nodes_with_room: u32,
        /// The most GPUs free on any one node.
        largest_free_on_one_node: u32,
    },
    /// Nodes have the GPUs free, but not the CPU or memory beside them.
    CpuOrMemory {
        /// Nodes with enough free GPUs.
        nodes_with_free_gpus: u32,
    },
}

impl std::fmt::Display for PendingReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NoSuitableNode { nodes_needed } => write!(
                f,
                "no suitable node: fewer than {nodes_needed} nodes could ever host it (GPU model, region, labels, size)"
            ),
            Self::InsufficientGpus { free_gpus, needed } => {
                write!(
                    f,
                    "capacity: {free_gpus} matching GPUs free, {needed} needed"
                )
            }
            Self::Fragmentation {
                free_gpus,
                gpus_per_node,
                nodes_needed,
                nodes_with_room,
                largest_free_on_one_node,
            } => write!(
                f,
                "fragmentation: {free_gpus} matching GPUs free, but only {nodes_with_room} of the \
                 {nodes_needed} nodes needed have {gpus_per_node} free (at most {largest_free_on_one_node} on one node)"
            ),
            Self::CpuOrMemory {
                nodes_with_free_gpus,
            } => write!(
                f,
                "CPU or memory: {nodes_with_free_gpus} nodes have the GPUs free but not the CPU or memory beside them"
            ),
        }
    }
}

/// A workload that stays pending, with why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WaitingWorkload {
    /// The workload.
    pub workload: String,
    /// Why it cannot start now.
    pub reason: PendingReason,
}

/// What one cycle decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decisions {
    /// Workloads to start, in the order they were placed.
    pub starts: Vec<Start>,
    /// Workloads that wait, in rank order.
    pub waiting: Vec<WaitingWorkload>,
}

/// Places `pending` work onto the capacity `running` work leaves free.
///
/// Work is ranked by priority (higher first), then submission time, then id,
/// so the same input always yields the same decisions. Each workload gets
/// every GPU it needs on every node of its gang in one step, or nothing.
pub fn schedule(cluster: &Cluster, running: &[Allocation], pending: &[Workload]) -> Decisions {
    let mut ranked: Vec<&Workload> = pending.iter().collect();
    ranked.sort_by(|a, b| {
        b.priority
            .cmp(&a.priority)
            .then(a.submitted_at.cmp(&b.submitted_at))
            .then_with(|| a.id.cmp(&b.id))
    });
    let mut capacity = Capacity::new(cluster, running);
    let mut decisions = Decisions::default();
    for workload in ranked {
        match capacity.place(workload) {
            Ok(placements) => decisions.starts.push(Start {
                workload: workload.id.clone(),
                placements,
            }),
            Err(reason) => decisions.waiting.push(WaitingWorkload {
                workload: workload.id.clone(),
                reason,
            }),
        }
    }
    decisions
}
