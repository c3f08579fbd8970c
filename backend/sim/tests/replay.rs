//! Time-driven replay on small traces whose waits and slowdowns are worked
//! out by hand.

use gantry_scheduler::Cluster;
use gantry_sim::experiment::replay_policy;
use gantry_sim::replay::{self, Job};
use gantry_sim::swf::{self, SwfJob};

fn job(id: u64, submit: i64, run: i64, processors: u32) -> SwfJob {
    SwfJob {
        id,
        submit,
        run,
        processors,
        requested_time: None,
    }
}

fn replay(jobs: &[Job], policy: &str) -> replay::ReplayRun {
    let cluster = Cluster {
        nodes: swf::machine(2),
        regions: Vec::new(),
    };
    replay::run(
        &cluster,
        &[],
        jobs,
        &replay_policy(policy).expect("policy"),
        |_| {},
    )
}

#[test]
fn fcfs_waits_behind_a_blocked_job_and_easy_backfills_around_it() {
    // On 2 processors: D holds one until 100; E needs both; F needs one for
    // 50 s.
    let jobs = swf::replay_jobs(&[job(1, 0, 100, 1), job(2, 1, 10, 2), job(3, 2, 50, 1)]);

    let fcfs = replay(&jobs, "fcfs");
    let waits: Vec<Option<i64>> = fcfs.outcomes.iter().map(|o| o.wait).collect();
    // E starts at 100 (waits 99); F may not pass E, starts at 110 (108).
    assert_eq!(waits, [Some(0), Some(99), Some(108)]);
    let slowdowns: Vec<f64> = fcfs
        .outcomes
        .iter()
        .zip(&jobs)
        .filter_map(|(o, j)| o.bounded_slowdown(j.run))
        .collect();
    assert_eq!(slowdowns, [1.0, 10.9, 158.0 / 50.0]);
    assert_eq!(fcfs.makespan, 160);
    assert!((fcfs.bounded_slowdown.mean - (1.0 + 10.9 + 3.16) / 3.0).abs() < 1e-9);

    // EASY: F ends at 52, before E's reservation at 100, so it starts now.
    let easy = replay(&jobs, "easy");
    let waits: Vec<Option<i64>> = easy.outcomes.iter().map(|o| o.wait).collect();
    assert_eq!(waits, [Some(0), Some(99), Some(0)]);
    assert_eq!(easy.makespan, 110);
    assert_eq!(easy.wait.mean, 33.0);
    assert_eq!(easy.completed, 3);
}

#[test]
fn shorter_work_passes_longer_work_that_waits_with_it() {
    // On 2 processors: D holds both until 100; then a 1,000 s job and a
    // 10 s job, arrived in that order, both need both.
    let jobs = swf::replay_jobs(&[job(1, 0, 100, 2), job(2, 1, 1_000, 2), job(3, 2, 10, 2)]);
    let waits = |policy| -> Vec<Option<i64>> {
        replay(&jobs, policy)
            .outcomes
            .iter()
            .map(|o| o.wait)
            .collect()
    };
    assert_eq!(waits("easy"), [Some(0), Some(99), Some(1_098)]);
    assert_eq!(waits("sjf"), [Some(0), Some(109), Some(98)]);
    // The default policy delays the long job by 40 × its length, the short
    // one by 400 s: the short one goes first.
    assert_eq!(waits("gantry"), [Some(0), Some(109), Some(98)]);
}

#[test]
fn a_job_larger_than_the_machine_is_rejected_not_waited_for() {
    let jobs = swf::replay_jobs(&[job(1, 0, 10, 3), job(2, 5, 10, 1)]);
    let run = replay(&jobs, "gantry");
    assert!(
        run.outcomes[0]
            .rejected
            .as_deref()
            .is_some_and(|r| r.starts_with("can never fit"))
    );
    assert_eq!(run.outcomes[1].wait, Some(0));
    assert_eq!(run.completed, 1);
}

#[test]
fn the_swf_slice_replays_the_same_way_twice() {
    let jobs =
        swf::replay_jobs(&swf::jobs(include_str!("fixtures/lublin_256_head.swf")).expect("swf"));
    let cluster = Cluster {
        nodes: swf::machine(256),
        regions: Vec::new(),
    };
    let policy = replay_policy("gantry").expect("policy");
    let first = replay::run(&cluster, &[], &jobs, &policy, |_| {});
    assert_eq!(first.completed, 40);
    assert_eq!(
        serde_json::to_string(&first).expect("json"),
        serde_json::to_string(&replay::run(&cluster, &[], &jobs, &policy, |_| {})).expect("json")
    );
    assert!(first.utilization > 0.0 && first.utilization <= 1.0);
}

#[test]
fn estimated_starts_are_kept_beside_the_real_ones_and_scored() {
    // On 2 processors: A holds one until 100 and B one until 60 (requested
    // 200 s, so B's estimated end is 201); C needs both. C's start is
    // estimated on B's estimate, at 201, and first at 2; it starts at 100,
    // when the later of the two really ends.
    let mut b = job(2, 1, 59, 1);
    b.requested_time = Some(200);
    let jobs = swf::replay_jobs(&[job(1, 0, 100, 1), b, job(3, 2, 10, 2)]);
    let run = replay(&jobs, "easy");
    let c = &run.outcomes[2];
    assert_eq!((c.start, c.wait), (Some(100), Some(98)));
    assert_eq!(c.first_estimate, Some(201));
    // It heads the queue: GPUs are reserved for it from its first estimate.
    assert_eq!(c.first_estimate_reserved, Some(true));
    // At 60 B ended: from then on the estimate rests on A's end, exact.
    assert_eq!(c.latest_estimate, Some(100));
    // Jobs that never waited have no estimate.
    assert_eq!(run.outcomes[0].first_estimate, None);
    assert_eq!(run.outcomes[1].first_estimate, None);

    let e = &run.estimates;
    assert_eq!(e.jobs, 1);
    assert_eq!(e.first_error.p50, 101.0);
    assert_eq!(e.first_error_p90, 101.0);
    assert_eq!(e.latest_error.p50, 0.0);
    assert_eq!(e.within_10_percent, 0.0);
    assert_eq!(e.waited_over_60s, 1);
    assert_eq!(e.median_relative_error_over_60s, Some(101.0 / 98.0));
    assert_eq!(&run.estimates_by_confidence.reserved, e);
    assert_eq!(run.estimates_by_confidence.planned.jobs, 0);
}

#[test]
fn a_window_is_consecutive_jobs_from_a_seeded_offset_starting_at_zero() {
    let jobs = swf::replay_jobs(
        &(0..100)
            .map(|i| job(i, 1_000 + 10 * i as i64, 5, 1))
            .collect::<Vec<_>>(),
    );
    let window = replay::window(&jobs, 10, 42);
    assert_eq!(window.len(), 10);
    assert_eq!(window[0].submit, 0);
    let first = jobs
        .iter()
        .position(|j| j.workload.id == window[0].workload.id)
        .expect("from the trace");
    for (i, job) in window.iter().enumerate() {
        assert_eq!(job.workload.id, jobs[first + i].workload.id);
        assert_eq!(job.submit, 10 * i as i64);
        // The engine ranks by the workload's own arrival: it moves too.
        assert_eq!(job.workload.submitted_at, job.submit);
    }
    assert_eq!(replay::window(&jobs, 10, 42), window);
    let offsets: std::collections::BTreeSet<String> = (42..52)
        .map(|seed| replay::window(&jobs, 10, seed)[0].workload.id.clone())
        .collect();
    assert!(
        offsets.len() > 5,
        "seeds pick different windows: {offsets:?}"
    );
    assert_eq!(replay::window(&jobs, 500, 7).len(), 100);
}
