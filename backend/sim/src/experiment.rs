//! Experiments: several pod lists, policies and seeds in one run, spread
//! over threads, with a report that does not depend on which thread
//! finished first.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use gantry_scheduler::{Backfill, Cluster, PlacementStrategy, Policy, Queue};
use serde::Serialize;

use crate::alibaba::Pod;
use crate::fill::{self, FillRun};
use crate::replay::{self, ByConfidence, EstimateAccuracy, Job, ReplayRun};
use crate::stats::median;

/// A placement policy of the fill protocol, by the name reports use.
pub fn placement_policy(name: &str, seed: u64) -> Option<Policy> {
    let placement = match name {
        "gantry" => PlacementStrategy::FragmentationAware,
        "fgd" => PlacementStrategy::Fgd,
        "best-fit" => PlacementStrategy::BestFit,
        "first-fit" => PlacementStrategy::FirstFit,
        "spread" => PlacementStrategy::Spread,
        "random" => PlacementStrategy::Random { seed },
        _ => return None,
    };
    // Gantry's placement samples nodes as the server runs it; the peers
    // score every node, as their authors describe them.
    let scored_per_bucket = if placement == PlacementStrategy::FragmentationAware {
        Policy::default().scored_per_bucket
    } else {
        usize::MAX
    };
    Some(Policy {
        placement,
        scored_per_bucket,
        ..Policy::default()
    })
}

/// The placement policies of the fill protocol.
pub const PLACEMENT_POLICIES: [&str; 6] =
    ["random", "first-fit", "best-fit", "spread", "fgd", "gantry"];

/// A queueing policy of the replay, by the name reports use: `fcfs`
/// (first come, first served, nothing passes blocked work), `easy` (the same
/// with EASY backfill), `sjf` (EASY with the queue ordered by estimated
/// duration alone, shortest first), `gantry` (the default policy). Only the head's
/// reservation is planned: the further estimated starts the server shows
/// change no decision, and a replay has no one to show them to.
pub fn replay_policy(name: &str) -> Option<Policy> {
    let fcfs = Policy {
        placement: PlacementStrategy::FirstFit,
        backfill: Backfill::None,
        preemption: false,
        reclaim: false,
        quotas: false,
        fair_share: false,
        aging_per_hour: 0.0,
        shorter_first_factor: 0.0,
        shorter_first_horizon: 0,
        deadline_boost: 0.0,
        follow_the_sun: false,
        planning_depth: 1,
        reasons: false,
        ..Policy::default()
    };
    match name {
        "fcfs" => Some(fcfs),
        "easy" => Some(Policy {
            backfill: Backfill::Easy,
            ..fcfs
        }),
        "sjf" => Some(Policy {
            backfill: Backfill::Easy,
            // A delay of a billion times the duration puts every second of
            // estimate ahead of any difference in arrival.
            shorter_first_factor: 1e9,
            shorter_first_horizon: i64::MAX,
            ..fcfs
        }),
        "gantry" => Some(Policy {
            planning_depth: 1,
            reasons: false,
            ..Policy::default()
        }),
        _ => None,
    }
}

/// The queueing policies of the replay.
pub const REPLAY_POLICIES: [&str; 4] = ["fcfs", "easy", "sjf", "gantry"];

/// One fill run in a report.
#[derive(Debug, Clone, Serialize)]
pub struct FillEntry {
    /// The pod list's name.
    pub pods: String,
    /// The policy's name.
    pub policy: String,
    /// What it measured.
    #[serde(flatten)]
    pub run: FillRun,
}

/// The median over seeds of one pod list and policy.
#[derive(Debug, Clone, Serialize)]
pub struct FillMedian {
    /// The pod list's name.
    pub pods: String,
    /// The policy's name.
    pub policy: String,
    /// Seeds run.
    pub seeds: usize,
    /// Median unallocated share of GPU capacity at 100 % arrived.
    pub unallocated_at_100: f64,
    /// Median share of pods that fit nowhere.
    pub failed_share: f64,
}

/// The report of a fill experiment.
#[derive(Debug, Clone, Serialize)]
pub struct FillReport {
    /// The protocol.
    pub mode: &'static str,
    /// Arrivals stop before the GPU request passes this multiple of the
    /// cluster's GPUs.
    pub inflate: f64,
    /// Medians per pod list and policy.
    pub medians: Vec<FillMedian>,
    /// Every run, ordered by pod list, policy and seed.
    pub runs: Vec<FillEntry>,
}

/// Runs every pod list × policy × seed on `threads` threads; `progress`
/// hears of each finished run.
pub fn fill_experiment(
    cluster: &Cluster,
    lists: &[(String, Vec<Pod>)],
    policies: &[String],
    seeds: &[u64],
    inflate: f64,
    threads: usize,
    progress: &(dyn Fn(&str) + Sync),
) -> FillReport {
    let mut work: Vec<(usize, usize, u64)> = Vec::new();
    for list in 0..lists.len() {
        for policy in 0..policies.len() {
            for seed in seeds {
                work.push((list, policy, *seed));
            }
        }
    }
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    let results: Mutex<Vec<(usize, FillEntry)>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..threads.max(1) {
            scope.spawn(|| {
                loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&(list, policy, seed)) = work.get(index) else {
                        break;
                    };
                    let began = Instant::now();
                    let (name, pods) = &lists[list];
                    let Some(config) = placement_policy(&policies[policy], seed) else {
                        continue;
                    };
                    let run = fill::run(cluster, pods, &config, seed, inflate, |_| {});
                    let finished = done.fetch_add(1, Ordering::Relaxed) + 1;
                    progress(&format!(
                        "[{finished}/{}] {name} {} seed {seed}: {:.2}% unallocated at 100% ({:.1} s)",
                        work.len(),
                        policies[policy],
                        run.unallocated_at_100 * 100.0,
                        began.elapsed().as_secs_f64()
                    ));
                    let entry = FillEntry {
                        pods: name.clone(),
                        policy: policies[policy].clone(),
                        run,
                    };
                    if let Ok(mut results) = results.lock() {
                        results.push((index, entry));
                    }
                }
            });
        }
    });
    let mut finished = results.into_inner().unwrap_or_default();
    finished.sort_by_key(|(index, _)| *index);
    let mut groups: BTreeMap<(usize, usize), Vec<&FillEntry>> = BTreeMap::new();
    for (index, entry) in &finished {
        let (list, policy, _) = work[*index];
        groups.entry((list, policy)).or_default().push(entry);
    }
    let medians = groups
        .into_values()
        .filter_map(|entries| {
            let first = entries.first()?;
            let unallocated: Vec<f64> = entries.iter().map(|e| e.run.unallocated_at_100).collect();
            let failed: Vec<f64> = entries
                .iter()
                .map(|e| e.run.failed as f64 / e.run.arrived.max(1) as f64)
                .collect();
            Some(FillMedian {
                pods: first.pods.clone(),
                policy: first.policy.clone(),
                seeds: entries.len(),
                unallocated_at_100: median(&unallocated),
                failed_share: median(&failed),
            })
        })
        .collect();
    FillReport {
        mode: "fill",
        inflate,
        medians,
        runs: finished.into_iter().map(|(_, entry)| entry).collect(),
    }
}

/// One replay in a report.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayEntry {
    /// The policy's name.
    pub policy: String,
    /// What it measured.
    #[serde(flatten)]
    pub run: ReplayRun,
}

/// The report of a replay experiment.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayReport {
    /// The mode.
    pub mode: &'static str,
    /// One replay per policy, in the order asked.
    pub runs: Vec<ReplayEntry>,
}

/// Replays `jobs` once per policy, on `threads` threads, estimating starts
/// for the first `planning_depth` waiting jobs of every cycle (the server
/// estimates 100; beyond the head of the queue they change no decision of
/// these policies, only the replay's cost).
pub fn replay_experiment(
    cluster: &Cluster,
    queues: &[Queue],
    jobs: &[Job],
    policies: &[String],
    planning_depth: usize,
    threads: usize,
    progress: &(dyn Fn(&str) + Sync),
) -> ReplayReport {
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<(usize, ReplayEntry)>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..threads.max(1) {
            scope.spawn(|| {
                loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    let Some(name) = policies.get(index) else {
                        break;
                    };
                    let Some(policy) = replay_policy(name) else {
                        continue;
                    };
                    let policy = Policy {
                        planning_depth: planning_depth.max(1),
                        ..policy
                    };
                    let began = Instant::now();
                    let run = replay::run(cluster, queues, jobs, &policy, |ended| {
                        progress(&format!("{name}: {ended}/{} jobs done", jobs.len()));
                    });
                    progress(&format!(
                        "{name}: mean wait {:.0} s, mean bounded slowdown {:.2} ({:.1} s)",
                        run.wait.mean,
                        run.bounded_slowdown.mean,
                        began.elapsed().as_secs_f64()
                    ));
                    if let Ok(mut results) = results.lock() {
                        results.push((
                            index,
                            ReplayEntry {
                                policy: name.clone(),
                                run,
                            },
                        ));
                    }
                }
            });
        }
    });
    let mut runs = results.into_inner().unwrap_or_default();
    runs.sort_by_key(|(index, _)| *index);
    ReplayReport {
        mode: "replay",
        runs: runs.into_iter().map(|(_, entry)| entry).collect(),
    }
}

/// One policy over the windows of a windowed replay.
#[derive(Debug, Clone, Serialize)]
pub struct WindowedEntry {
    /// The policy's name.
    pub policy: String,
    /// Each window's mean bounded slowdown, in seed order.
    pub bounded_slowdown_by_window: Vec<f64>,
    /// The mean of those.
    pub mean_bounded_slowdown: f64,
    /// The mean of the windows' mean waits, seconds.
    pub mean_wait: f64,
    /// The longest wait of any job in any window, seconds.
    pub longest_wait: f64,
    /// Estimated starts against real ones, over every window's jobs.
    pub estimates: EstimateAccuracy,
    /// The same, by the confidence of each job's first estimate.
    pub estimates_by_confidence: ByConfidence,
    /// Waits against FCFS + EASY's in the same windows, when that policy
    /// was replayed too.
    pub against_easy: Option<AgainstEasy>,
}

/// Waits under one policy against FCFS + EASY's in the same windows.
#[derive(Debug, Clone, Serialize)]
pub struct AgainstEasy {
    /// The largest, over windows, of the policy's longest wait over EASY's
    /// longest wait.
    pub worst_longest_wait_ratio: f64,
    /// Jobs that waited more than twice as long as under EASY, and more
    /// than an hour longer.
    pub jobs_over_twice_easy_wait: usize,
    /// Jobs compared.
    pub jobs: usize,
}

/// `runs` against `easy`, window by window.
fn against_easy(runs: &[&ReplayRun], easy: &[&ReplayRun]) -> AgainstEasy {
    let mut worst: f64 = 0.0;
    let mut over = 0;
    let mut jobs = 0;
    for (run, base) in runs.iter().zip(easy) {
        worst = worst.max(run.wait.max / base.wait.max.max(1.0));
        for (outcome, baseline) in run.outcomes.iter().zip(&base.outcomes) {
            let (Some(wait), Some(was)) = (outcome.wait, baseline.wait) else {
                continue;
            };
            jobs += 1;
            if wait > 2 * was && wait > was + 3_600 {
                over += 1;
            }
        }
    }
    AgainstEasy {
        worst_longest_wait_ratio: worst,
        jobs_over_twice_easy_wait: over,
        jobs,
    }
}

/// The report of a windowed replay: RLScheduler's protocol, each window
/// replayed alone on an empty machine.
#[derive(Debug, Clone, Serialize)]
pub struct WindowedReport {
    /// The mode.
    pub mode: &'static str,
    /// Jobs per window.
    pub window: usize,
    /// One window per seed.
    pub seeds: Vec<u64>,
    /// One entry per policy, in the order asked.
    pub policies: Vec<WindowedEntry>,
}

/// Replays one window of `size` consecutive jobs per seed, each from an
/// empty machine, once per policy.
#[allow(clippy::too_many_arguments)]
pub fn replay_windows(
    cluster: &Cluster,
    jobs: &[Job],
    policies: &[String],
    planning_depth: usize,
    size: usize,
    seeds: &[u64],
    threads: usize,
    progress: &(dyn Fn(&str) + Sync),
) -> WindowedReport {
    let runs: Vec<ReplayReport> = seeds
        .iter()
        .map(|seed| {
            let window = replay::window(jobs, size, *seed);
            progress(&format!("window of seed {seed}: {} jobs", window.len()));
            replay_experiment(
                cluster,
                &[],
                &window,
                policies,
                planning_depth,
                threads,
                progress,
            )
        })
        .collect();
    let of = |name: &str| -> Vec<&ReplayRun> {
        runs.iter()
            .filter_map(|r| r.runs.iter().find(|e| e.policy == name))
            .map(|e| &e.run)
            .collect()
    };
    let easy = of("easy");
    let policies = policies
        .iter()
        .map(|name| {
            let of_policy = of(name);
            let slowdowns: Vec<f64> = of_policy.iter().map(|r| r.bounded_slowdown.mean).collect();
            let outcomes: Vec<replay::Outcome> = of_policy
                .iter()
                .flat_map(|r| r.outcomes.iter().cloned())
                .collect();
            let count = of_policy.len().max(1) as f64;
            WindowedEntry {
                policy: name.clone(),
                mean_bounded_slowdown: slowdowns.iter().sum::<f64>() / count,
                bounded_slowdown_by_window: slowdowns,
                mean_wait: of_policy.iter().map(|r| r.wait.mean).sum::<f64>() / count,
                longest_wait: of_policy.iter().map(|r| r.wait.max).fold(0.0, f64::max),
                estimates: EstimateAccuracy::of(&outcomes),
                estimates_by_confidence: ByConfidence::of(&outcomes),
                against_easy: (easy.len() == of_policy.len() && !easy.is_empty())
                    .then(|| against_easy(&of_policy, &easy)),
            }
        })
        .collect();
    WindowedReport {
        mode: "replay-windows",
        window: size,
        seeds: seeds.to_vec(),
        policies,
    }
}
