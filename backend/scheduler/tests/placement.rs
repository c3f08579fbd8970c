//! Scenario tests of the first placement policies: GPU-model and constraint
//! matching, gangs, topology and best-fit packing, and pending reasons.

use std::collections::BTreeSet;

mod common;

use common::{held, node};
use gantry_scheduler::{Cluster, PendingReason, Placement, Workload, schedule};

const H100: &str = "H100-SXM-80GB";
const L40S: &str = "L40S-48GB";

fn job(id: &str, gpus_per_node: u32, node_count: u32) -> Workload {
    Workload {
        id: id.into(),
        tenant: "acme".into(),
        gpu_models: vec![H100.into()],
        gpus_per_node,
        node_count,
        cpu_milli_per_node: 8_000,
        memory_mib_per_node: 64 * 1_024,
        priority: 0,
        submitted_at: 0,
        regions: Vec::new(),
        required_labels: BTreeSet::new(),
    }
}

#[test]
fn a_four_gpu_job_waits_on_fragmentation_while_two_gpu_jobs_start() {
    let cluster = Cluster {
        nodes: vec![node("n1", "r1", H100, 4), node("n2", "r1", H100, 4)],
    };
    let running = [held("old-1", "n1", &[0, 1]), held("old-2", "n2", &[0, 1])];
    let mut big = job("big", 4, 1);
    big.priority = 10;
    let pending = [big, job("small-1", 2, 1), job("small-2", 2, 1)];

    let decisions = schedule(&cluster, &running, &pending);

    assert_eq!(decisions.waiting.len(), 1);
    assert_eq!(decisions.waiting[0].workload, "big");
    assert_eq!(
        decisions.waiting[0].reason,
        PendingReason::Fragmentation {
            free_gpus: 4,
            gpus_per_node: 4,
            nodes_needed: 1,
            nodes_with_room: 0,
            largest_free_on_one_node: 2,
        }
    );
    assert!(
        decisions.waiting[0]
            .reason
            .to_string()
            .starts_with("fragmentation: 4 matching GPUs free")
    );
    let started: Vec<&str> = decisions
        .starts
        .iter()
        .map(|s| s.workload.as_str())
        .collect();
    assert_eq!(started, ["small-1", "small-2"]);
    assert_eq!(
        decisions.starts[0].placements,
        [Placement {
            node: "n1".into(),
            gpus: vec![2, 3]
        }]
    );
    assert_eq!(
        decisions.starts[1].placements,
        [Placement {
            node: "n2".into(),
            gpus: vec![2, 3]
        }]
    );
}

#[test]
fn a_gang_is_placed_whole_or_not_at_all() {
    let cluster = Cluster {
        nodes: vec![
            node("n1", "r1", H100, 8),
            node("n2", "r1", H100, 8),
            node("n3", "r2", H100, 8),
        ],
    };
    // Two nodes are busy: an 8-GPU gang of three nodes cannot start, and
    // nothing of it is held.
    let running = [held("a", "n1", &[0]), held("b", "n2", &[7])];
    let decisions = schedule(&cluster, &running, &[job("gang", 8, 3), job("one", 1, 1)]);
    assert_eq!(decisions.waiting[0].workload, "gang");
    assert_eq!(
        decisions.waiting[0].reason,
        PendingReason::InsufficientGpus {
            free_gpus: 22,
            needed: 24
        }
    );
    // The 1-GPU job packs onto a busy node and leaves n3 whole.
    assert_eq!(decisions.starts.len(), 1);
    assert_eq!(decisions.starts[0].placements[0].node, "n1");

    // On an idle cluster the gang gets every node, 8 GPUs each.
    let decisions = schedule(&cluster, &[], &[job("gang", 8, 3)]);
    let placements = &decisions.starts[0].placements;
    assert_eq!(placements.len(), 3);
    assert!(
        placements
            .iter()
            .all(|p| p.gpus == (0..8).collect::<Vec<u32>>())
    );
}

#[test]
fn a_gang_stays_in_one_rack_when_one_can_hold_it() {
    let cluster = Cluster {
        nodes: vec![
            node("a1", "rack-a", H100, 8),
            node("b1", "rack-b", H100, 8),
            node("b2", "rack-b", H100, 8),
        ],
    };
    let decisions = schedule(&cluster, &[], &[job("pair", 8, 2)]);
    let nodes: Vec<&str> = decisions.starts[0]
        .placements
        .iter()
        .map(|p| p.node.as_str())
        .collect();
    assert_eq!(nodes, ["b1", "b2"]);
}

#[test]
fn multi_gpu_work_prefers_one_nvlink_domain_and_the_tightest_fit() {
    let cluster = Cluster {
        nodes: vec![node("n1", "r1", H100, 8), node("n2", "r1", H100, 8)],
    };
    // n1: domain 0 has GPUs 2 and 3 free, domain 1 is free; n2 is idle.
    let running = [held("x", "n1", &[0, 1])];
    let decisions = schedule(&cluster, &running, &[job("pair", 2, 1), job("quad", 4, 1)]);
    assert_eq!(
        decisions.starts[0].placements,
        [Placement {
            node: "n1".into(),
            gpus: vec![2, 3]
        }]
    );
    assert_eq!(
        decisions.starts[1].placements,
        [Placement {
            node: "n1".into(),
            gpus: vec![4, 5, 6, 7]
        }]
    );
}

#[test]
fn models_regions_labels_health_and_cordons_are_respected() {
    let mut gdpr = node("eu-1", "r1", H100, 8);
    gdpr.labels.insert("eu-gdpr".into());
    let mut us = node("us-1", "r9", H100, 8);
    us.region = "us-east-1".into();
    let mut sick = node("eu-2", "r1", H100, 8);
    for gpu in &mut sick.gpus {
        gpu.healthy = gpu.index >= 6;
    }
    let mut cordoned = node("eu-3", "r1", H100, 8);
    cordoned.schedulable = false;
    let cluster = Cluster {
        nodes: vec![gdpr, us, sick, cordoned, node("eu-4", "r1", L40S, 8)],
    };

    let mut resident = job("resident", 8, 1);
    resident.required_labels.insert("eu-gdpr".into());
    let mut american = job("american", 4, 1);
    american.regions = vec!["us-east-1".into()];
    let mut l40s = job("inference", 2, 1);
    l40s.gpu_models = vec![L40S.into()];
    let decisions = schedule(
        &cluster,
        &[],
        &[resident, american, l40s, job("too-big", 4, 3)],
    );

    let node_of = |id: &str| {
        decisions
            .starts
            .iter()
            .find(|s| s.workload == id)
            .map(|s| s.placements[0].node.clone())
    };
    assert_eq!(node_of("resident").as_deref(), Some("eu-1"));
    assert_eq!(node_of("american").as_deref(), Some("us-1"));
    assert_eq!(node_of("inference").as_deref(), Some("eu-4"));
    // Three 4-GPU H100 nodes: eu-1 and us-1 are taken, eu-2 has 2 healthy
    // GPUs, eu-3 is cordoned.
    assert_eq!(decisions.waiting[0].workload, "too-big");
    assert_eq!(
        decisions.waiting[0].reason,
        PendingReason::NoSuitableNode { nodes_needed: 3 }
    );
}

#[test]
fn cpu_and_memory_must_fit_beside_the_gpus() {
    let mut small = node("n1", "r1", H100, 8);
    small.cpu_milli = 16_000;
    let cluster = Cluster { nodes: vec![small] };
    let mut hungry = job("hungry", 1, 1);
    hungry.cpu_milli_per_node = 12_000;
    let decisions = schedule(
        &cluster,
        &[],
        &[hungry.clone(), {
            let mut h = hungry;
            h.id = "second".into();
            h
        }],
    );
    assert_eq!(decisions.starts.len(), 1);
    assert_eq!(
        decisions.waiting[0].reason,
        PendingReason::CpuOrMemory {
            nodes_with_free_gpus: 1
        }
    );
}

#[test]
fn decisions_depend_on_the_input_only() {
    let mut cluster = Cluster {
        nodes: (0..6)
            .map(|i| node(&format!("n{i}"), &format!("r{}", i % 2), H100, 8))
            .collect(),
    };
    let pending: Vec<Workload> = (0..20)
        .map(|i| {
            let mut w = job(
                &format!("w{i:02}"),
                [1, 2, 4, 8][i % 4],
                1 + u32::from(i % 5 == 0),
            );
            w.priority = i32::try_from(i % 3).unwrap_or_default();
            w
        })
        .collect();
    let first = schedule(&cluster, &[], &pending);
    let mut reversed = pending.clone();
    reversed.reverse();
    cluster.nodes.reverse();
    assert_eq!(schedule(&cluster, &[], &reversed), first);

    // No GPU is handed out twice.
    let mut seen = BTreeSet::new();
    for start in &first.starts {
        for placement in &start.placements {
            for gpu in &placement.gpus {
                assert!(
                    seen.insert((placement.node.clone(), *gpu)),
                    "{}:{gpu} allocated twice",
                    placement.node
                );
            }
        }
    }
}
