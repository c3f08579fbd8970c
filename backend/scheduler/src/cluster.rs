//! The cluster model: nodes in racks and regions, GPUs in NVLink domains.

use std::collections::BTreeSet;

/// One GPU of a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu {
    /// Index of the GPU on its node, as the node's driver numbers it.
    pub index: u32,
    /// The GPU model, such as `H100-SXM-80GB`.
    pub model: String,
    /// GPUs sharing an NVLink domain talk at NVLink speed; a multi-GPU job
    /// prefers to stay inside one.
    pub nvlink_domain: u32,
    /// Unhealthy GPUs are never allocated.
    pub healthy: bool,
}

/// One GPU server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Unique node name.
    pub name: String,
    /// Region, such as `eu-west-1`.
    pub region: String,
    /// Rack or block: nodes in one rack share a fast fabric.
    pub rack: String,
    /// Labels such as compliance tags (`eu-gdpr`).
    pub labels: BTreeSet<String>,
    /// CPU in thousandths of a core.
    pub cpu_milli: u64,
    /// Memory in MiB.
    pub memory_mib: u64,
    /// Cordoned or draining nodes take no new work.
    pub schedulable: bool,
    /// The node's GPUs.
    pub gpus: Vec<Gpu>,
}

/// Every node the engine may place work on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cluster {
    /// The nodes, in any order; the engine orders them itself.
    pub nodes: Vec<Node>,
}
