//! Workloads waiting for GPUs, and the allocations of those already running.

use std::collections::BTreeSet;

/// A workload waiting to be placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workload {
    /// Unique id.
    pub id: String,
    /// The tenant (organization) it belongs to.
    pub tenant: String,
    /// GPU models it can run on; one of them for all its GPUs.
    pub gpu_models: Vec<String>,
    /// Whole GPUs on each node.
    pub gpus_per_node: u32,
    /// Nodes it needs at once: more than one makes a gang, placed whole or
    /// not at all.
    pub node_count: u32,
    /// CPU per node, in thousandths of a core.
    pub cpu_milli_per_node: u64,
    /// Memory per node, in MiB.
    pub memory_mib_per_node: u64,
    /// Higher runs first.
    pub priority: i32,
    /// Seconds since the epoch when it was submitted; earlier runs first
    /// among equals.
    pub submitted_at: i64,
    /// Regions it may run in; any when empty (data residency).
    pub regions: Vec<String>,
    /// Labels every node it runs on must carry.
    pub required_labels: BTreeSet<String>,
}

/// GPUs, CPU and memory held on one node by a running workload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allocation {
    /// The workload holding them.
    pub workload: String,
    /// The node.
    pub node: String,
    /// Indices of the GPUs held.
    pub gpus: Vec<u32>,
    /// CPU held, in thousandths of a core.
    pub cpu_milli: u64,
    /// Memory held, in MiB.
    pub memory_mib: u64,
}
