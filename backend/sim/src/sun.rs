//! Follow the sun: a generated week of work from three teams working
//! business hours in Seoul, Frankfurt and New York, on three regions with
//! region-local off-peak prices, scheduled region by region or globally
//! with time-aware placement.

use std::collections::BTreeMap;

use gantry_scheduler::{
    Cluster, GpuRequest, Node, OffPeak, PriorityClass, Region, Workload, WorkloadClass,
};
use serde::Serialize;

use crate::experiment::replay_policy;
use crate::replay::{self, Job, ReplayRun};
use crate::rng::Rng;
use crate::stats::{Summary, summary};
use crate::trace::gpus;

/// The teams: name, home region, offset of local time from UTC in hours.
pub const SITES: [(&str, &str, i32); 3] = [
    ("seoul", "ap-northeast", 9),
    ("frankfurt", "eu-central", 1),
    ("new-york", "us-east", -5),
];

/// The GPU model of every node.
pub const MODEL: &str = "H100-SXM-80GB";

/// List price of one GPU-hour, in micro-units; off-peak (22:00–06:00 local)
/// it costs 60 %.
pub const GPU_HOUR_MICROS: u64 = 2_500_000;

const HOUR: i64 = 3_600;
const DAY: i64 = 24 * HOUR;
/// Monday 2026-11-30 00:00 UTC.
const WEEK_START: i64 = 1_796_256_000 - 3 * DAY;

/// Three regions of `nodes` 8-GPU nodes each, with their clocks and prices.
pub fn cluster(nodes: u32) -> Cluster {
    let mut all: Vec<Node> = Vec::new();
    let mut regions = Vec::new();
    for (_, region, offset) in SITES {
        for i in 0..nodes {
            all.push(Node {
                name: format!("{region}-{i:03}"),
                region: region.into(),
                rack: format!("{region}-rack-{}", i / 16),
                labels: Default::default(),
                cpu_milli: 192_000,
                memory_mib: 2_048 * 1_024,
                schedulable: true,
                gpus: gpus(8, MODEL, 4),
            });
        }
        regions.push(Region {
            name: region.into(),
            utc_offset_minutes: offset * 60,
            off_peak: Some(OffPeak {
                start_minute: 22 * 60,
                end_minute: 6 * 60,
                price_permille: 600,
            }),
            gpu_hour_micros: [(MODEL.to_owned(), GPU_HOUR_MICROS)].into(),
        });
    }
    Cluster {
        nodes: all,
        regions,
    }
}

/// A week of work, seeded. Each team submits interactive dev work (1 GPU,
/// 30–180 min) during its local business hours on weekdays, and at any
/// hour training (8 GPUs, 2–8 h, deadline 24 h after its run) and batch
/// work (2 or 4 GPUs, 1–4 h, deadline 12 h after its run). With `global`,
/// training and batch accept every region; otherwise all work stays home.
pub fn generate(seed: u64, global: bool) -> Vec<Job> {
    let mut rng = Rng::new(seed);
    let mut jobs = Vec::new();
    let all: Vec<String> = SITES.iter().map(|(_, r, _)| (*r).to_owned()).collect();
    for hour in 0..7 * 24 {
        let at = WEEK_START + hour * HOUR;
        for (team, region, offset) in SITES {
            let local = (at - WEEK_START + i64::from(offset) * HOUR).rem_euclid(7 * DAY);
            let (weekday, local_hour) = (local / DAY, (local % DAY) / HOUR);
            let mut submit =
                |class: WorkloadClass, gpus: u32, run: i64, slack: Option<i64>, rng: &mut Rng| {
                    let submitted = at + i64::try_from(rng.below(3_600)).unwrap_or(0);
                    let regions = if global && class.is_deferrable() {
                        all.clone()
                    } else {
                        vec![region.to_owned()]
                    };
                    jobs.push(Job {
                        workload: Workload {
                            id: format!("{team}-{:05}", jobs.len()),
                            queue: team.into(),
                            gpu_models: vec![MODEL.into()],
                            gpus: GpuRequest::Whole(gpus),
                            node_count: 1,
                            cpu_milli_per_node: u64::from(gpus) * 8_000,
                            memory_mib_per_node: u64::from(gpus) * 64 * 1_024,
                            priority: PriorityClass::Standard,
                            class,
                            submitted_at: submitted,
                            duration_estimate: Some(run),
                            deadline: slack.map(|s| submitted + run + s),
                            regions,
                            ..Workload::default()
                        },
                        submit: submitted,
                        run,
                    });
                };
            if weekday < 5 && (9..18).contains(&local_hour) {
                for _ in 0..6 {
                    if rng.below(2) == 0 {
                        let run = (30 + i64::try_from(rng.below(151)).unwrap_or(0)) * 60;
                        submit(WorkloadClass::Dev, 1, run, None, &mut rng);
                    }
                }
            }
            if rng.below(2) == 0 {
                let run = (2 + i64::try_from(rng.below(7)).unwrap_or(0)) * HOUR;
                submit(WorkloadClass::Training, 8, run, Some(24 * HOUR), &mut rng);
            }
            if rng.below(2) == 0 {
                let run = (1 + i64::try_from(rng.below(4)).unwrap_or(0)) * HOUR;
                let gpus = if rng.below(2) == 0 { 2 } else { 4 };
                submit(WorkloadClass::Batch, gpus, run, Some(12 * HOUR), &mut rng);
            }
        }
    }
    jobs.sort_by_key(|j| (j.submit, j.workload.id.clone()));
    jobs
}

/// The price of `gpus` GPUs in `region` from `start` for `seconds`, rated
/// per second against the region's clock.
pub fn cost(cluster: &Cluster, region: &str, gpus: u64, start: i64, seconds: i64) -> u64 {
    let Some(region) = cluster.region(region) else {
        return 0;
    };
    let mut total: u128 = 0;
    let mut at = start;
    let end = start + seconds;
    while at < end {
        // Prices change on the hour at most: rate a whole slice at once.
        let next = ((at.div_euclid(HOUR)) + 1) * HOUR;
        let slice = next.min(end) - at;
        let price = region.gpu_hour_price(MODEL, at).unwrap_or(0);
        total += u128::from(price) * u128::from(gpus) * u128::try_from(slice).unwrap_or(0);
        at = next;
    }
    u64::try_from(total / u128::from(HOUR as u64)).unwrap_or(u64::MAX)
}

/// One scenario's figures.
#[derive(Debug, Clone, Serialize)]
pub struct SunScenario {
    /// `region-local` or `global`.
    pub scenario: &'static str,
    /// Share of each region's GPU-time held, over the makespan.
    pub utilization_by_region: BTreeMap<String, f64>,
    /// The same over all regions.
    pub utilization: f64,
    /// Waits per workload class, seconds.
    pub wait_by_class: BTreeMap<String, Summary>,
    /// Work with a deadline, and how much of it ended in time.
    pub deadlines: usize,
    /// Deadlines met.
    pub deadlines_met: usize,
    /// GPU cost of all completed work, in micro-units.
    pub cost_micros: u64,
    /// Completed jobs.
    pub completed: usize,
    /// Jobs.
    pub jobs: usize,
}

/// The report: both scenarios on the same generated week.
#[derive(Debug, Clone, Serialize)]
pub struct SunReport {
    /// The generator's seed.
    pub seed: u64,
    /// 8-GPU nodes per region.
    pub nodes_per_region: u32,
    /// Region-local scheduling, then global time-aware placement.
    pub scenarios: Vec<SunScenario>,
}

fn class_name(class: WorkloadClass) -> &'static str {
    match class {
        WorkloadClass::Training => "training",
        WorkloadClass::FineTuning => "fine_tuning",
        WorkloadClass::Inference => "inference",
        WorkloadClass::Dev => "dev",
        WorkloadClass::Batch => "batch",
        WorkloadClass::Hpo => "hpo",
    }
}

fn scenario(name: &'static str, cluster: &Cluster, jobs: &[Job], run: &ReplayRun) -> SunScenario {
    let region_of: BTreeMap<&str, &str> = cluster
        .nodes
        .iter()
        .map(|n| (n.name.as_str(), n.region.as_str()))
        .collect();
    let mut busy: BTreeMap<String, f64> = BTreeMap::new();
    let mut waits: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let (mut deadlines, mut met, mut cost_micros) = (0, 0, 0u64);
    for (outcome, job) in run.outcomes.iter().zip(jobs) {
        let (Some(start), Some(end), Some(node)) = (outcome.start, outcome.end, &outcome.node)
        else {
            continue;
        };
        let region = region_of.get(node.as_str()).copied().unwrap_or_default();
        let gpus = match job.workload.gpus {
            GpuRequest::Whole(k) => u64::from(k),
            GpuRequest::Milli(_) | GpuRequest::Mig(_) => 1,
        };
        *busy.entry(region.to_owned()).or_default() += gpus as f64 * (end - start) as f64;
        cost_micros += cost(cluster, region, gpus, start, end - start);
        if let Some(wait) = outcome.wait {
            waits
                .entry(class_name(job.workload.class).to_owned())
                .or_default()
                .push(wait as f64);
        }
        if let Some(deadline) = job.workload.deadline {
            deadlines += 1;
            met += usize::from(end <= deadline);
        }
    }
    let per_region = cluster.nodes.len() as f64 / SITES.len() as f64 * 8.0;
    let span = run.makespan.max(1) as f64;
    SunScenario {
        scenario: name,
        utilization: busy.values().sum::<f64>() / (per_region * SITES.len() as f64 * span),
        utilization_by_region: busy
            .into_iter()
            .map(|(region, seconds)| (region, seconds / (per_region * span)))
            .collect(),
        wait_by_class: waits
            .into_iter()
            .map(|(class, w)| (class, summary(&w)))
            .collect(),
        deadlines,
        deadlines_met: met,
        cost_micros,
        completed: run.completed,
        jobs: run.jobs,
    }
}

/// Runs both scenarios on the week generated from `seed`.
pub fn compare(seed: u64, nodes_per_region: u32) -> SunReport {
    let cluster = cluster(nodes_per_region);
    let Some(global_policy) = replay_policy("gantry") else {
        return SunReport {
            seed,
            nodes_per_region,
            scenarios: Vec::new(),
        };
    };
    let local_policy = gantry_scheduler::Policy {
        follow_the_sun: false,
        ..global_policy.clone()
    };
    let local_jobs = generate(seed, false);
    let global_jobs = generate(seed, true);
    let local = replay::run(&cluster, &[], &local_jobs, &local_policy, |_| {});
    let global = replay::run(&cluster, &[], &global_jobs, &global_policy, |_| {});
    SunReport {
        seed,
        nodes_per_region,
        scenarios: vec![
            scenario("region-local", &cluster, &local_jobs, &local),
            scenario("global", &cluster, &global_jobs, &global),
        ],
    }
}
