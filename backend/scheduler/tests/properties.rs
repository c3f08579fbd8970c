//! Properties that hold for any cluster, queue and sequence of cycles: no
//! GPU is handed out twice or beyond its capacity, gangs are all-or-nothing,
//! every placement meets the workload's model, region, label, health, CPU
//! and memory constraints, a guaranteed quota is never blocked by
//! borrowers, backfill never delays the head reservation, the same input
//! gives the same decisions, and leaving out the reasons changes none.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::{Drive, NOON, World, running};
use gantry_scheduler::{
    Backfill, Cluster, Decisions, Gpu, GpuRequest, Node, Policy, PriorityClass, Queue, Quota,
    Running, Workload,
};
use proptest::prelude::*;

const MODELS: [&str; 3] = ["H100-SXM-80GB", "H200-141GB", "L40S-48GB"];
const REGIONS: [&str; 2] = ["eu-west-1", "us-east-1"];
const CLASSES: [PriorityClass; 4] = [
    PriorityClass::Preemptible,
    PriorityClass::Batch,
    PriorityClass::Standard,
    PriorityClass::Production,
];

fn arb_node(index: usize) -> impl Strategy<Value = Node> {
    (
        0..3usize,
        0..2usize,
        0..3u32,
        prop::sample::select(vec![1u32, 2, 4, 8]),
        any::<bool>(),
        prop::collection::vec(any::<bool>(), 8),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            move |(model, region, rack, gpus, labelled, health, cordoned, mig)| Node {
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
                        mig_slices: (mig && g == gpus - 1 && gpus > 1).then_some(7),
                        mig_instance_slices: None,
                    })
                    .collect(),
            },
        )
}

fn arb_cluster() -> impl Strategy<Value = Cluster> {
    (1..12usize)
        .prop_flat_map(|n| (0..n).map(arb_node).collect::<Vec<_>>())
        .prop_map(|nodes| Cluster {
            nodes,
            regions: Vec::new(),
        })
}

fn arb_request() -> impl Strategy<Value = (GpuRequest, u32)> {
    prop_oneof![
        4 => (prop::sample::select(vec![0u32, 1, 2, 4, 8]), 1..4u32).prop_map(|(g, n)| (GpuRequest::Whole(g), n)),
        1 => prop::sample::select(vec![250u32, 500, 700]).prop_map(|m| (GpuRequest::Milli(m), 1)),
        1 => (1..4u8).prop_map(|s| (GpuRequest::Mig(s), 1)),
    ]
}

fn arb_workload(index: usize) -> impl Strategy<Value = Workload> {
    (
        prop::collection::vec(0..3usize, 1..3),
        arb_request(),
        0..40_000u64,
        0..4usize,
        prop::option::of(0..2usize),
        any::<bool>(),
        prop::option::of(1..30i64),
        0..3usize,
    )
        .prop_map(
            move |(models, (gpus, nodes), cpu, class, region, gdpr, minutes, queue)| Workload {
                id: format!("w{index:03}"),
                queue: format!("q{queue}"),
                gpu_models: models.into_iter().map(|m| MODELS[m].to_owned()).collect(),
                gpus,
                node_count: nodes,
                cpu_milli_per_node: cpu,
                memory_mib_per_node: cpu * 4,
                priority: CLASSES[class],
                submitted_at: NOON + i64::try_from(index).unwrap_or_default(),
                duration_estimate: minutes.map(|m| m * 60),
                regions: region
                    .map(|r| vec![REGIONS[r].to_owned()])
                    .unwrap_or_default(),
                required_labels: if gdpr {
                    BTreeSet::from(["eu-gdpr".to_owned()])
                } else {
                    BTreeSet::new()
                },
                ..Workload::default()
            },
        )
}

fn arb_pending() -> impl Strategy<Value = Vec<Workload>> {
    (0..25usize).prop_flat_map(|n| (0..n).map(arb_workload).collect::<Vec<_>>())
}

/// Some GPUs already held by running work: the first whole GPU of every
/// third node, by a batch job of queue q0 that ends in ten minutes.
fn running_on(cluster: &Cluster) -> Vec<Running> {
    cluster
        .nodes
        .iter()
        .step_by(3)
        .filter(|n| {
            n.gpus
                .first()
                .is_some_and(|g| g.mig_slices.is_none() && g.healthy)
        })
        .map(|n| {
            let mut w = common::job(&format!("running-{}", n.name), "q0", 1, 1);
            w.gpu_models = vec![n.gpus[0].model.clone()];
            w.cpu_milli_per_node = 1_000;
            w.memory_mib_per_node = 1_024;
            w.priority = PriorityClass::Batch;
            w.duration_estimate = Some(600);
            running(w, &[(n.name.as_str(), &[n.gpus[0].index])], NOON - 300)
        })
        .collect()
}

fn world(cluster: Cluster, pending: Vec<Workload>) -> World {
    let mut world = World::new(cluster.nodes.clone());
    world.cluster = cluster;
    world.running = running_on(&world.cluster);
    world.pending = pending;
    world
}

/// Checks that everything running holds capacity soundly.
fn check_running(world: &World) -> Result<(), TestCaseError> {
    let nodes: BTreeMap<&str, &Node> = world
        .cluster
        .nodes
        .iter()
        .map(|n| (n.name.as_str(), n))
        .collect();
    let mut units: BTreeMap<(String, u32), u32> = BTreeMap::new();
    let mut whole: BTreeSet<(String, u32)> = BTreeSet::new();
    let mut cpu: BTreeMap<&str, u64> = BTreeMap::new();
    let mut mem: BTreeMap<&str, u64> = BTreeMap::new();
    for run in &world.running {
        let w = &run.workload;
        prop_assert_eq!(run.placements.len(), w.node_count as usize, "gang whole");
        let distinct: BTreeSet<&str> = run.placements.iter().map(|p| p.node.as_str()).collect();
        prop_assert_eq!(distinct.len(), run.placements.len());
        let mut models = BTreeSet::new();
        for placement in &run.placements {
            let node = nodes[placement.node.as_str()];
            prop_assert!(w.regions.is_empty() || w.regions.contains(&node.region));
            prop_assert!(w.required_labels.is_subset(&node.labels));
            *cpu.entry(node.name.as_str()).or_default() += w.cpu_milli_per_node;
            *mem.entry(node.name.as_str()).or_default() += w.memory_mib_per_node;
            prop_assert!(
                cpu[node.name.as_str()] <= node.cpu_milli,
                "CPU over capacity"
            );
            prop_assert!(
                mem[node.name.as_str()] <= node.memory_mib,
                "memory over capacity"
            );
            let expected = match w.gpus {
                GpuRequest::Whole(k) => k as usize,
                GpuRequest::Milli(_) | GpuRequest::Mig(_) => 1,
            };
            prop_assert_eq!(placement.gpus.len(), expected);
            for index in &placement.gpus {
                let gpu = node.gpus.iter().find(|g| g.index == *index);
                prop_assert!(gpu.is_some_and(|g| g.healthy), "unhealthy or unknown GPU");
                let Some(gpu) = gpu else { continue };
                prop_assert!(w.gpu_models.contains(&gpu.model));
                models.insert(gpu.model.clone());
                let key = (node.name.clone(), *index);
                match w.gpus {
                    GpuRequest::Whole(_) => {
                        prop_assert!(gpu.mig_slices.is_none(), "whole work on a MIG GPU");
                        prop_assert!(!units.contains_key(&key), "whole work on a shared GPU");
                        prop_assert!(
                            whole.insert(key),
                            "GPU {}:{} handed out twice",
                            node.name,
                            index
                        );
                    }
                    GpuRequest::Milli(m) => {
                        prop_assert!(gpu.mig_slices.is_none());
                        prop_assert!(!whole.contains(&key), "a fraction on a whole GPU");
                        let used = units.entry(key).or_default();
                        *used += m;
                        prop_assert!(*used <= 1_000, "GPU shared beyond capacity");
                    }
                    GpuRequest::Mig(s) => {
                        let used = units.entry(key).or_default();
                        *used += u32::from(s);
                        prop_assert!(
                            gpu.mig_slices.is_some_and(|t| *used <= u32::from(t)),
                            "MIG slices beyond capacity"
                        );
                    }
                }
            }
        }
        prop_assert!(models.len() <= 1, "one GPU model per workload");
    }
    Ok(())
}

fn accounted(decisions: &Decisions, pending: &[Workload]) -> Result<(), TestCaseError> {
    let mut ids: Vec<&str> = decisions
        .starts
        .iter()
        .map(|s| s.workload.as_str())
        .chain(decisions.waiting.iter().map(|w| w.workload.as_str()))
        .chain(decisions.rejections.iter().map(|r| r.workload.as_str()))
        .collect();
    ids.sort_unstable();
    let mut expected: Vec<&str> = pending.iter().map(|w| w.id.as_str()).collect();
    expected.sort_unstable();
    prop_assert_eq!(ids, expected, "every workload decided exactly once");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn placements_stay_sound_over_many_cycles(cluster in arb_cluster(), pending in arb_pending()) {
        let mut world = world(cluster, pending);
        for _ in 0..6 {
            let before = world.pending.clone();
            let mut during = world.clone();
            let decisions = world.cycle(&Policy::default(), 300);
            accounted(&decisions, &before)?;
            // What ran during the cycle, its starts included, fits.
            during.running.extend(decisions.starts.iter().filter_map(|s| {
                before.iter().find(|w| w.id == s.workload).map(|w| Running {
                    workload: w.clone(),
                    placements: s.placements.clone(),
                    started_at: during.now,
                    last_checkpoint_at: None,
                    stopping_at: None,
                })
            }));
            check_running(&during)?;
        }
    }

    #[test]
    fn decisions_are_deterministic(cluster in arb_cluster(), pending in arb_pending()) {
        let world = world(cluster, pending);
        let first = world.decide(&Policy::default());
        prop_assert_eq!(&world.decide(&Policy::default()), &first);
        let mut shuffled = world.clone();
        shuffled.cluster.nodes.rotate_left(world.cluster.nodes.len() / 2);
        shuffled.pending.reverse();
        prop_assert_eq!(shuffled.decide(&Policy::default()), first);
    }

    #[test]
    fn turning_reasons_off_changes_no_decision(
        cluster in arb_cluster(),
        pending in arb_pending(),
        strict in any::<bool>(),
    ) {
        let world = world(cluster, pending);
        let with = Policy {
            backfill: if strict { Backfill::None } else { Backfill::Easy },
            planning_depth: 1,
            ..Policy::default()
        };
        let without = Policy { reasons: false, ..with.clone() };
        let (full, lean) = (world.decide(&with), world.decide(&without));
        prop_assert_eq!(&lean.starts, &full.starts);
        prop_assert_eq!(&lean.preemptions, &full.preemptions);
        prop_assert_eq!(&lean.reservations, &full.reservations);
        prop_assert_eq!(&lean.rejections, &full.rejections);
        // Only work with an estimate is listed, with the same estimate.
        let estimated: Vec<(&str, Option<i64>)> = full
            .waiting
            .iter()
            .filter(|w| w.estimated_start.is_some())
            .map(|w| (w.workload.as_str(), w.estimated_start))
            .collect();
        let listed: Vec<(&str, Option<i64>)> = lean
            .waiting
            .iter()
            .map(|w| (w.workload.as_str(), w.estimated_start))
            .collect();
        prop_assert_eq!(listed, estimated);
        prop_assert!(lean.waiting.iter().all(|w| w.reasons.is_empty()));
    }

    #[test]
    fn a_guarantee_is_never_blocked_by_borrowers(
        node_count in 1..6u32,
        gpus in prop::sample::select(vec![1u32, 2, 4, 8]),
        classes in prop::collection::vec(0..4usize, 48),
    ) {
        // Other queues, guaranteed nothing, fill every GPU with 1-GPU work
        // of any class; the owner's request fits its guarantee.
        let mut world = World::new(common::nodes(node_count));
        let owner = {
            let mut q = Queue::new("owner");
            q.quotas.insert(common::H100.into(), Quota { guaranteed: gpus, borrow_limit: None, max: None });
            q
        };
        world.queues = vec![owner, Queue::new("b0"), Queue::new("b1")];
        let mut index = 0;
        for n in 0..node_count {
            for g in 0..8 {
                let mut w = common::job(&format!("b{index:03}"), &format!("b{}", index % 2), 1, 1);
                w.priority = CLASSES[classes[index % classes.len()]];
                world.running.push(running(w, &[(format!("n{n}").as_str(), &[g])], NOON - 3_600));
                index += 1;
            }
        }
        let mut request = common::job("owned", "owner", gpus, 1);
        request.priority = PriorityClass::Batch;
        world.pending = vec![request];
        let decisions = world.decide(&Policy::default());
        let freed = decisions.preemptions.iter().filter(|p| p.by == "owned").count();
        prop_assert!(freed >= gpus as usize, "{} preemptions for {} GPUs", freed, gpus);
        // After the grace period it starts.
        for _ in 0..3 {
            if world.cycle(&Policy::default(), 31).start("owned").is_some() {
                return Ok(());
            }
        }
        prop_assert!(false, "the guaranteed work never started");
    }

    #[test]
    fn backfill_never_delays_the_head_reservation(
        busy in prop::collection::vec((0..4u32, 0..8u32, 1..30i64), 1..20),
        stream in prop::collection::vec((prop::sample::select(vec![1u32, 2, 4]), 1..30i64, 0..20i64), 0..40),
    ) {
        let mut world = World::new(common::nodes(4));
        let mut taken = BTreeSet::new();
        for (i, (n, g, minutes)) in busy.into_iter().enumerate() {
            if taken.insert((n, g)) {
                let mut w = common::job(&format!("busy-{i:02}"), "q", 1, 1);
                w.duration_estimate = Some(minutes * 60);
                world.running.push(running(w, &[(format!("n{n}").as_str(), &[g])], NOON));
            }
        }
        let mut head = common::job("head", "q", 8, 4);
        head.duration_estimate = Some(3_600);
        head.submitted_at = NOON - 60;
        world.pending = vec![head];
        // In arrival order, so that only backfill could pass the head.
        let policy = Policy {
            aging_per_hour: 0.0,
            fair_share: false,
            shorter_first_factor: 0.0,
            ..Policy::default()
        };
        let first = world.decide(&policy);
        let Some(reserved) = first.reservations.first().map(|r| r.start_at) else {
            prop_assert!(first.start("head").is_some());
            return Ok(());
        };
        let mut arrivals: BTreeMap<i64, Vec<Workload>> = BTreeMap::new();
        for (i, (gpus, minutes, at)) in stream.into_iter().enumerate() {
            let mut w = common::job(&format!("s{i:02}"), "q", gpus, 1);
            w.duration_estimate = Some(minutes * 60);
            w.submitted_at = NOON + at * 60;
            arrivals.entry(NOON + at * 60).or_default().push(w);
        }
        while world.now <= reserved {
            world.pending.extend(arrivals.remove(&world.now).unwrap_or_default());
            let now = world.now;
            if world.cycle(&policy, 60).start("head").is_some() {
                prop_assert!(now <= reserved, "started at {} after its reservation {}", now, reserved);
                return Ok(());
            }
        }
        prop_assert!(false, "the head did not start by its reservation at {}", reserved);
    }
}
