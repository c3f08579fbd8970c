//! Defragmentation in the replay: on the generated mix of checkpointable
//! team work and whole-node runs, moves cut the waits of whole-node work,
//! cost what the budget allows and lose no job.

use gantry_scheduler::GpuRequest;
use gantry_sim::defrag::{compare, scenario};

#[test]
fn the_scenario_is_the_same_for_a_seed_and_mixes_whole_node_runs_in() {
    let (cluster, jobs) = scenario(42);
    assert_eq!(cluster.nodes.len(), 16);
    assert_eq!(scenario(42).1, jobs);
    assert_ne!(scenario(43).1, jobs);
    let whole = jobs
        .iter()
        .filter(|j| j.workload.gpus == GpuRequest::Whole(8))
        .count();
    assert!(
        whole > 10 && whole < jobs.len() / 5,
        "{whole} of {}",
        jobs.len()
    );
    // Team work can checkpoint; whole-node runs are not moved.
    assert!(
        jobs.iter()
            .all(|j| j.workload.checkpointable == (j.workload.gpus != GpuRequest::Whole(8)))
    );
}

#[test]
fn moves_cut_whole_node_waits_within_the_budget_and_lose_no_job() {
    let report = compare(42, 3_600.0);
    let (without, with) = (&report.without, &report.with);
    assert_eq!(without.moves, 0);
    assert_eq!(without.lost_gpu_seconds, 0.0);
    assert!(with.moves > 0);
    assert!(
        with.whole_node_wait.mean < without.whole_node_wait.mean / 2.0,
        "{} against {}",
        with.whole_node_wait.mean,
        without.whole_node_wait.mean
    );
    // Every job ran in both.
    let count =
        |side: &gantry_sim::defrag::Side| side.whole_node_wait.count + side.other_wait.count;
    assert_eq!(count(with), report.jobs);
    assert_eq!(count(without), report.jobs);
    // Each move of checkpointable work costs its GPUs through the
    // five-minute grace period: 300 to 1,200 GPU-seconds.
    assert!(with.lost_gpu_seconds >= 300.0 * with.moves as f64);
    assert!(with.lost_gpu_seconds <= 1_200.0 * with.moves as f64);
    // No budget, no moves.
    let still = compare(42, 0.0);
    assert_eq!(still.with.moves, 0);
    assert_eq!(
        still.with.whole_node_wait.mean,
        without.whole_node_wait.mean
    );
}
