//! The capacity report: totals, free versus schedulable slots per shape, and
//! the fragmentation index.

mod common;

use common::{Drive, H100, NOON, World, job, node, running};
use gantry_scheduler::{
    AdvanceReservation, GpuRequest, LaunchShape, Placement, RegionRoom, ShapeSlots,
    capacity_report, capacity_reports, launch_room,
};

#[test]
fn free_is_not_schedulable_when_fragmented() {
    let mut sick = node("h3", "r1", "H100", 8);
    sick.gpus[7].healthy = false;
    let mut cordoned = node("h4", "r1", "H100", 8);
    cordoned.schedulable = false;
    let mut world = World::new(vec![
        node("h1", "r1", "H100", 8),
        node("h2", "r1", "H100", 8),
        sick,
        cordoned,
        node("l1", "r1", "L40S", 4),
    ]);
    world.running = vec![
        running(job("a", "q", 2, 1), &[("h1", &[0, 1])], common::NOON),
        running(job("b", "q", 4, 1), &[("h3", &[0, 1, 2, 3])], common::NOON),
    ];
    let report = capacity_report(&world.snapshot());

    let h100 = &report.models[0];
    assert_eq!(h100.model, "H100");
    assert_eq!((h100.total, h100.healthy, h100.allocated), (32, 31, 6));
    // h1: 6 free, h2: 8 free, h3: 3 free (one unhealthy), h4 cordoned.
    assert_eq!(h100.free, 17);
    let slots = |shape: u32| {
        h100.shapes
            .iter()
            .find(|s| s.gpus_per_node == shape)
            .map(|s| s.slots)
    };
    assert_eq!(slots(1), Some(17));
    assert_eq!(slots(2), Some(3 + 4 + 1));
    assert_eq!(slots(4), Some(1 + 2));
    assert_eq!(slots(8), Some(1));
    assert_eq!(h100.whole_free_nodes, 1);
    // 17 free, of which only h2's 8 can serve a whole-node request.
    assert_eq!(h100.fragmentation_permille, 1000 - 8 * 1000 / 17);

    let l40s = &report.models[1];
    assert_eq!(
        (
            l40s.model.as_str(),
            l40s.free,
            l40s.whole_free_nodes,
            l40s.fragmentation_permille
        ),
        ("L40S", 4, 1, 0)
    );
    assert_eq!(
        l40s.shapes[3],
        ShapeSlots {
            gpus_per_node: 8,
            slots: 0
        }
    );
}

#[test]
fn an_idle_cluster_is_not_fragmented_and_a_full_one_has_nothing_free() {
    let mut world = World::new(vec![node("a", "r1", "H200", 8), node("b", "r1", "H200", 8)]);
    let idle = capacity_report(&world.snapshot());
    assert_eq!(
        (
            idle.models[0].free,
            idle.models[0].fragmentation_permille,
            idle.models[0].whole_free_nodes
        ),
        (16, 0, 2)
    );
    let all: &[u32] = &[0, 1, 2, 3, 4, 5, 6, 7];
    world.running = vec![running(
        job("w", "q", 8, 2),
        &[("a", all), ("b", all)],
        common::NOON,
    )];
    let full = capacity_report(&world.snapshot());
    assert_eq!(
        (
            full.models[0].allocated,
            full.models[0].free,
            full.models[0].fragmentation_permille
        ),
        (16, 0, 0)
    );
}

#[test]
fn a_launch_sees_room_per_region_after_running_work_reservations_cpu_and_the_queue() {
    let in_region = |mut n: gantry_scheduler::Node, region: &str| {
        n.region = region.into();
        n
    };
    let mut short_of_cpu = node("d", "r1", H100, 8);
    short_of_cpu.cpu_milli = 16_000;
    let mut cordoned = in_region(node("c", "r2", H100, 8), "us-east-1");
    cordoned.schedulable = false;
    let mut world = World::new(vec![
        node("a", "r1", H100, 8),
        short_of_cpu,
        in_region(node("b", "r2", H100, 8), "us-east-1"),
        cordoned,
        in_region(node("l", "r3", "L40S", 4), "ap-northeast-2"),
    ]);
    world.running = vec![running(job("r", "q", 2, 1), &[("a", &[0, 1])], NOON)];
    world.reservations = vec![AdvanceReservation {
        id: "later".into(),
        queue: "other".into(),
        start: NOON + 2 * 3_600,
        end: NOON + 4 * 3_600,
        placements: vec![Placement {
            node: "b".into(),
            gpus: (0..4).collect(),
        }],
    }];
    let mut pinned = job("p", "q", 1, 2);
    pinned.regions = vec!["us-east-1".into()];
    world.pending = vec![pinned, job("anywhere", "q", 4, 1)];

    let shape = LaunchShape {
        model: H100.into(),
        gpus: GpuRequest::Whole(2),
        cpu_milli: 8_000,
        memory_mib: 64 * 1_024,
    };
    let rooms = launch_room(&world.snapshot(), &shape);
    assert_eq!(
        rooms,
        vec![
            // a: 6 free GPUs, 3 pairs; d: 8 free GPUs but CPU for 2.
            RegionRoom {
                region: "eu-west-1".into(),
                instances: Some(3 + 2),
                waiting_gpus: 4,
            },
            // b: 4 GPUs left once the later reservation is taken out; c is
            // cordoned.
            RegionRoom {
                region: "us-east-1".into(),
                instances: Some(2),
                waiting_gpus: 2 + 4,
            },
        ]
    );

    // A quarter GPU fits four times on each GPU nobody shares yet, within
    // each node's CPU: 15 on a, 2 on d.
    let quarter = LaunchShape {
        gpus: GpuRequest::Milli(250),
        ..shape.clone()
    };
    let rooms = launch_room(&world.snapshot(), &quarter);
    assert_eq!(rooms[0].instances, Some(15 + 2));
    // No GPU here is in MIG mode.
    let mig = LaunchShape {
        gpus: GpuRequest::Mig(1),
        ..shape.clone()
    };
    assert_eq!(launch_room(&world.snapshot(), &mig)[0].instances, Some(0));

    let unknown = LaunchShape {
        model: "B200".into(),
        ..shape
    };
    assert!(launch_room(&world.snapshot(), &unknown).is_empty());
}

#[test]
fn a_launch_counts_slices_left_on_shared_and_mig_gpus() {
    // GPU 0 is shared and 600 of it is held; GPU 1 is free; GPUs 2 and 3
    // are in MIG mode: seven 1-slice instances (two held) and two 3-slice
    // ones; GPU 4 is sick, GPUs 5 to 7 are held by a reservation.
    let mut n = node("n", "r1", H100, 8);
    n.gpus[2].mig_slices = Some(7);
    n.gpus[2].mig_instance_slices = Some(1);
    n.gpus[3].mig_slices = Some(6);
    n.gpus[3].mig_instance_slices = Some(3);
    n.gpus[4].healthy = false;
    let mut world = World::new(vec![n]);
    let mut shared = job("shared", "q", 0, 1);
    shared.gpus = GpuRequest::Milli(600);
    shared.cpu_milli_per_node = 1_000;
    let mut slices = job("slices", "q", 0, 1);
    slices.gpus = GpuRequest::Mig(1);
    slices.cpu_milli_per_node = 1_000;
    world.running = vec![
        running(shared, &[("n", &[0])], NOON),
        running(slices.clone(), &[("n", &[2])], NOON),
        running(slices, &[("n", &[2])], NOON),
    ];
    world.reservations = vec![AdvanceReservation {
        id: "held".into(),
        queue: "other".into(),
        start: NOON,
        end: NOON + 3_600,
        placements: vec![Placement {
            node: "n".into(),
            gpus: vec![5, 6, 7],
        }],
    }];
    let shape = |gpus| LaunchShape {
        model: H100.into(),
        gpus,
        cpu_milli: 1_000,
        memory_mib: 1_024,
    };
    let count = |gpus| launch_room(&world.snapshot(), &shape(gpus))[0].instances;
    // A fifth: two on what GPU 0 has left, five on GPU 1.
    assert_eq!(count(GpuRequest::Milli(200)), Some(2 + 5));
    // Half a GPU: none on GPU 0's 400 left.
    assert_eq!(count(GpuRequest::Milli(500)), Some(2));
    assert_eq!(count(GpuRequest::Mig(1)), Some(5));
    assert_eq!(count(GpuRequest::Mig(3)), Some(2));
    assert_eq!(
        count(GpuRequest::Mig(2)),
        Some(0),
        "no GPU has 2-slice instances"
    );
    assert_eq!(count(GpuRequest::Whole(1)), Some(1));
}

#[test]
fn capacity_splits_by_region_and_adds_up_to_the_whole() {
    let mut far = node("f1", "r9", H100, 8);
    far.region = "us-east-1".into();
    let mut world = World::new(vec![node("a", "r1", H100, 8), far]);
    world.running = vec![running(job("r", "q", 3, 1), &[("a", &[0, 1, 2])], NOON)];
    let (whole, regions) = capacity_reports(&world.snapshot());
    assert_eq!(whole, capacity_report(&world.snapshot()));
    assert_eq!(
        regions.keys().map(String::as_str).collect::<Vec<_>>(),
        ["eu-west-1", "us-east-1"]
    );
    let free = |r: &str| regions[r].models[0].free;
    assert_eq!((free("eu-west-1"), free("us-east-1")), (5, 8));
    assert_eq!(free("eu-west-1") + free("us-east-1"), whole.models[0].free);
    assert_eq!(regions["us-east-1"].models[0].whole_free_nodes, 1);
    assert_eq!(regions["eu-west-1"].models[0].fragmentation_permille, 1000);
}
