//! Priority classes with preemption, quota reclaim, spot work, minimum
//! runtimes, whole-gang eviction and grace periods.

mod common;

use common::{Drive, NOON, World, job, nodes, queue, running};
use gantry_scheduler::{Policy, PreemptionCause, PriorityClass, Reason};

fn class(
    mut workload: gantry_scheduler::Workload,
    priority: PriorityClass,
) -> gantry_scheduler::Workload {
    workload.priority = priority;
    workload
}

const ALL: &[u32] = &[0, 1, 2, 3, 4, 5, 6, 7];

#[test]
fn production_preempts_the_research_work_that_loses_least() {
    let mut world = World::new(nodes(2));
    // Both research jobs hold a whole node; "fresh" checkpointed a minute
    // ago, "stale" two hours ago.
    let mut stale = running(
        class(job("stale", "research", 8, 1), PriorityClass::Batch),
        &[("n0", ALL)],
        NOON - 4 * 3_600,
    );
    stale.last_checkpoint_at = Some(NOON - 2 * 3_600);
    let mut fresh = running(
        class(job("fresh", "research", 8, 1), PriorityClass::Batch),
        &[("n1", ALL)],
        NOON - 4 * 3_600,
    );
    fresh.last_checkpoint_at = Some(NOON - 60);
    world.running = vec![stale, fresh];
    world.pending = vec![class(
        job("prod", "research", 8, 1),
        PriorityClass::Production,
    )];

    let decisions = world.decide(&Policy::default());
    assert_eq!(decisions.preemptions.len(), 1);
    let preemption = &decisions.preemptions[0];
    assert_eq!(preemption.workload, "fresh");
    assert_eq!(preemption.by, "prod");
    assert_eq!(preemption.cause, PreemptionCause::Priority);
    assert_eq!(preemption.gpu_seconds_lost, 8.0 * 60.0);
    assert_eq!(
        (preemption.grace_seconds, preemption.stop_at),
        (30, NOON + 30)
    );
    // It starts once the victim is gone, not before.
    let waiting = decisions
        .waiting("prod")
        .expect("prod waits for the grace period");
    assert_eq!(
        waiting.reasons,
        [Reason::WaitingForPreemption {
            victims: 1,
            until: Some(NOON + 30)
        }]
    );
    assert!(decisions.starts.is_empty());

    // Next cycle, inside the grace period: nothing more is evicted.
    world.running[1].stopping_at = Some(NOON + 30);
    world.now = NOON + 10;
    let decisions = world.decide(&Policy::default());
    assert!(decisions.preemptions.is_empty());
    assert!(decisions.waiting("prod").is_some());

    // Once it has stopped, prod starts on its GPUs.
    world.running.remove(1);
    world.now = NOON + 31;
    let decisions = world.decide(&Policy::default());
    assert_eq!(
        decisions
            .start("prod")
            .map(|s| s.placements[0].node.as_str()),
        Some("n1")
    );

    // With preemption off, prod only waits.
    world.running.push(running(
        class(job("fresh", "research", 8, 1), PriorityClass::Batch),
        &[("n1", ALL)],
        NOON,
    ));
    let off = world.decide(&Policy {
        preemption: false,
        reclaim: false,
        ..Policy::default()
    });
    assert!(off.preemptions.is_empty() && off.starts.is_empty());
}

#[test]
fn spot_work_is_the_first_victim_and_minimum_runtime_protects() {
    let mut world = World::new(nodes(3));
    let mut young = class(job("young", "q", 8, 1), PriorityClass::Batch);
    young.min_runtime = 3_600;
    let mut old_batch = running(
        class(job("old-batch", "q", 8, 1), PriorityClass::Batch),
        &[("n1", ALL)],
        NOON - 600,
    );
    old_batch.last_checkpoint_at = Some(NOON - 1);
    world.running = vec![
        running(young, &[("n0", ALL)], NOON - 600),
        old_batch,
        running(
            class(job("spot", "q", 8, 1), PriorityClass::Preemptible),
            &[("n2", ALL)],
            NOON - 600,
        ),
    ];
    world.pending = vec![
        class(job("prod-1", "q", 8, 1), PriorityClass::Production),
        class(job("prod-2", "q", 8, 1), PriorityClass::Production),
        class(job("prod-3", "q", 8, 1), PriorityClass::Production),
    ];
    let decisions = world.decide(&Policy::default());
    let victims: Vec<(&str, &str)> = decisions
        .preemptions
        .iter()
        .map(|p| (p.workload.as_str(), p.by.as_str()))
        .collect();
    // Spot first even though it lost more work; "young" is protected by
    // its minimum runtime, so the third production job waits.
    assert_eq!(victims, [("spot", "prod-1"), ("old-batch", "prod-2")]);
    assert!(decisions.waiting("prod-3").is_some_and(|w| {
        w.reasons
            .iter()
            .any(|r| matches!(r, Reason::Capacity { .. }))
    }));

    // Spot work never preempts anything.
    let mut world = World::new(nodes(1));
    world.running = vec![running(
        class(job("batch", "q", 8, 1), PriorityClass::Batch),
        &[("n0", ALL)],
        NOON - 600,
    )];
    world.pending = vec![class(job("spot", "q", 8, 1), PriorityClass::Preemptible)];
    assert!(world.decide(&Policy::default()).preemptions.is_empty());
}

#[test]
fn a_gang_is_evicted_whole() {
    let mut world = World::new(nodes(2));
    world.running = vec![running(
        class(job("gang", "q", 8, 2), PriorityClass::Batch),
        &[("n0", ALL), ("n1", ALL)],
        NOON - 600,
    )];
    world.pending = vec![class(job("prod", "q", 4, 1), PriorityClass::Production)];
    let mut decisions = world.clone();
    let decisions = decisions.cycle(&Policy::default(), 31);
    assert_eq!(decisions.preemptions.len(), 1);
    assert_eq!(decisions.preemptions[0].workload, "gang");
    // After the grace period both nodes are free: the gang left whole and
    // went back to the queue, and prod starts.
    let mut next = world;
    next.cycle(&Policy::default(), 31);
    assert!(next.running.is_empty());
    assert!(next.pending.iter().any(|w| w.id == "gang"));
    let decisions = next.cycle(&Policy::default(), 1);
    assert!(decisions.start("prod").is_some());
}

#[test]
fn a_queue_reclaims_its_guarantee_from_a_borrower() {
    let mut world = World::new(nodes(2));
    world.queues = vec![queue("team-a", 8, 1), queue("team-b", 8, 1)];
    // team-b borrowed team-a's idle node with work of a higher class.
    world.running = vec![
        running(
            class(job("b-own", "team-b", 8, 1), PriorityClass::Production),
            &[("n0", ALL)],
            NOON - 600,
        ),
        running(
            class(job("b-borrowed", "team-b", 8, 1), PriorityClass::Production),
            &[("n1", ALL)],
            NOON - 300,
        ),
    ];
    world.pending = vec![class(job("a-work", "team-a", 8, 1), PriorityClass::Batch)];
    let decisions = world.decide(&Policy::default());
    assert_eq!(decisions.preemptions.len(), 1);
    let preemption = &decisions.preemptions[0];
    assert_eq!(
        (preemption.workload.as_str(), preemption.cause),
        ("b-borrowed", PreemptionCause::Reclaim)
    );

    // Work beyond team-a's own guarantee cannot reclaim: it would borrow.
    world.pending = vec![class(job("a-big", "team-a", 8, 2), PriorityClass::Batch)];
    assert!(world.decide(&Policy::default()).preemptions.is_empty());

    // With reclaim off, the guarantee waits.
    world.pending = vec![class(job("a-work", "team-a", 8, 1), PriorityClass::Batch)];
    let off = world.decide(&Policy {
        reclaim: false,
        ..Policy::default()
    });
    assert!(off.preemptions.is_empty());
}

#[test]
fn priority_does_not_break_another_tenants_guarantee() {
    let mut world = World::new(nodes(1));
    world.queues = vec![queue("team-a", 0, 1), queue("team-b", 8, 1)];
    world.running = vec![running(
        class(job("b-guaranteed", "team-b", 8, 1), PriorityClass::Batch),
        &[("n0", ALL)],
        NOON - 600,
    )];
    world.pending = vec![class(
        job("a-prod", "team-a", 8, 1),
        PriorityClass::Production,
    )];
    let decisions = world.decide(&Policy::default());
    assert!(
        decisions.preemptions.is_empty(),
        "team-b runs within its guarantee"
    );
}
