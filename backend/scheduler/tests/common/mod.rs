//! Builders shared by the engine's scenario tests.

use std::collections::BTreeSet;

use gantry_scheduler::{Allocation, Gpu, Node};

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
            })
            .collect(),
    }
}

/// GPUs held on `node` by a running `workload`, with 8 cores and 64 GiB.
pub fn held(workload: &str, node: &str, gpus: &[u32]) -> Allocation {
    Allocation {
        workload: workload.into(),
        node: node.into(),
        gpus: gpus.to_vec(),
        cpu_milli: 8_000,
        memory_mib: 64 * 1_024,
    }
}
