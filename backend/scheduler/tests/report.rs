//! The capacity report: totals, free versus schedulable slots per shape, and
//! the fragmentation index.

mod common;

use common::{Drive, World, job, node, running};
use gantry_scheduler::{ShapeSlots, capacity_report};

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
