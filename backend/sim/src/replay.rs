//! Time-driven replay: jobs arrive at their submit times, run for their run
//! times once the engine starts them, and leave; the engine is asked for
//! decisions at every arrival and departure.

use std::collections::{BTreeMap, BTreeSet};

use gantry_scheduler::{
    Cluster, DisruptionLedger, EstimateConfidence, Move, Placement, Policy, Queue, Running,
    Snapshot, UsageLedger, Workload, plan_defragmentation, schedule,
};
use serde::Serialize;

use crate::rng::Rng;
use crate::stats::{Summary, median, summary};

/// A job of a trace.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// What it asks the engine for; its id must be unique.
    pub workload: Workload,
    /// When it arrives.
    pub submit: i64,
    /// How long it runs once started.
    pub run: i64,
}

/// `size` consecutive jobs (by submit time) from an offset the seed picks,
/// their submits moved so that the first arrives at 0: one window of a
/// trace, to replay on an empty machine. The whole trace when it is no
/// longer than `size`.
pub fn window(jobs: &[Job], size: usize, seed: u64) -> Vec<Job> {
    let mut sorted: Vec<&Job> = jobs.iter().collect();
    sorted.sort_by_key(|j| j.submit);
    let size = size.min(sorted.len());
    let start = Rng::new(seed).below(sorted.len() - size + 1);
    let picked = &sorted[start..start + size];
    let first = picked.first().map_or(0, |j| j.submit);
    picked
        .iter()
        .map(|j| {
            let mut job = (*j).clone();
            job.submit -= first;
            job.workload.submitted_at -= first;
            job
        })
        .collect()
}

/// What happened to one job.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    /// The job.
    pub id: String,
    /// Its queue.
    pub queue: String,
    /// Arrival.
    pub submit: i64,
    /// Its last start; `None` when it never ran.
    pub start: Option<i64>,
    /// The (first) node of its last start.
    pub node: Option<String>,
    /// Its end.
    pub end: Option<i64>,
    /// Seconds from arrival to its last start.
    pub wait: Option<i64>,
    /// Times it was preempted.
    pub preempted: u32,
    /// Why it was rejected, if it was.
    pub rejected: Option<String>,
    /// The start the engine first estimated for it while it waited.
    pub first_estimate: Option<i64>,
    /// The last start it estimated before the job started.
    pub latest_estimate: Option<i64>,
    /// Whether GPUs were reserved for it when it was first estimated
    /// (rather than planned behind others).
    pub first_estimate_reserved: Option<bool>,
}

impl Outcome {
    /// max(1, (wait + run) / max(run, 10)).
    pub fn bounded_slowdown(&self, run: i64) -> Option<f64> {
        let wait = self.wait? as f64;
        let run = run as f64;
        Some(((wait + run) / run.max(10.0)).max(1.0))
    }
}

/// How well the engine's estimated starts foretold the real ones, over
/// the completed jobs that waited with an estimate.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct EstimateAccuracy {
    /// Jobs measured.
    pub jobs: usize,
    /// |start − first estimate|, seconds.
    pub first_error: Summary,
    /// 90th percentile of that error (nearest rank), seconds.
    pub first_error_p90: f64,
    /// |start − latest estimate|, seconds.
    pub latest_error: Summary,
    /// Share of jobs whose first estimate's error is within 10 % of their
    /// actual wait.
    pub within_10_percent: f64,
    /// Jobs that waited over a minute.
    pub waited_over_60s: usize,
    /// Among those, the median of first-estimate error over actual wait.
    pub median_relative_error_over_60s: Option<f64>,
}

impl EstimateAccuracy {
    /// The accuracy of `outcomes`' estimates (jobs without one, or that
    /// never started, are left out).
    pub fn of(outcomes: &[Outcome]) -> Self {
        let measured: Vec<(f64, f64, f64)> = outcomes
            .iter()
            .filter(|o| o.end.is_some())
            .filter_map(|o| {
                let (start, first, wait) = (o.start?, o.first_estimate?, o.wait?);
                let latest = o.latest_estimate.unwrap_or(first);
                Some((
                    (start - first).abs() as f64,
                    (start - latest).abs() as f64,
                    wait as f64,
                ))
            })
            .collect();
        if measured.is_empty() {
            return Self::default();
        }
        let first: Vec<f64> = measured.iter().map(|m| m.0).collect();
        let latest: Vec<f64> = measured.iter().map(|m| m.1).collect();
        let mut sorted = first.clone();
        sorted.sort_by(f64::total_cmp);
        let p90 = sorted[((0.9 * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1];
        let within = measured.iter().filter(|m| m.0 <= 0.1 * m.2).count();
        let relative: Vec<f64> = measured
            .iter()
            .filter(|m| m.2 > 60.0)
            .map(|m| m.0 / m.2)
            .collect();
        Self {
            jobs: measured.len(),
            first_error: summary(&first),
            first_error_p90: p90,
            latest_error: summary(&latest),
            within_10_percent: within as f64 / measured.len() as f64,
            waited_over_60s: relative.len(),
            median_relative_error_over_60s: (!relative.is_empty()).then(|| median(&relative)),
        }
    }
}

/// Estimate accuracy split by whether GPUs were reserved for the job when
/// it was first estimated.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct ByConfidence {
    /// First estimated with GPUs reserved.
    pub reserved: EstimateAccuracy,
    /// First estimated as planned behind others.
    pub planned: EstimateAccuracy,
}

impl ByConfidence {
    /// The accuracy of `outcomes`' estimates, split.
    pub fn of(outcomes: &[Outcome]) -> Self {
        let split = |reserved: bool| -> Vec<Outcome> {
            outcomes
                .iter()
                .filter(|o| o.first_estimate_reserved == Some(reserved))
                .cloned()
                .collect()
        };
        Self {
            reserved: EstimateAccuracy::of(&split(true)),
            planned: EstimateAccuracy::of(&split(false)),
        }
    }
}

/// Utilization at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Sample {
    /// Seconds since the first arrival.
    pub at: i64,
    /// Share of GPUs held.
    pub allocation: f64,
    /// Jobs waiting.
    pub waiting: usize,
}

/// What one replay measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplayRun {
    /// Jobs in the trace.
    pub jobs: usize,
    /// Jobs that ran to their end.
    pub completed: usize,
    /// Wait from arrival to start, seconds, over completed jobs.
    pub wait: Summary,
    /// Bounded slowdown (10 s bound) over completed jobs.
    pub bounded_slowdown: Summary,
    /// From the first arrival to the last end, seconds.
    pub makespan: i64,
    /// Time-weighted share of GPUs held.
    pub utilization: f64,
    /// Preemptions decided.
    pub preemptions: usize,
    /// Moves made by defragmentation.
    pub moves: usize,
    /// GPU-seconds of work those moves lost.
    pub lost_gpu_seconds: f64,
    /// GPU-seconds per queue.
    pub gpu_seconds_by_queue: BTreeMap<String, f64>,
    /// Utilization after every event, thinned to at most 1,000 samples.
    pub samples: Vec<Sample>,
    /// Engine cycles run.
    pub cycles: usize,
    /// How well estimated starts foretold the real ones.
    pub estimates: EstimateAccuracy,
    /// The same, by the confidence of each job's first estimate.
    pub estimates_by_confidence: ByConfidence,
    /// Every job's outcome, in trace order.
    pub outcomes: Vec<Outcome>,
}

fn gpus_of(placements: &[Placement]) -> usize {
    placements.iter().map(|p| p.gpus.len()).sum()
}

/// What the engine reads at `now` of a replay: no advance reservations.
fn snapshot<'a>(
    cluster: &'a Cluster,
    queues: &'a [Queue],
    running: &'a [Running],
    pending: &'a [Workload],
    usage: &'a UsageLedger,
    now: i64,
) -> Snapshot<'a> {
    Snapshot {
        cluster,
        queues,
        running,
        pending,
        reservations: &[],
        usage,
        now,
    }
}

/// Replays `jobs` on `cluster` under `policy`; `progress` gets the number of
/// jobs that have ended so far, now and then.
pub fn run(
    cluster: &Cluster,
    queues: &[Queue],
    jobs: &[Job],
    policy: &Policy,
    progress: impl FnMut(usize),
) -> ReplayRun {
    run_with(cluster, queues, jobs, policy, None, progress)
}

/// Replays like [`run`]; with `defragment`, a defragmentation plan within
/// that many GPU-seconds of lost work per queue and hour is made after
/// every cycle (while no moves are under way) and carried out: moved work
/// stops after the grace period
/// and restarts at once where the plan puts it (from its checkpoint when it
/// can checkpoint, from the start otherwise).
pub fn run_with(
    cluster: &Cluster,
    queues: &[Queue],
    jobs: &[Job],
    policy: &Policy,
    defragment: Option<f64>,
    mut progress: impl FnMut(usize),
) -> ReplayRun {
    let total_gpus: usize = cluster
        .nodes
        .iter()
        .flat_map(|n| n.gpus.iter())
        .filter(|g| g.healthy)
        .count();
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by_key(|i| (jobs[*i].submit, *i));
    let by_id: BTreeMap<&str, usize> = jobs
        .iter()
        .enumerate()
        .map(|(i, j)| (j.workload.id.as_str(), i))
        .collect();
    let mut outcomes: Vec<Outcome> = jobs
        .iter()
        .map(|j| Outcome {
            id: j.workload.id.clone(),
            queue: j.workload.queue.clone(),
            submit: j.submit,
            start: None,
            node: None,
            end: None,
            wait: None,
            preempted: 0,
            rejected: None,
            first_estimate: None,
            latest_estimate: None,
            first_estimate_reserved: None,
        })
        .collect();
    let first = order.first().map_or(0, |i| jobs[*i].submit);
    let mut next_arrival = 0;
    // Waiting and running work, each as the engine reads it beside the
    // index of its job, kept in step so that no cycle copies them.
    let mut pending: Vec<usize> = Vec::new();
    let mut waiting: Vec<Workload> = Vec::new();
    let mut live: Vec<usize> = Vec::new();
    let mut running: Vec<Running> = Vec::new();
    let mut usage = UsageLedger::default();
    let mut busy_seconds = 0.0;
    let mut by_queue: BTreeMap<String, f64> = BTreeMap::new();
    let mut samples: Vec<Sample> = Vec::new();
    let mut preemptions = 0;
    let mut lost_gpu_seconds = 0.0;
    let mut cycles = 0;
    let mut reported = 0;
    let mut ended = 0;
    // Seconds of each job's run done before its current start, kept across
    // checkpointed moves.
    let mut done: Vec<i64> = vec![0; jobs.len()];
    let mut relocations: BTreeMap<usize, Move> = BTreeMap::new();
    let mut disruption = DisruptionLedger::default();
    let mut moves = 0;
    let mut now = first;
    loop {
        // Work that ends or stops by now leaves; stopped work waits again.
        let mut kept_jobs = Vec::with_capacity(live.len());
        let mut kept = Vec::with_capacity(running.len());
        // GPUs held on past now: a move's landing GPUs may have been taken
        // since it was planned, and then it waits like preempted work.
        let occupied: BTreeSet<(String, u32)> = if relocations.is_empty() {
            BTreeSet::new()
        } else {
            live.iter()
                .zip(&running)
                .filter(|(job, e)| {
                    e.started_at + jobs[**job].run - done[**job] > now
                        && e.stopping_at.is_none_or(|stop| stop > now)
                })
                .flat_map(|(_, e)| {
                    e.placements
                        .iter()
                        .flat_map(|p| p.gpus.iter().map(move |g| (p.node.clone(), *g)))
                })
                .collect()
        };
        let landing_free = |m: &Move| {
            m.to.gpus
                .iter()
                .all(|g| !occupied.contains(&(m.to.node.clone(), *g)))
        };
        let mut relocated: Vec<(usize, Running)> = Vec::new();
        for (job, mut entry) in live.drain(..).zip(running.drain(..)) {
            let end = entry.started_at + jobs[job].run - done[job];
            let stopped = entry.stopping_at.filter(|stop| *stop <= now && *stop < end);
            let relocation = stopped.and_then(|_| relocations.remove(&job));
            if let (Some(stop), Some(relocation)) = (stopped, &relocation) {
                if relocation.checkpoint {
                    done[job] += stop - entry.started_at;
                } else {
                    done[job] = 0;
                }
                entry.workload.duration_estimate = Some(jobs[job].run - done[job]);
            }
            if let (Some(stop), Some(relocation)) =
                (stopped, relocation.filter(|m| landing_free(m)))
            {
                entry.placements = vec![relocation.to];
                entry.started_at = stop;
                entry.stopping_at = None;
                entry.last_checkpoint_at = None;
                relocated.push((job, entry));
            } else if stopped.is_some() {
                outcomes[job].preempted += 1;
                pending.push(job);
                waiting.push(entry.workload);
            } else if end <= now {
                outcomes[job].end = Some(end);
                ended += 1;
            } else {
                kept_jobs.push(job);
                kept.push(entry);
            }
        }
        for (job, entry) in relocated {
            kept_jobs.push(job);
            kept.push(entry);
        }
        live = kept_jobs;
        running = kept;
        while next_arrival < order.len() && jobs[order[next_arrival]].submit <= now {
            let job = order[next_arrival];
            pending.push(job);
            waiting.push(jobs[job].workload.clone());
            next_arrival += 1;
        }
        if !pending.is_empty() {
            let decisions = schedule(
                &snapshot(cluster, queues, &running, &waiting, &usage, now),
                policy,
            );
            cycles += 1;
            let mut started: BTreeMap<usize, Vec<Placement>> = BTreeMap::new();
            let mut leaving: BTreeSet<usize> = BTreeSet::new();
            for start in decisions.starts {
                if let Some(&job) = by_id.get(start.workload.as_str()) {
                    outcomes[job].start = Some(now);
                    outcomes[job].node = start.placements.first().map(|p| p.node.clone());
                    outcomes[job].wait = Some(now - jobs[job].submit);
                    started.insert(job, start.placements);
                }
            }
            for preemption in decisions.preemptions {
                preemptions += 1;
                if let Some(entry) = running
                    .iter_mut()
                    .find(|e| e.workload.id == preemption.workload)
                {
                    entry.stopping_at = Some(preemption.stop_at);
                }
            }
            for waiting in &decisions.waiting {
                let Some(at) = waiting.estimated_start else {
                    continue;
                };
                if let Some(&job) = by_id.get(waiting.workload.as_str()) {
                    let outcome = &mut outcomes[job];
                    if outcome.first_estimate.is_none() {
                        outcome.first_estimate = Some(at);
                        outcome.first_estimate_reserved =
                            Some(waiting.estimate_confidence == Some(EstimateConfidence::Reserved));
                    }
                    outcome.latest_estimate = Some(at);
                }
            }
            for rejection in decisions.rejections {
                if let Some(&job) = by_id.get(rejection.workload.as_str()) {
                    outcomes[job].rejected = Some(rejection.reason.to_string());
                    leaving.insert(job);
                    ended += 1;
                }
            }
            let mut still_jobs = Vec::with_capacity(pending.len());
            let mut still = Vec::with_capacity(waiting.len());
            for (job, workload) in pending.drain(..).zip(waiting.drain(..)) {
                if let Some(placements) = started.remove(&job) {
                    live.push(job);
                    running.push(Running {
                        workload,
                        placements,
                        started_at: now,
                        last_checkpoint_at: None,
                        stopping_at: None,
                    });
                } else if !leaving.contains(&job) {
                    still_jobs.push(job);
                    still.push(workload);
                }
            }
            pending = still_jobs;
            waiting = still;
            // One plan at a time: while moves are under way the work they
            // serve still looks blocked, and planning again would move more.
            if let Some(per_hour) =
                defragment.filter(|_| !waiting.is_empty() && relocations.is_empty())
            {
                let budget = disruption.budget(per_hour, now);
                let plan = plan_defragmentation(
                    &snapshot(cluster, queues, &running, &waiting, &usage, now),
                    policy,
                    &budget,
                );
                disruption.record(&plan, now);
                for m in plan.steps.into_iter().flat_map(|s| s.moves) {
                    let Some(&job) = by_id.get(m.workload.as_str()) else {
                        continue;
                    };
                    let Some(entry) = live.iter().position(|j| *j == job).map(|i| &mut running[i])
                    else {
                        continue;
                    };
                    entry.stopping_at = Some(now + policy.grace_seconds);
                    lost_gpu_seconds += m.lost_gpu_seconds;
                    moves += 1;
                    relocations.insert(job, m);
                }
            }
        }
        let held: usize = running.iter().map(|e| gpus_of(&e.placements)).sum();
        samples.push(Sample {
            at: now - first,
            allocation: held as f64 / total_gpus.max(1) as f64,
            waiting: pending.len(),
        });
        let next = live
            .iter()
            .zip(&running)
            .flat_map(|(job, e)| {
                [
                    Some(e.started_at + jobs[*job].run - done[*job]),
                    e.stopping_at,
                ]
                .into_iter()
                .flatten()
            })
            .chain((next_arrival < order.len()).then(|| jobs[order[next_arrival]].submit))
            .filter(|t| *t > now)
            .min();
        let Some(next) = next else {
            break;
        };
        let elapsed = (next - now) as f64;
        busy_seconds += held as f64 * elapsed;
        for entry in &running {
            let seconds = gpus_of(&entry.placements) as f64 * elapsed;
            let workload = &entry.workload;
            *by_queue.entry(workload.queue.clone()).or_default() += seconds;
            let model = workload.gpu_models.first().map_or("", String::as_str);
            usage.record(&workload.queue, model, seconds, next);
        }
        if cycles >= reported + 500 {
            reported = cycles;
            progress(ended);
        }
        now = next;
    }
    progress(ended);
    let completed: Vec<(&Outcome, i64)> = outcomes
        .iter()
        .zip(jobs)
        .filter(|(o, _)| o.end.is_some())
        .map(|(o, j)| (o, j.run))
        .collect();
    let waits: Vec<f64> = completed
        .iter()
        .filter_map(|(o, _)| o.wait.map(|w| w as f64))
        .collect();
    let slowdowns: Vec<f64> = completed
        .iter()
        .filter_map(|(o, run)| o.bounded_slowdown(*run))
        .collect();
    let last_end = outcomes.iter().filter_map(|o| o.end).max().unwrap_or(first);
    let makespan = last_end - first;
    let step = samples.len().div_ceil(1_000).max(1);
    ReplayRun {
        jobs: jobs.len(),
        completed: completed.len(),
        wait: summary(&waits),
        bounded_slowdown: summary(&slowdowns),
        makespan,
        utilization: busy_seconds / (total_gpus.max(1) as f64 * makespan.max(1) as f64),
        preemptions,
        moves,
        lost_gpu_seconds,
        gpu_seconds_by_queue: by_queue,
        samples: samples.into_iter().step_by(step).collect(),
        cycles,
        estimates: EstimateAccuracy::of(&outcomes),
        estimates_by_confidence: ByConfidence::of(&outcomes),
        outcomes,
    }
}
