//! `gantry sim`: the trace simulator's command line.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use clap::Subcommand;
use gantry_scheduler::{Cluster, Node};
use gantry_sim::defrag::{self, DefragReport};
use gantry_sim::experiment::{
    FillReport, PLACEMENT_POLICIES, REPLAY_POLICIES, ReplayReport, WindowedReport, fill_experiment,
    placement_policy, replay_experiment, replay_windows,
};
use gantry_sim::fill::{self, PlacementRow};
use gantry_sim::sun::{self, SunReport};
use gantry_sim::{alibaba, csv, swf};

#[derive(Subcommand)]
pub enum SimCommand {
    /// The arrival-only fill protocol of the FGD paper: pods arrive in a
    /// seeded shuffled order until 130% of the GPUs are asked for; reports
    /// allocation and fragmentation per +1% of arrived work.
    Fill {
        /// Cluster: an Alibaba node list (`sn,...`) or a Gantry cluster CSV.
        #[arg(long)]
        nodes: PathBuf,
        /// Alibaba pod lists; several may be given.
        #[arg(long, required = true)]
        pods: Vec<PathBuf>,
        /// Placement policies: random, first-fit, best-fit, spread, fgd (the
        /// FGD paper's score, as a peer), gantry.
        #[arg(long = "policy", default_values_t = ["gantry".to_owned()])]
        policies: Vec<String>,
        /// Seeds: one number or a range such as 42..51 (inclusive).
        #[arg(long, default_value = "42")]
        seeds: String,
        /// Arrivals stop before the GPU request passes this multiple of the
        /// cluster's GPUs.
        #[arg(long, default_value_t = 1.3)]
        inflate: f64,
        /// Write the JSON report here.
        #[arg(long)]
        report: Option<PathBuf>,
        /// Write the curves as CSV here.
        #[arg(long)]
        curves_out: Option<PathBuf>,
        /// Write every arrival and its placement as CSV here (one run only).
        #[arg(long)]
        placements_out: Option<PathBuf>,
        /// Threads; all cores when not given.
        #[arg(long)]
        threads: Option<usize>,
    },
    /// A generated week of three teams in Seoul, Frankfurt and New York on
    /// three regions with off-peak prices: region-local scheduling against
    /// global time-aware placement.
    FollowTheSun {
        /// The generator's seed.
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// 8-GPU nodes per region (1 to 1000).
        #[arg(long, default_value_t = 5)]
        nodes_per_region: u32,
        /// Write the JSON report here.
        #[arg(long)]
        report: Option<PathBuf>,
    },
    /// A generated two days of checkpointable team work and whole-node
    /// training runs on sixteen 8-GPU nodes, replayed without and with
    /// defragmentation.
    Defrag {
        /// Seeds: one number or a range such as 42..51 (inclusive).
        #[arg(long, default_value = "42")]
        seeds: String,
        /// GPU-seconds of work each queue may lose to moves per hour.
        #[arg(long, default_value_t = 3_600.0)]
        budget: f64,
        /// Write the JSON report here.
        #[arg(long)]
        report: Option<PathBuf>,
    },
    /// Time-driven replay: arrivals, runs and departures.
    Replay {
        /// An SWF trace, run on a machine of `--processors` processors.
        #[arg(long, conflicts_with_all = ["cluster", "workloads"])]
        swf: Option<PathBuf>,
        /// Processors of the SWF machine.
        #[arg(long, default_value_t = 256)]
        processors: u32,
        /// A Gantry cluster CSV.
        #[arg(long, requires = "workloads")]
        cluster: Option<PathBuf>,
        /// A Gantry workload CSV.
        #[arg(long, requires = "cluster")]
        workloads: Option<PathBuf>,
        /// Policies: fcfs, easy, gantry.
        #[arg(long = "policy", default_values_t = REPLAY_POLICIES.map(str::to_owned))]
        policies: Vec<String>,
        /// How many waiting jobs get an estimated start each cycle (the
        /// server estimates 100); more only costs replay time.
        #[arg(long, default_value_t = 1)]
        planning_depth: usize,
        /// Replay windows of this many consecutive jobs instead of the whole
        /// trace, one per seed, each on an empty machine.
        #[arg(long)]
        window: Option<usize>,
        /// With --window: one window per seed (`42` or `42..51`).
        #[arg(long, default_value = "42..51", requires = "window")]
        seeds: String,
        /// Write the JSON report here.
        #[arg(long)]
        report: Option<PathBuf>,
        /// Threads; all cores when not given.
        #[arg(long)]
        threads: Option<usize>,
    },
}

fn read(path: &Path) -> anyhow::Result<String> {
    fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

fn threads(asked: Option<usize>) -> usize {
    asked.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from))
}

fn seeds(text: &str) -> anyhow::Result<Vec<u64>> {
    let parsed = match text.split_once("..") {
        Some((from, to)) => from
            .trim()
            .parse::<u64>()
            .ok()
            .zip(to.trim().parse::<u64>().ok())
            .filter(|(from, to)| from <= to)
            .map(|(from, to)| (from..=to).collect()),
        None => text.trim().parse().ok().map(|seed| vec![seed]),
    };
    parsed.with_context(|| format!("seeds must be a number or a range like 42..51, not {text:?}"))
}

fn nodes(path: &Path) -> anyhow::Result<Vec<Node>> {
    let text = read(path)?;
    let parsed = if text.starts_with("sn,") {
        alibaba::nodes(&text)
    } else {
        csv::cluster(&text)
    };
    parsed.with_context(|| format!("in {}", path.display()))
}

fn list_name(path: &Path) -> String {
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("pods");
    stem.strip_prefix("openb_pod_list_")
        .unwrap_or(stem)
        .to_owned()
}

fn write_json(path: Option<&Path>, value: &impl serde::Serialize) -> anyhow::Result<()> {
    if let Some(path) = path {
        let mut json = serde_json::to_string_pretty(value)?;
        json.push('\n');
        fs::write(path, json).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn check(names: &[String], known: &[&str]) -> anyhow::Result<()> {
    if let Some(unknown) = names.iter().find(|n| !known.contains(&n.as_str())) {
        bail!("unknown policy {unknown:?}; known: {}", known.join(", "));
    }
    Ok(())
}

pub fn run(command: SimCommand) -> anyhow::Result<()> {
    match command {
        SimCommand::Fill {
            nodes: nodes_path,
            pods,
            policies,
            seeds: seed_text,
            inflate,
            report: report_path,
            curves_out,
            placements_out,
            threads: asked,
        } => {
            check(&policies, &PLACEMENT_POLICIES)?;
            let seeds = seeds(&seed_text)?;
            if !(inflate > 0.0 && inflate <= 10.0) {
                bail!("--inflate must be above 0 and at most 10");
            }
            let cluster = Cluster {
                nodes: nodes(&nodes_path)?,
                regions: Vec::new(),
            };
            let mut lists = Vec::new();
            for path in &pods {
                let parsed = alibaba::pods(&read(path)?)
                    .with_context(|| format!("in {}", path.display()))?;
                lists.push((list_name(path), parsed));
            }
            if let Some(path) = placements_out {
                let ([(_, pods)], [policy], [seed]) =
                    (lists.as_slice(), policies.as_slice(), seeds.as_slice())
                else {
                    bail!("--placements-out needs exactly one pod list, policy and seed");
                };
                write_placements(&path, &cluster, pods, policy, *seed, inflate)?;
            }
            let report = fill_experiment(
                &cluster,
                &lists,
                &policies,
                &seeds,
                inflate,
                threads(asked),
                &|line| {
                    eprintln!("{line}");
                },
            );
            print!("{}", fill_summary(&report));
            write_json(report_path.as_deref(), &report)?;
            if let Some(path) = curves_out {
                fs::write(&path, curves_csv(&report))
                    .with_context(|| format!("writing {}", path.display()))?;
            }
            Ok(())
        }
        SimCommand::FollowTheSun {
            seed,
            nodes_per_region,
            report: report_path,
        } => {
            if !(1..=1_000).contains(&nodes_per_region) {
                bail!("--nodes-per-region must be 1 to 1000");
            }
            let report = sun::compare(seed, nodes_per_region);
            print!("{}", sun_summary(&report));
            write_json(report_path.as_deref(), &report)
        }
        SimCommand::Defrag {
            seeds: seed_text,
            budget,
            report: report_path,
        } => {
            if !(budget.is_finite() && budget >= 0.0) {
                bail!("--budget must be a number of GPU-seconds, 0 or more");
            }
            let reports: Vec<DefragReport> = seeds(&seed_text)?
                .into_iter()
                .map(|seed| defrag::compare(seed, budget))
                .collect();
            print!("{}", defrag_summary(&reports));
            write_json(report_path.as_deref(), &reports)
        }
        SimCommand::Replay {
            swf: swf_path,
            processors,
            cluster,
            workloads,
            policies,
            planning_depth,
            window,
            seeds: seed_text,
            report: report_path,
            threads: asked,
        } => {
            check(&policies, &REPLAY_POLICIES)?;
            if !(1..=10_000).contains(&planning_depth) {
                bail!("--planning-depth must be 1 to 10000");
            }
            let (nodes, jobs) = match (swf_path, cluster, workloads) {
                (Some(path), _, _) => {
                    if processors == 0 || processors > 100_000 {
                        bail!("--processors must be 1 to 100000");
                    }
                    let jobs = swf::jobs(&read(&path)?)
                        .with_context(|| format!("in {}", path.display()))?;
                    (swf::machine(processors), swf::replay_jobs(&jobs))
                }
                (None, Some(cluster), Some(workloads)) => {
                    let jobs = csv::workloads(&read(&workloads)?)
                        .with_context(|| format!("in {}", workloads.display()))?;
                    (nodes(&cluster)?, jobs)
                }
                _ => bail!("give --swf, or --cluster with --workloads"),
            };
            let cluster = Cluster {
                nodes,
                regions: Vec::new(),
            };
            let progress = |line: &str| eprintln!("{line}");
            if let Some(size) = window {
                if size == 0 {
                    bail!("--window must be at least 1");
                }
                let seeds = seeds(&seed_text)?;
                let report = replay_windows(
                    &cluster,
                    &jobs,
                    &policies,
                    planning_depth,
                    size,
                    &seeds,
                    threads(asked),
                    &progress,
                );
                print!("{}", windows_summary(&report));
                return write_json(report_path.as_deref(), &report);
            }
            let report = replay_experiment(
                &cluster,
                &[],
                &jobs,
                &policies,
                planning_depth,
                threads(asked),
                &progress,
            );
            print!("{}", replay_summary(&report));
            write_json(report_path.as_deref(), &report)
        }
    }
}

fn write_placements(
    path: &Path,
    cluster: &Cluster,
    pods: &[alibaba::Pod],
    policy: &str,
    seed: u64,
    inflate: f64,
) -> anyhow::Result<()> {
    let config = placement_policy(policy, seed).context("unknown policy")?;
    let mut out = String::from(PlacementRow::HEADER);
    out.push('\n');
    fill::run(cluster, pods, &config, seed, inflate, |row| {
        out.push_str(&row.csv());
        out.push('\n');
    });
    fs::write(path, out).with_context(|| format!("writing {}", path.display()))
}

fn fill_summary(report: &FillReport) -> String {
    let mut out =
        String::from("pod list          policy      seeds  unallocated at 100%  pods failed\n");
    for m in &report.medians {
        let _ = writeln!(
            out,
            "{:<17} {:<11} {:>5}  {:>18.2}%  {:>10.2}%",
            m.pods,
            m.policy,
            m.seeds,
            m.unallocated_at_100 * 100.0,
            m.failed_share * 100.0
        );
    }
    out
}

fn curves_csv(report: &FillReport) -> String {
    let mut out = String::from("pods,policy,seed,arrived_percent,allocation,fragmentation\n");
    for entry in &report.runs {
        for point in &entry.run.curve {
            let _ = writeln!(
                out,
                "{},{},{},{},{:.6},{:.6}",
                entry.pods,
                entry.policy,
                entry.run.seed,
                point.arrived_percent,
                point.allocation,
                point.fragmentation
            );
        }
    }
    out
}

fn replay_summary(report: &ReplayReport) -> String {
    let mut out = String::from(
        "policy   jobs  completed  mean wait s  p95 wait s  mean bounded slowdown  utilization  makespan s\n",
    );
    for entry in &report.runs {
        let run = &entry.run;
        let _ = writeln!(
            out,
            "{:<7} {:>5} {:>10} {:>12.0} {:>11.0} {:>22.2} {:>11.1}% {:>11}",
            entry.policy,
            run.jobs,
            run.completed,
            run.wait.mean,
            run.wait.p95,
            run.bounded_slowdown.mean,
            run.utilization * 100.0,
            run.makespan
        );
    }
    out.push_str(&estimates_summary(report.runs.iter().map(|e| {
        (
            e.policy.as_str(),
            &e.run.estimates,
            &e.run.estimates_by_confidence,
        )
    })));
    out
}

fn windows_summary(report: &WindowedReport) -> String {
    let mut out = format!(
        "{} windows of {} jobs\npolicy   mean bounded slowdown  mean wait s  longest wait s  longest/EASY's  over 2x EASY  per window\n",
        report.seeds.len(),
        report.window
    );
    for entry in &report.policies {
        let (ratio, over) = entry.against_easy.as_ref().map_or_else(
            || ("-".to_owned(), "-".to_owned()),
            |a| {
                (
                    format!("{:.2}", a.worst_longest_wait_ratio),
                    format!("{}/{}", a.jobs_over_twice_easy_wait, a.jobs),
                )
            },
        );
        let _ = writeln!(
            out,
            "{:<7} {:>22.2} {:>12.0} {:>15.0} {:>15} {:>13}  {}",
            entry.policy,
            entry.mean_bounded_slowdown,
            entry.mean_wait,
            entry.longest_wait,
            ratio,
            over,
            entry
                .bounded_slowdown_by_window
                .iter()
                .map(|s| format!("{s:.1}"))
                .collect::<Vec<_>>()
                .join(" ")
        );
    }
    out.push_str(&estimates_summary(report.policies.iter().map(|e| {
        (e.policy.as_str(), &e.estimates, &e.estimates_by_confidence)
    })));
    out
}

/// Estimated starts against real ones: per policy, all of them and then
/// split by the confidence of each job's first estimate.
fn estimates_summary<'a>(
    entries: impl Iterator<
        Item = (
            &'a str,
            &'a gantry_sim::replay::EstimateAccuracy,
            &'a gantry_sim::replay::ByConfidence,
        ),
    >,
) -> String {
    let mut out = String::from(
        "policy, first estimate   estimated  error s: median  p90  within 10 % of wait  median error/wait (waits > 60 s)\n",
    );
    for (policy, all, split) in entries {
        for (label, e) in [
            (format!("{policy}, any"), all),
            (format!("{policy}, reserved"), &split.reserved),
            (format!("{policy}, planned"), &split.planned),
        ] {
            let _ = writeln!(
                out,
                "{:<24} {:>10} {:>15.0} {:>5.0} {:>19.1}% {:>33}",
                label,
                e.jobs,
                e.first_error.p50,
                e.first_error_p90,
                e.within_10_percent * 100.0,
                e.median_relative_error_over_60s
                    .map_or("-".to_owned(), |r| format!(
                        "{:.1}% of {} jobs",
                        r * 100.0,
                        e.waited_over_60s
                    )),
            );
        }
    }
    out
}

fn defrag_summary(reports: &[DefragReport]) -> String {
    let mut out = String::from(
        "seed  jobs  whole-node wait mean/p95 s: without  with     other wait mean s: without  with  moves  GPU-s lost (share)\n",
    );
    for r in reports {
        let _ = writeln!(
            out,
            "{:<5} {:>4} {:>33.0}/{:<6.0} {:>5.0}/{:<6.0} {:>26.0} {:>5.0} {:>6} {:>8.0} ({:.3} %)",
            r.seed,
            r.jobs,
            r.without.whole_node_wait.mean,
            r.without.whole_node_wait.p95,
            r.with.whole_node_wait.mean,
            r.with.whole_node_wait.p95,
            r.without.other_wait.mean,
            r.with.other_wait.mean,
            r.with.moves,
            r.with.lost_gpu_seconds,
            r.with.lost_share * 100.0,
        );
    }
    out
}

fn sun_summary(report: &SunReport) -> String {
    let mut out = String::new();
    for s in &report.scenarios {
        let _ = writeln!(
            out,
            "{}: utilization {:.1}% ({}), deadlines met {}/{}, cost {:.2}, completed {}/{}",
            s.scenario,
            s.utilization * 100.0,
            s.utilization_by_region
                .iter()
                .map(|(region, u)| format!("{region} {:.1}%", u * 100.0))
                .collect::<Vec<_>>()
                .join(", "),
            s.deadlines_met,
            s.deadlines,
            s.cost_micros as f64 / 1e6,
            s.completed,
            s.jobs
        );
        for (class, wait) in &s.wait_by_class {
            let _ = writeln!(
                out,
                "  {class:<9} wait mean {:>7.0} s  p95 {:>7.0} s  ({} jobs)",
                wait.mean, wait.p95, wait.count
            );
        }
    }
    out
}
