//! Placement: GPU-model and constraint matching, gangs, topology, CPU and
//! memory fit, GPU sharing, and the selectable placement strategies.

mod common;

use common::{Drive, H100, L40S, World, job, node, nodes, running};
use gantry_scheduler::{
    GpuRequest, Placement, PlacementStrategy, Policy, Reason, RejectReason, Workload,
};

fn nodes_of(decisions: &gantry_scheduler::Decisions, id: &str) -> Vec<String> {
    decisions
        .start(id)
        .map(|s| s.placements.iter().map(|p| p.node.clone()).collect())
        .unwrap_or_default()
}

#[test]
fn a_four_gpu_job_waits_on_fragmentation_while_two_gpu_jobs_start() {
    let mut world = World::new(vec![node("n1", "r1", H100, 4), node("n2", "r1", H100, 4)]);
    world.running = vec![
        running(job("old-1", "a", 2, 1), &[("n1", &[0, 1])], common::NOON),
        running(job("old-2", "a", 2, 1), &[("n2", &[0, 1])], common::NOON),
    ];
    let mut big = job("big", "a", 4, 1);
    big.priority = gantry_scheduler::PriorityClass::Production;
    world.pending = vec![big, job("small-1", "a", 2, 1), job("small-2", "a", 2, 1)];

    let decisions = world.decide(&Policy {
        preemption: false,
        ..Policy::default()
    });

    let waiting = decisions.waiting("big").expect("big waits");
    assert!(waiting.reasons.contains(&Reason::Fragmentation {
        model: H100.into(),
        free_gpus: 4,
        gpus_per_node: 4,
        nodes_needed: 1,
        nodes_with_room: 0,
        largest_free_on_one_node: 2,
        next_release: None,
    }));
    assert!(
        waiting.reasons[0]
            .to_string()
            .starts_with("fragmentation: 4 H100-SXM-80GB free")
    );
    assert_eq!(
        decisions.start("small-1").map(|s| s.placements.clone()),
        Some(vec![Placement {
            node: "n1".into(),
            gpus: vec![2, 3]
        }])
    );
    assert_eq!(nodes_of(&decisions, "small-2"), ["n2"]);
}

#[test]
fn a_gang_is_placed_whole_or_not_at_all() {
    let mut world = World::new(vec![
        node("n1", "r1", H100, 8),
        node("n2", "r1", H100, 8),
        node("n3", "r2", H100, 8),
    ]);
    world.running = vec![
        running(job("a", "q", 1, 1), &[("n1", &[0])], common::NOON),
        running(job("b", "q", 1, 1), &[("n2", &[7])], common::NOON),
    ];
    world.pending = vec![job("gang", "q", 8, 3), job("one", "q", 1, 1)];
    let decisions = world.decide(&Policy::default());
    let waiting = decisions.waiting("gang").expect("the gang waits");
    assert!(waiting.reasons.iter().any(|r| matches!(
        r,
        Reason::Capacity {
            free_milli: 22_000,
            needed_milli: 24_000,
            ..
        }
    )));
    // The 1-GPU job packs onto a busy node and leaves n3 whole; nothing of
    // the gang is held now.
    assert_eq!(decisions.starts.len(), 1);
    assert_ne!(nodes_of(&decisions, "one"), ["n3"]);

    world.running.clear();
    let decisions = world.decide(&Policy::default());
    let placements = &decisions.start("gang").expect("gang starts").placements;
    assert_eq!(placements.len(), 3);
    assert!(
        placements
            .iter()
            .all(|p| p.gpus == (0..8).collect::<Vec<u32>>())
    );
}

#[test]
fn a_gang_stays_in_one_rack_when_one_can_hold_it() {
    let mut world = World::new(vec![
        node("a1", "rack-a", H100, 8),
        node("b1", "rack-b", H100, 8),
        node("b2", "rack-b", H100, 8),
    ]);
    world.pending = vec![job("pair", "q", 8, 2)];
    assert_eq!(
        nodes_of(&world.decide(&Policy::default()), "pair"),
        ["b1", "b2"]
    );
}

#[test]
fn multi_gpu_work_prefers_one_nvlink_domain_and_never_splits_a_node_request() {
    let mut world = World::new(vec![node("n1", "r1", H100, 8), node("n2", "r1", H100, 8)]);
    // n1: domain 0 has GPUs 2 and 3 free, domain 1 is free; n2 is idle.
    world.running = vec![running(
        job("x", "q", 2, 1),
        &[("n1", &[0, 1])],
        common::NOON,
    )];
    world.pending = vec![job("pair", "q", 2, 1), job("quad", "q", 4, 1)];
    let decisions = world.decide(&Policy::default());
    assert_eq!(
        decisions.start("pair").map(|s| s.placements.clone()),
        Some(vec![Placement {
            node: "n1".into(),
            gpus: vec![2, 3]
        }])
    );
    assert_eq!(
        decisions.start("quad").map(|s| s.placements.clone()),
        Some(vec![Placement {
            node: "n1".into(),
            gpus: vec![4, 5, 6, 7]
        }])
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
    let mut world = World::new(vec![gdpr, us, sick, cordoned, node("eu-4", "r1", L40S, 8)]);

    let mut resident = job("resident", "q", 8, 1);
    resident.required_labels.insert("eu-gdpr".into());
    let mut american = job("american", "q", 4, 1);
    american.regions = vec!["us-east-1".into()];
    let mut l40s = job("inference", "q", 2, 1);
    l40s.gpu_models = vec![L40S.into()];
    let mut nowhere = job("nowhere", "q", 1, 1);
    nowhere.regions = vec!["ap-south-1".into()];
    world.pending = vec![resident, american, l40s, job("too-big", "q", 4, 5), nowhere];
    let decisions = world.decide(&Policy::default());

    assert_eq!(nodes_of(&decisions, "resident"), ["eu-1"]);
    assert_eq!(nodes_of(&decisions, "american"), ["us-1"]);
    assert_eq!(nodes_of(&decisions, "inference"), ["eu-4"]);
    // Four H100 nodes could ever host 4 GPUs (the cordoned one may come
    // back): a 5-node gang never fits and is rejected at admission.
    let rejected = |id: &str| {
        decisions
            .rejections
            .iter()
            .find(|r| r.workload == id)
            .map(|r| r.reason.clone())
    };
    assert_eq!(
        rejected("too-big"),
        Some(RejectReason::NeverFits {
            nodes_needed: 5,
            nodes_that_could: 4
        })
    );
    assert_eq!(
        rejected("nowhere"),
        Some(RejectReason::NeverFits {
            nodes_needed: 1,
            nodes_that_could: 0
        })
    );
}

#[test]
fn cpu_and_memory_must_fit_beside_the_gpus() {
    let mut small = node("n1", "r1", H100, 8);
    small.cpu_milli = 16_000;
    let mut world = World::new(vec![small]);
    let mut hungry = job("hungry", "q", 1, 1);
    hungry.cpu_milli_per_node = 12_000;
    let mut second = hungry.clone();
    second.id = "second".into();
    world.pending = vec![hungry, second];
    let decisions = world.decide(&Policy::default());
    assert_eq!(decisions.starts.len(), 1);
    assert!(
        decisions
            .waiting("second")
            .is_some_and(|w| w.reasons.contains(&Reason::CpuOrMemory {
                nodes_with_free_gpus: 1
            }))
    );
}

fn fraction(id: &str, milli: u32) -> Workload {
    let mut w = job(id, "q", 0, 1);
    w.gpus = GpuRequest::Milli(milli);
    w.cpu_milli_per_node = 1_000;
    w
}

#[test]
fn fractions_share_a_gpu_without_exceeding_it_and_whole_work_never_lands_there() {
    let mut world = World::new(vec![node("n1", "r1", H100, 2)]);
    world.pending = vec![
        fraction("f1", 500),
        fraction("f2", 300),
        fraction("f3", 400),
        job("whole", "q", 1, 1),
        job("second-whole", "q", 1, 1),
    ];
    let decisions = world.decide(&Policy::default());
    let gpu_of = |id: &str| decisions.start(id).map(|s| s.placements[0].gpus.clone());
    // 500 + 300 share one GPU; 400 does not fit beside them and takes the
    // other; whole GPUs are then gone.
    assert_eq!(gpu_of("f1"), gpu_of("f2"));
    assert_ne!(gpu_of("f1"), gpu_of("f3"));
    assert!(decisions.start("whole").is_none() && decisions.start("second-whole").is_none());

    // With one whole GPU taken first, every fraction packs onto the other.
    world.pending.retain(|w| w.id != "second-whole");
    world.pending[3].submitted_at -= 10;
    let decisions = world.decide(&Policy::default());
    let whole = decisions
        .start("whole")
        .map(|s| s.placements[0].gpus.clone());
    let shared = decisions.start("f1").map(|s| s.placements[0].gpus.clone());
    assert!(whole.is_some() && shared.is_some() && whole != shared);
    assert_eq!(
        decisions.start("f2").map(|s| s.placements[0].gpus.clone()),
        shared
    );
    assert!(
        decisions.start("f3").is_none(),
        "500 + 300 + 400 exceeds one GPU"
    );
}

/// A workload asking for `slices` MIG slices.
fn mig_job(id: &str, slices: u8) -> Workload {
    let mut w = job(id, "q", 0, 1);
    w.gpus = GpuRequest::Mig(slices);
    w
}

#[test]
fn mig_slices_go_only_to_mig_gpus() {
    let mut mig = node("n1", "r1", H100, 2);
    mig.gpus[1].mig_slices = Some(7);
    let mut world = World::new(vec![mig]);
    world.pending = vec![
        mig_job("m1", 3),
        mig_job("m2", 4),
        mig_job("m3", 1),
        job("whole", "q", 2, 1),
    ];
    let decisions = world.decide(&Policy::default());
    for id in ["m1", "m2"] {
        assert_eq!(
            decisions.start(id).map(|s| s.placements[0].gpus.clone()),
            Some(vec![1])
        );
    }
    assert!(
        decisions.start("m3").is_none(),
        "all seven slices are taken"
    );
    // The MIG GPU never counts as a whole one: two whole GPUs never fit.
    assert!(decisions.start("whole").is_none());
    assert!(decisions.rejections.iter().any(|r| r.workload == "whole"));
}

#[test]
fn mig_requests_match_the_size_of_a_gpus_instances() {
    // GPU 0 holds seven 1-slice instances, GPU 1 two 3-slice ones.
    let mut mig = node("n1", "r1", H100, 2);
    mig.gpus[0].mig_slices = Some(7);
    mig.gpus[0].mig_instance_slices = Some(1);
    mig.gpus[1].mig_slices = Some(6);
    mig.gpus[1].mig_instance_slices = Some(3);
    let mut world = World::new(vec![mig]);
    world.pending = vec![
        mig_job("small", 1),
        mig_job("big1", 3),
        mig_job("big2", 3),
        mig_job("big3", 3),
        mig_job("four", 4),
    ];
    let decisions = world.decide(&Policy::default());
    let gpu = |id: &str| decisions.start(id).map(|s| s.placements[0].gpus.clone());
    assert_eq!(gpu("small"), Some(vec![0]));
    assert_eq!(gpu("big1"), Some(vec![1]));
    assert_eq!(gpu("big2"), Some(vec![1]));
    assert!(gpu("big3").is_none(), "GPU 1 has two 3-slice instances");
    assert!(gpu("four").is_none(), "no GPU has 4-slice instances");
    assert!(decisions.rejections.iter().any(|r| r.workload == "four"));
}

#[test]
fn mig_instances_pack_onto_nodes_whose_mig_gpus_are_in_use() {
    let mig_node = |name: &str| {
        let mut n = node(name, "r1", H100, 2);
        for gpu in &mut n.gpus {
            gpu.mig_slices = Some(7);
            gpu.mig_instance_slices = Some(1);
        }
        n
    };
    let mut world = World::new(vec![mig_node("n1"), mig_node("n2"), mig_node("n3")]);
    world.running = vec![running(mig_job("held", 1), &[("n2", &[1])], common::NOON)];
    world.pending = (0..6).map(|i| mig_job(&format!("m{i}"), 1)).collect();
    let decisions = world.decide(&Policy::default());
    for i in 0..6 {
        let start = decisions.start(&format!("m{i}")).expect("placed");
        assert_eq!(
            (
                start.placements[0].node.as_str(),
                start.placements[0].gpus.clone()
            ),
            ("n2", vec![1]),
            "m{i} fills the GPU already in use"
        );
    }
}

#[test]
fn placement_strategies_are_selectable() {
    // n0 has 1 free, n1 3 free, n2 8 free; a 1-GPU job.
    let mut world = World::new(nodes(3));
    world.running = vec![
        running(
            job("x", "q", 7, 1),
            &[("n0", &[0, 1, 2, 3, 4, 5, 6])],
            common::NOON,
        ),
        running(
            job("y", "q", 5, 1),
            &[("n1", &[0, 1, 2, 3, 4])],
            common::NOON,
        ),
    ];
    world.pending = vec![job("one", "q", 1, 1)];
    let on = |placement| {
        nodes_of(
            &world.decide(&Policy {
                placement,
                ..Policy::default()
            }),
            "one",
        )
    };
    assert_eq!(on(PlacementStrategy::BestFit), ["n0"]);
    assert_eq!(on(PlacementStrategy::FirstFit), ["n0"]);
    assert_eq!(on(PlacementStrategy::Spread), ["n2"]);
    assert_eq!(on(PlacementStrategy::FragmentationAware), ["n0"]);
    let random: Vec<Vec<String>> = (0..16)
        .map(|seed| on(PlacementStrategy::Random { seed }))
        .collect();
    assert!(
        random.iter().any(|n| n != &random[0]),
        "seeds draw different nodes"
    );
    assert_eq!(
        on(PlacementStrategy::Random { seed: 3 }),
        on(PlacementStrategy::Random { seed: 3 })
    );
}

#[test]
fn fragmentation_aware_placement_keeps_room_for_the_shapes_that_wait() {
    // n0 has 3 free GPUs, n1 has 2. Waiting work is mostly 2-GPU jobs: a
    // 1-GPU job on n0 leaves 2 + 2 (two 2-GPU slots), where best-fit on n1
    // leaves 3 + 1 (one slot).
    let mut world = World::new(nodes(2));
    world.running = vec![
        running(
            job("x", "q", 5, 1),
            &[("n0", &[0, 1, 2, 3, 4])],
            common::NOON,
        ),
        running(
            job("y", "q", 6, 1),
            &[("n1", &[0, 1, 2, 3, 4, 5])],
            common::NOON,
        ),
    ];
    let mut pending = vec![job("one", "q", 1, 1)];
    for i in 0..6 {
        let mut pair = job(&format!("pair-{i}"), "q", 2, 1);
        pair.submitted_at += 10;
        pair.earliest_start = Some(common::NOON + 3_600);
        pending.push(pair);
    }
    world.pending = pending;
    let fgd = world.decide(&Policy::default());
    assert_eq!(nodes_of(&fgd, "one"), ["n0"]);
    let best_fit = world.decide(&Policy {
        placement: PlacementStrategy::BestFit,
        ..Policy::default()
    });
    assert_eq!(nodes_of(&best_fit, "one"), ["n1"]);
}

fn placer_cluster(nodes: Vec<gantry_scheduler::Node>) -> gantry_scheduler::Cluster {
    gantry_scheduler::Cluster {
        nodes,
        regions: Vec::new(),
    }
}

/// A workload's models in a trace are alternatives, not an order of
/// preference: a half GPU that may run on either model joins the partly
/// used GPU of the second instead of opening a GPU of the first.
#[test]
fn work_that_may_run_on_several_models_takes_the_best_node_of_any() {
    let cluster = placer_cluster(vec![node("h", "r1", H100, 2), node("l", "r1", L40S, 2)]);
    let half = |id: &str, models: &[&str]| Workload {
        gpu_models: models.iter().map(|m| (*m).into()).collect(),
        gpus: GpuRequest::Milli(500),
        ..job(id, "a", 1, 1)
    };
    let either = half("either", &[H100, L40S]);
    let mut placer =
        gantry_scheduler::Placer::new(&cluster, &Policy::default(), std::slice::from_ref(&either));

    let first = placer.place(&half("l40s-only", &[L40S])).expect("fits");
    let second = placer.place(&either).expect("fits");

    assert_eq!(first[0].node, "l");
    assert_eq!(second, first);
    assert_eq!(placer.fill().allocated_milli, 1_000);
}

/// Work that may run anywhere leaves the model that other expected work
/// can only run on, so that work still fits when it comes.
#[test]
fn work_that_may_run_anywhere_leaves_the_model_other_work_needs() {
    let cluster = placer_cluster(vec![node("l", "r1", L40S, 2), node("h", "r1", H100, 8)]);
    let anywhere = Workload {
        gpu_models: vec![L40S.into(), H100.into()],
        ..job("anywhere", "a", 1, 1)
    };
    let l40s_pair = Workload {
        gpu_models: vec![L40S.into()],
        ..job("l40s-pair", "a", 2, 1)
    };
    let expected = [anywhere.clone(), l40s_pair.clone()];
    for placement in [
        PlacementStrategy::FragmentationAware,
        PlacementStrategy::Fgd,
    ] {
        let policy = Policy {
            placement,
            ..Policy::default()
        };
        let mut placer = gantry_scheduler::Placer::new(&cluster, &policy, &expected);

        let first = placer.place(&anywhere).expect("fits");
        let pair = placer.place(&l40s_pair);

        assert_eq!(first[0].node, "h", "{placement:?}");
        assert_eq!(
            pair.map(|p| p[0].node.clone()).as_deref(),
            Some("l"),
            "{placement:?}"
        );
    }
}
