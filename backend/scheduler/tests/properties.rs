//! Properties that hold for any cluster and any pending work: no GPU is
//! handed out twice or while held, gangs are all-or-nothing, every placement
//! meets the workload's model, region, label and health constraints, and the
//! same input gives the same decisions.

use std::collections::{BTreeMap, BTreeSet};

use gantry_scheduler::{Allocation, Cluster, Gpu, Node, Workload, schedule};
use proptest::prelude::*;

const MODELS: [&str; 3] = ["H100-SXM-80GB", "H200-141GB", "L40S-48GB"];
const REGIONS: [&str; 2] = ["eu-west-1", "us-east-1"];

fn arb_node(index: usize) -> impl Strategy<Value = Node> {
    (
        0..3usize,
        0..2usize,
        0..3u32,
        prop::sample::select(vec![1u32, 2, 4, 8]),
        any::<bool>(),
        prop::collection::vec(any::<bool>(), 8),
        any::<bool>(),
    )
        .prop_map(
            move |(model, region, rack, gpus, labelled, health, cordoned)| Node {
                name: format!("n{index:03}"),
                region: REGIONS[region].into(),
                rack: format!("r{rack}"),
                labels: if labelled {
                    BTreeSet::from(["eu-gdpr".to_owned()])
                } else {
                    BTreeSet::new()
                },
                cpu_milli: 64_000,
                memory_mib: 512 * 1_024,
                schedulable: !(cordoned && index.is_multiple_of(7)),
                gpus: (0..gpus)
                    .map(|g| Gpu {
                        index: g,
                        model: MODELS[model].into(),
                        nvlink_domain: g / 4,
                        healthy: health[g as usize] || !g.is_multiple_of(3),
                    })
                    .collect(),
            },
        )
}

fn arb_cluster() -> impl Strategy<Value = Cluster> {
    (1..12usize)
        .prop_flat_map(|n| (0..n).map(arb_node).collect::<Vec<_>>())
        .prop_map(|nodes| Cluster { nodes })
}

fn arb_workload(index: usize) -> impl Strategy<Value = Workload> {
    (
        prop::collection::vec(0..3usize, 1..3),
        prop::sample::select(vec![0u32, 1, 2, 4, 8]),
        1..4u32,
        0..40_000u64,
        -2..3i32,
        prop::option::of(0..2usize),
        any::<bool>(),
    )
        .prop_map(
            move |(models, gpus, nodes, cpu, priority, region, gdpr)| Workload {
                id: format!("w{index:03}"),
                tenant: format!("t{}", index % 3),
                gpu_models: models.into_iter().map(|m| MODELS[m].to_owned()).collect(),
                gpus_per_node: gpus,
                node_count: nodes,
                cpu_milli_per_node: cpu,
                memory_mib_per_node: cpu * 4,
                priority,
                submitted_at: i64::try_from(index).unwrap_or_default(),
                regions: region
                    .map(|r| vec![REGIONS[r].to_owned()])
                    .unwrap_or_default(),
                required_labels: if gdpr {
                    BTreeSet::from(["eu-gdpr".to_owned()])
                } else {
                    BTreeSet::new()
                },
            },
        )
}

fn arb_pending() -> impl Strategy<Value = Vec<Workload>> {
    (0..25usize).prop_flat_map(|n| (0..n).map(arb_workload).collect::<Vec<_>>())
}

/// Some GPUs already held by running work: the first GPU of every third node.
fn running_on(cluster: &Cluster) -> Vec<Allocation> {
    cluster
        .nodes
        .iter()
        .step_by(3)
        .filter(|n| !n.gpus.is_empty())
        .map(|n| Allocation {
            workload: format!("running-{}", n.name),
            node: n.name.clone(),
            gpus: vec![0],
            cpu_milli: 1_000,
            memory_mib: 1_024,
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn placements_are_sound(cluster in arb_cluster(), pending in arb_pending()) {
        let running = running_on(&cluster);
        let decisions = schedule(&cluster, &running, &pending);
        let nodes: BTreeMap<&str, &Node> = cluster.nodes.iter().map(|n| (n.name.as_str(), n)).collect();
        let workloads: BTreeMap<&str, &Workload> = pending.iter().map(|w| (w.id.as_str(), w)).collect();

        let mut used: BTreeSet<(String, u32)> = running
            .iter()
            .flat_map(|a| a.gpus.iter().map(|g| (a.node.clone(), *g)))
            .collect();
        let mut cpu: BTreeMap<&str, u64> = BTreeMap::new();
        for a in &running {
            *cpu.entry(a.node.as_str()).or_default() += a.cpu_milli;
        }
        for start in &decisions.starts {
            let workload = workloads[start.workload.as_str()];
            // Gangs: every node of it, distinct nodes, the full GPU count each.
            prop_assert_eq!(start.placements.len(), workload.node_count as usize);
            let distinct: BTreeSet<&str> = start.placements.iter().map(|p| p.node.as_str()).collect();
            prop_assert_eq!(distinct.len(), start.placements.len());
            let mut models = BTreeSet::new();
            for placement in &start.placements {
                let node = nodes[placement.node.as_str()];
                prop_assert_eq!(placement.gpus.len(), workload.gpus_per_node as usize);
                prop_assert!(node.schedulable);
                prop_assert!(workload.regions.is_empty() || workload.regions.contains(&node.region));
                prop_assert!(workload.required_labels.is_subset(&node.labels));
                let node_cpu = cpu.entry(node.name.as_str()).or_default();
                *node_cpu += workload.cpu_milli_per_node;
                prop_assert!(*node_cpu <= node.cpu_milli, "CPU over capacity on {}", node.name);
                for index in &placement.gpus {
                    let gpu = node.gpus.iter().find(|g| g.index == *index);
                    prop_assert!(gpu.is_some_and(|g| g.healthy), "unhealthy or unknown GPU");
                    let gpu = gpu.map(|g| g.model.clone()).unwrap_or_default();
                    prop_assert!(workload.gpu_models.contains(&gpu));
                    models.insert(gpu);
                    prop_assert!(used.insert((node.name.clone(), *index)), "GPU {}:{} handed out twice", node.name, index);
                }
            }
            prop_assert!(models.len() <= 1, "one GPU model per workload");
        }
        // Every workload is either started or waiting, exactly once.
        prop_assert_eq!(decisions.starts.len() + decisions.waiting.len(), pending.len());
    }

    #[test]
    fn decisions_are_deterministic(cluster in arb_cluster(), pending in arb_pending()) {
        let running = running_on(&cluster);
        let first = schedule(&cluster, &running, &pending);
        let mut shuffled_nodes = cluster.clone();
        shuffled_nodes.nodes.rotate_left(cluster.nodes.len() / 2);
        let mut shuffled_pending = pending.clone();
        shuffled_pending.reverse();
        prop_assert_eq!(schedule(&shuffled_nodes, &running, &shuffled_pending), first);
    }
}
