//! Fair share between queues, aging against starvation, and deadline
//! escalation.

mod common;

use std::collections::BTreeMap;

use common::{Drive, NOON, World, job, node, queue};
use gantry_scheduler::{Policy, PriorityClass, Workload};

fn stream(queue: &str, count: usize, from: usize, at: i64) -> Vec<Workload> {
    (from..from + count)
        .map(|i| {
            let mut w = job(&format!("{queue}-{i:05}"), queue, 1, 1);
            w.duration_estimate = Some(600);
            w.submitted_at = at;
            w
        })
        .collect()
}

/// GPU-seconds per queue over `cycles` cycles of `step` seconds, with every
/// queue's backlog topped up before each cycle.
fn run_shares(
    world: &mut World,
    policy: &Policy,
    queues: &[&str],
    cycles: usize,
    step: i64,
) -> BTreeMap<String, f64> {
    let mut used: BTreeMap<String, f64> = BTreeMap::new();
    let mut next = 0;
    for _ in 0..cycles {
        for q in queues {
            let waiting = world.pending.iter().filter(|w| w.queue == *q).count();
            if waiting < 20 {
                world
                    .pending
                    .extend(stream(q, 20 - waiting, next, world.now));
                next += 20;
            }
        }
        world.cycle(policy, step);
        for run in &world.running {
            *used.entry(run.workload.queue.clone()).or_default() += step as f64;
        }
    }
    used
}

#[test]
fn weights_two_to_one_converge_to_a_two_to_one_share() {
    let mut world = World::new(vec![
        node("n0", "r1", common::H100, 8),
        node("n1", "r1", common::H100, 4),
    ]);
    world.queues = vec![queue("heavy", 0, 2), queue("light", 0, 1)];
    let used = run_shares(&mut world, &Policy::default(), &["heavy", "light"], 400, 60);
    let ratio = used["heavy"] / used["light"];
    assert!(
        (1.8..=2.2).contains(&ratio),
        "share ratio {ratio:.3} ({used:?})"
    );

    // Without fair share, weights mean nothing: work goes by submission.
    let mut world = World::new(vec![
        node("n0", "r1", common::H100, 8),
        node("n1", "r1", common::H100, 4),
    ]);
    world.queues = vec![queue("heavy", 0, 2), queue("light", 0, 1)];
    let used = run_shares(
        &mut world,
        &Policy {
            fair_share: false,
            ..Policy::default()
        },
        &["heavy", "light"],
        400,
        60,
    );
    let ratio = used["heavy"] / used["light"];
    assert!(ratio < 1.5, "share ratio {ratio:.3} without fair share");
}

#[test]
fn among_equals_the_queue_that_used_less_recently_goes_first() {
    let mut world = World::new(vec![node("n0", "r1", common::H100, 8)]);
    world
        .usage
        .record("busy", common::H100, 8.0 * 3_600.0, NOON - 3_600);
    world.pending = vec![job("busy-job", "busy", 8, 1), job("idle-job", "idle", 8, 1)];
    world.pending[1].submitted_at += 60;
    let decisions = world.decide(&Policy::default());
    assert!(decisions.start("idle-job").is_some());
    let decisions = world.decide(&Policy {
        fair_share: false,
        ..Policy::default()
    });
    assert!(decisions.start("busy-job").is_some());
}

#[test]
fn aging_ends_starvation() {
    // A batch job behind an endless stream of standard jobs of the same
    // size starves without aging and runs with it.
    let starts = |policy: &Policy| {
        let mut world = World::new(vec![node("n0", "r1", common::H100, 8)]);
        let mut batch = job("batch", "q", 8, 1);
        batch.priority = PriorityClass::Batch;
        batch.duration_estimate = Some(3_600);
        world.pending.push(batch);
        for hour in 0..48 {
            let mut standard = job(&format!("standard-{hour:02}"), "q", 8, 1);
            standard.duration_estimate = Some(3_600);
            standard.submitted_at = world.now;
            world.pending.push(standard);
            if world.cycle(policy, 3_600).start("batch").is_some() {
                return Some(hour);
            }
        }
        None
    };
    assert_eq!(
        starts(&Policy {
            aging_per_hour: 0.0,
            ..Policy::default()
        }),
        None
    );
    let hour = starts(&Policy::default());
    assert!(
        hour.is_some_and(|h| h < 24),
        "with aging it starts within a day: {hour:?}"
    );
}

#[test]
fn deadline_work_escalates_as_its_deadline_nears() {
    let mut world = World::new(vec![node("n0", "r1", common::H100, 8)]);
    let mut early = job("early", "q", 8, 1);
    early.submitted_at -= 600;
    early.duration_estimate = Some(3_600);
    let mut urgent = job("urgent", "q", 8, 1);
    urgent.duration_estimate = Some(3_600);
    urgent.deadline = Some(NOON + 2 * 3_600);
    world.pending = vec![early, urgent.clone()];
    assert!(world.decide(&Policy::default()).start("urgent").is_some());

    // Far from its deadline it takes its turn.
    world.pending[1].deadline = Some(NOON + 48 * 3_600);
    assert!(world.decide(&Policy::default()).start("early").is_some());
}
