//! Defragmentation plans: moves of checkpointable or preemptible work that
//! let a whole-node request blocked by fragmentation start, their cost in
//! GPU-seconds, and the disruption budget that bounds them.

mod common;

use common::{Drive, NOON, World, job, nodes, running};
use gantry_scheduler::{DefragPlan, DisruptionBudget, Policy, PriorityClass, Running};

/// Two 8-GPU nodes, each half taken by a 4-GPU job of queue "small", and an
/// 8-GPU request that waits: 8 GPUs free in all, 4 on each node.
fn halves(checkpointable: bool) -> World {
    let mut world = World::new(nodes(2));
    for (n, node) in ["n0", "n1"].into_iter().enumerate() {
        let mut w = job(&format!("half-{n}"), "small", 4, 1);
        w.checkpointable = checkpointable;
        w.duration_estimate = Some(8 * 3_600);
        world
            .running
            .push(running(w, &[(node, &[0, 1, 2, 3])], NOON - 3_600));
    }
    let mut whole = job("whole", "big", 8, 1);
    whole.duration_estimate = Some(3_600);
    world.pending = vec![whole];
    world
}

fn budget(gpu_seconds: f64) -> DisruptionBudget {
    DisruptionBudget {
        gpu_seconds_per_queue_hour: gpu_seconds,
        ..DisruptionBudget::default()
    }
}

fn plan(world: &World, budget: &DisruptionBudget) -> DefragPlan {
    gantry_scheduler::plan_defragmentation(&world.snapshot(), &Policy::default(), budget)
}

/// The world with the plan's moves done: each moved workload runs where the
/// plan puts it.
fn moved(world: &World, plan: &DefragPlan) -> World {
    let mut after = world.clone();
    for m in plan.steps.iter().flat_map(|s| &s.moves) {
        let run: &mut Running = after
            .running
            .iter_mut()
            .find(|r| r.workload.id == m.workload)
            .expect("a moved workload runs");
        assert_eq!(run.placements, std::slice::from_ref(&m.from));
        run.placements = vec![m.to.clone()];
    }
    after
}

#[test]
fn moving_a_checkpointable_job_frees_a_whole_node() {
    let world = halves(true);
    assert!(world.decide(&Policy::default()).start("whole").is_none());
    let plan = plan(&world, &budget(3_600.0));
    assert_eq!(plan.steps.len(), 1, "{plan:?}");
    let step = &plan.steps[0];
    assert_eq!(step.workload, "whole");
    assert_eq!(step.moves.len(), 1);
    let m = &step.moves[0];
    assert!(m.checkpoint);
    // Four GPUs through the 30 s grace period.
    assert_eq!(m.lost_gpu_seconds, 4.0 * 30.0);
    assert_eq!(plan.lost_gpu_seconds, 120.0);
    assert_eq!(step.nodes, std::slice::from_ref(&m.from.node));
    assert_ne!(m.to.node, m.from.node);
    assert_eq!(m.to.gpus, [4, 5, 6, 7]);

    let after = moved(&world, &plan);
    let start = after.decide(&Policy::default());
    let placed = start
        .start("whole")
        .expect("it starts once the move is done");
    assert_eq!(placed.placements[0].node, step.nodes[0]);
}

#[test]
fn a_policy_without_reasons_still_plans() {
    let world = halves(true);
    let lean = Policy {
        reasons: false,
        ..Policy::default()
    };
    let plan = gantry_scheduler::plan_defragmentation(&world.snapshot(), &lean, &budget(3_600.0));
    assert_eq!(plan.steps.len(), 1);
}

#[test]
fn work_that_can_neither_checkpoint_nor_be_preempted_stays() {
    let plan = plan(&halves(false), &budget(f64::MAX));
    assert!(plan.steps.is_empty());
    assert_eq!(plan.unhelped, ["whole"]);
}

#[test]
fn preemptible_work_loses_what_it_did_since_its_last_checkpoint() {
    // Spot work of one class, which may not preempt its own.
    let mut world = halves(false);
    for run in &mut world.running {
        run.workload.priority = PriorityClass::Preemptible;
    }
    world.pending[0].priority = PriorityClass::Preemptible;
    world.running[0].last_checkpoint_at = Some(NOON - 600);
    world.running[1].last_checkpoint_at = Some(NOON - 60);
    let plan = plan(&world, &budget(f64::MAX));
    let m = &plan.steps[0].moves[0];
    assert!(!m.checkpoint);
    // The one that checkpointed a minute ago moves: 4 GPUs × (60 s + 30 s).
    assert_eq!(m.workload, "half-1");
    assert_eq!(m.lost_gpu_seconds, 4.0 * 90.0);
}

#[test]
fn the_budget_bounds_what_a_queue_may_lose_per_hour() {
    let world = halves(true);
    assert!(plan(&world, &budget(119.0)).steps.is_empty());
    let mut spent = budget(200.0);
    spent.spent.insert("small".into(), 100.0);
    let plan = plan(&world, &spent);
    assert!(plan.steps.is_empty());
    assert_eq!(plan.unhelped, ["whole"]);
}

#[test]
fn nothing_moves_when_nothing_waits_on_fragmentation() {
    let mut world = halves(true);
    world.pending.clear();
    assert_eq!(plan(&world, &budget(f64::MAX)), DefragPlan::default());
    // Too few GPUs in all is not fragmentation: moving would not help.
    let mut world = halves(true);
    world.pending[0].node_count = 2;
    let plan = plan(&world, &budget(f64::MAX));
    assert!(plan.steps.is_empty());
}

#[test]
fn moved_work_lands_only_on_free_gpus_and_the_whole_request_then_runs() {
    // Four nodes, each with two 2-GPU checkpointable jobs and 4 GPUs free;
    // two 8-GPU requests wait.
    let mut world = World::new(nodes(4));
    for n in 0..4 {
        for (j, gpus) in [[0u32, 1], [2, 3]].iter().enumerate() {
            let mut w = job(&format!("pair-{n}-{j}"), "small", 2, 1);
            w.checkpointable = true;
            w.duration_estimate = Some(8 * 3_600);
            let node = format!("n{n}");
            world
                .running
                .push(running(w, &[(node.as_str(), gpus)], NOON - 3_600));
        }
    }
    for id in ["whole-a", "whole-b"] {
        let mut w = job(id, "big", 8, 1);
        w.duration_estimate = Some(3_600);
        world.pending.push(w);
    }
    let plan = plan(&world, &budget(f64::MAX));
    assert_eq!(plan.steps.len(), 2, "{plan:?}");
    let after = moved(&world, &plan);
    // No GPU is held twice.
    let mut held = std::collections::BTreeSet::new();
    for run in &after.running {
        for p in &run.placements {
            for g in &p.gpus {
                assert!(held.insert((p.node.clone(), *g)), "{} {g} twice", p.node);
            }
        }
    }
    let mut after = after;
    let decisions = after.cycle(&Policy::default(), 60);
    assert!(decisions.start("whole-a").is_some() && decisions.start("whole-b").is_some());
}
