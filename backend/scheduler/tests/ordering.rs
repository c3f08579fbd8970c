//! The order of work within a queue: shorter estimated work first within a
//! class, with a delay bounded by the policy's horizon, so that nothing
//! arriving more than the horizon after a workload ever passes it; classes,
//! deadlines and fair share still decide before durations do.

mod common;

use common::{Drive, NOON, World, job};
use gantry_scheduler::{Backfill, Policy, PriorityClass, Workload};
use proptest::prelude::*;

const HOUR: i64 = 3_600;

/// One 8-GPU node, every workload wanting all of it: exactly one starts
/// per free node, the first in rank.
fn one_node() -> World {
    World::new(common::nodes(1))
}

fn whole_node(id: &str, queue: &str, estimate: Option<i64>, submitted_at: i64) -> Workload {
    let mut w = job(id, queue, 8, 1);
    w.duration_estimate = estimate;
    w.submitted_at = submitted_at;
    w
}

fn strict() -> Policy {
    Policy {
        backfill: Backfill::None,
        ..Policy::default()
    }
}

/// When the policy ranks a workload as arriving within its class.
fn virtual_arrival(policy: &Policy, w: &Workload) -> i64 {
    let horizon = policy.shorter_first_horizon;
    w.submitted_at
        + w.duration_estimate.map_or(horizon, |d| {
            ((policy.shorter_first_factor * d as f64) as i64).min(horizon)
        })
}

#[test]
fn shorter_work_goes_first_within_a_class() {
    let mut world = one_node();
    world.pending = vec![
        whole_node("long", "q", Some(8 * HOUR), NOON - HOUR),
        whole_node("unstated", "q", None, NOON - 2 * HOUR),
        whole_node("short", "q", Some(600), NOON),
    ];
    let decisions = world.decide(&strict());
    assert!(decisions.start("short").is_some(), "{decisions:?}");
    // Arrival order alone, with the factor at zero.
    let decisions = world.decide(&Policy {
        shorter_first_factor: 0.0,
        shorter_first_horizon: 0,
        ..strict()
    });
    assert!(decisions.start("unstated").is_some(), "{decisions:?}");
}

#[test]
fn a_higher_class_goes_before_shorter_work() {
    let mut world = one_node();
    let mut production = whole_node("production", "q", None, NOON);
    production.priority = PriorityClass::Production;
    world.pending = vec![production, whole_node("short", "q", Some(60), NOON - HOUR)];
    assert!(world.decide(&strict()).start("production").is_some());
}

#[test]
fn urgent_deadline_work_goes_before_shorter_work() {
    let mut world = one_node();
    let mut urgent = whole_node("urgent", "q", Some(4 * HOUR), NOON);
    urgent.deadline = Some(NOON + 5 * HOUR);
    world.pending = vec![urgent, whole_node("short", "q", Some(60), NOON - HOUR)];
    assert!(world.decide(&strict()).start("urgent").is_some());
}

#[test]
fn fair_share_decides_between_queues_before_durations() {
    // Queue "heavy" has used the node for a day; its short work does not
    // pass the long work of a queue that has used nothing.
    let mut world = one_node();
    world
        .usage
        .record("heavy", common::H100, 8.0 * 86_400.0, NOON);
    world.pending = vec![
        whole_node("heavy-short", "heavy", Some(60), NOON - HOUR),
        whole_node("light-long", "light", Some(20 * HOUR), NOON),
    ];
    assert!(world.decide(&strict()).start("light-long").is_some());
}

#[test]
fn long_work_is_passed_only_by_work_arriving_within_the_horizon() {
    // A fresh hour of short work arrives every half hour, more than the
    // node serves: pure shortest-first would starve the long job forever.
    let policy = strict();
    let horizon = policy.shorter_first_horizon;
    let mut world = one_node();
    world.pending = vec![whole_node("long", "q", None, NOON)];
    let mut arrived = std::collections::BTreeMap::new();
    let mut started_after_horizon = Vec::new();
    for _ in 0..(4 * horizon / HOUR) {
        for _ in 0..2 {
            let id = format!("short-{:04}", arrived.len());
            world
                .pending
                .push(whole_node(&id, "q", Some(HOUR), world.now));
            arrived.insert(id, world.now);
        }
        let decisions = world.cycle(&policy, HOUR);
        if decisions.start("long").is_some() {
            assert!(
                started_after_horizon.is_empty(),
                "passed by {started_after_horizon:?}"
            );
            return;
        }
        started_after_horizon.extend(
            decisions
                .starts
                .iter()
                .filter(|s| {
                    arrived
                        .get(&s.workload)
                        .is_some_and(|at| *at > NOON + horizon)
                })
                .map(|s| s.workload.clone()),
        );
    }
    panic!("the long job never started");
}

fn arb_waiting() -> impl Strategy<Value = Vec<(Option<i64>, i64, usize)>> {
    prop::collection::vec(
        (
            prop::option::of(1..(30 * 86_400i64)),
            0..(20 * 86_400i64),
            0..2usize,
        ),
        1..24,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_first_started_has_the_earliest_virtual_arrival_and_passes_nothing_older_than_the_horizon(
        waiting in arb_waiting(),
        reversed in any::<bool>(),
    ) {
        let policy = Policy { fair_share: false, ..strict() };
        let mut world = one_node();
        world.pending = waiting
            .iter()
            .enumerate()
            .map(|(i, (estimate, ago, queue))| {
                whole_node(&format!("w{i:02}"), &format!("q{queue}"), *estimate, NOON - ago)
            })
            .collect();
        if reversed {
            world.pending.reverse();
        }
        let decisions = world.decide(&policy);
        prop_assert_eq!(decisions.starts.len(), 1);
        let started = world
            .pending
            .iter()
            .find(|w| w.id == decisions.starts[0].workload)
            .cloned()
            .ok_or_else(|| TestCaseError::fail("started work is not pending"))?;
        let queue_mates: Vec<&Workload> =
            world.pending.iter().filter(|w| w.queue == started.queue).collect();
        for other in queue_mates {
            prop_assert!(
                started.submitted_at <= other.submitted_at + policy.shorter_first_horizon,
                "{} passed {}, which arrived more than the horizon before it",
                started.id,
                other.id
            );
            prop_assert!(
                virtual_arrival(&policy, &started) <= virtual_arrival(&policy, other),
                "{} went before {} of an earlier virtual arrival",
                started.id,
                other.id
            );
        }
    }

    #[test]
    fn the_order_is_the_same_whatever_order_work_is_listed_in(
        waiting in arb_waiting(),
        rotation in 0..24usize,
    ) {
        let mut world = World::new(common::nodes(3));
        world.pending = waiting
            .iter()
            .enumerate()
            .map(|(i, (estimate, ago, queue))| {
                let mut w = whole_node(&format!("w{i:02}"), &format!("q{queue}"), *estimate, NOON - ago);
                w.gpus = gantry_scheduler::GpuRequest::Whole(1 + (i as u32 % 8));
                w
            })
            .collect();
        let first = world.decide(&Policy::default());
        let mut shuffled = world.clone();
        let turn = rotation % shuffled.pending.len();
        shuffled.pending.rotate_left(turn);
        prop_assert_eq!(shuffled.decide(&Policy::default()), first);
    }
}
