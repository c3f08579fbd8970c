//! A swarm of emulated nodes in one process, each speaking the agent
//! protocol through the agent's own client, so one server is loaded as
//! that many `gantry-agent`s would load it: each node registers with a
//! join token, heartbeats its GPUs' telemetry every interval (starting at a
//! random moment within the first), long-polls its assignments, and runs
//! what it is assigned as a timer: reported running at once, a job exited
//! (0) after `--run-ms`, work told to stop reported stopped (each once).
//! Reports go in one batched call per node and change, as the agent sends
//! them.
//!
//! `cargo run --release -p gantry-agent --example swarm -- --server URL
//! --join-token TOKEN --nodes 10000 --seconds 60` prints one JSON object:
//! heartbeat and report latencies (p50, p90, p99, max, in ms) over the
//! measured window (after every node has registered), call counts and
//! errors.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use gantry_agent::client::{Action, Assignments, Client, Registration, Report, WorkloadState};
use gantry_agent::discovery::{Source, simulated};
use tokio::sync::{Semaphore, mpsc};
use uuid::Uuid;

#[derive(Parser)]
struct Cli {
    #[arg(long)]
    server: String,
    #[arg(long)]
    join_token: String,
    #[arg(long, default_value_t = 1000)]
    nodes: usize,
    /// How long to measure once every node has registered.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// The agent's default heartbeat interval.
    #[arg(long, default_value_t = 2000)]
    interval_ms: u64,
    /// How long a job runs.
    #[arg(long, default_value_t = 1000)]
    run_ms: u64,
    #[arg(long, default_value = "8xH100-SXM-80GB")]
    gpus: String,
    /// Node names are `{prefix}-{n}`.
    #[arg(long, default_value = "swarm")]
    prefix: String,
    /// Registrations in flight at once.
    #[arg(long, default_value_t = 32)]
    registering: usize,
}

/// How long a long-poll waits, as the agent's.
const WAIT: Duration = Duration::from_secs(18);
/// How long a long-poll rests after a failure, as the agent's.
const RETRY: Duration = Duration::from_secs(8);

/// Latencies in microseconds and failures, gathered from every node.
#[derive(Default)]
struct Tally {
    heartbeats: Vec<u32>,
    reports: Vec<u32>,
    polls: u64,
    failures: u64,
    started: u64,
    ended: u64,
}

type Shared = Arc<Mutex<Tally>>;

fn tally(shared: &Shared) -> std::sync::MutexGuard<'_, Tally> {
    shared
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let client = Client::new(&cli.server)?;
    let shared = Shared::default();
    let measuring = Arc::new(tokio::sync::watch::Sender::new(false));
    let gate = Arc::new(Semaphore::new(cli.registering.max(1)));
    let (registered, mut joined) = mpsc::unbounded_channel();
    let began = Instant::now();
    for n in 0..cli.nodes {
        // Spread over the interval, as agents started at different times are.
        let phase_ms = u64::try_from(n).unwrap_or(0).wrapping_mul(7_919) % cli.interval_ms.max(1);
        let node = Node {
            client: client.clone(),
            name: format!("{}-{n:05}", cli.prefix),
            phase: Duration::from_millis(phase_ms),
            interval: Duration::from_millis(cli.interval_ms.max(50)),
            run: Duration::from_millis(cli.run_ms),
            shared: shared.clone(),
            measuring: measuring.subscribe(),
        };
        let (gate, token, gpus, registered) = (
            gate.clone(),
            cli.join_token.clone(),
            cli.gpus.clone(),
            registered.clone(),
        );
        tokio::spawn(async move {
            let credential = {
                let _turn = gate.acquire().await;
                node.register(&token, &gpus).await
            };
            let joined = credential.is_ok();
            registered.send(joined).ok();
            match credential {
                Ok((credential, gpus)) => node.run(credential, gpus).await,
                Err(error) => eprintln!("{}: {error:#}", node.name),
            }
        });
    }
    let mut nodes = 0;
    for n in 1..=cli.nodes {
        nodes += usize::from(joined.recv().await.unwrap_or(false));
        if n % 1_000 == 0 {
            eprintln!(
                "registered {nodes} of {n} after {:.1} s",
                began.elapsed().as_secs_f64()
            );
        }
    }
    let registration_s = began.elapsed().as_secs_f64();
    // One interval for every node to be in step, then the window.
    tokio::time::sleep(Duration::from_millis(cli.interval_ms)).await;
    *tally(&shared) = Tally::default();
    measuring.send_replace(true);
    // For whoever measures the server beside this window.
    eprintln!("measuring {nodes} nodes for {} s", cli.seconds);
    tokio::time::sleep(Duration::from_secs(cli.seconds)).await;
    measuring.send_replace(false);
    let mut done = std::mem::take(&mut *tally(&shared));
    let summary = serde_json::json!({
        "nodes": nodes,
        "registration_s": registration_s,
        "seconds": cli.seconds,
        "interval_ms": cli.interval_ms,
        "heartbeats": done.heartbeats.len(),
        "heartbeat_ms": percentiles(&mut done.heartbeats),
        "reports": done.reports.len(),
        "report_ms": percentiles(&mut done.reports),
        "polls_answered": done.polls,
        "workloads_started": done.started,
        "workloads_ended": done.ended,
        "failures": done.failures,
    });
    println!("{summary}");
    Ok(())
}

fn percentiles(micros: &mut [u32]) -> serde_json::Value {
    if micros.is_empty() {
        return serde_json::Value::Null;
    }
    micros.sort_unstable();
    let at = |p: f64| {
        let index = ((micros.len() - 1) as f64 * p).round() as usize;
        f64::from(micros[index]) / 1000.0
    };
    serde_json::json!({ "p50": at(0.5), "p90": at(0.9), "p99": at(0.99), "max": at(1.0) })
}

struct Node {
    client: Client,
    name: String,
    phase: Duration,
    interval: Duration,
    run: Duration,
    shared: Shared,
    measuring: tokio::sync::watch::Receiver<bool>,
}

/// A workload this node runs: when a job's timer ends, if it is one.
struct Running {
    ends_at: Option<tokio::time::Instant>,
}

impl Node {
    async fn register(&self, token: &str, gpus: &str) -> anyhow::Result<(String, Source)> {
        let gpus = simulated(gpus)?;
        let registered = self
            .client
            .register(
                token,
                &Registration {
                    name: &self.name,
                    rack: "swarm",
                    labels: &[],
                    cpu_milli: 192_000,
                    memory_mib: 2_048 * 1_024,
                    gpus: &gpus,
                    runtime: "process",
                },
            )
            .await?;
        Ok((registered.credential, Source::Simulated(gpus)))
    }

    async fn run(self, credential: String, gpus: Source) {
        let (answers, mut answered) = mpsc::channel::<Assignments>(1);
        tokio::spawn(poll(
            self.client.clone(),
            credential.clone(),
            answers,
            self.shared.clone(),
        ));
        let mut tick =
            tokio::time::interval_at(tokio::time::Instant::now() + self.phase, self.interval);
        let mut running: HashMap<Uuid, (Vec<u32>, Running)> = HashMap::new();
        // Ended here and reported: an answer from before the report may
        // still list them, and they are not started again (the agent keeps
        // their exits the same way).
        let mut finished: HashSet<Uuid> = HashSet::new();
        loop {
            let next_end = running.values().filter_map(|(_, r)| r.ends_at).min();
            let mut reports = Vec::new();
            tokio::select! {
                _ = tick.tick() => {
                    let busy: Vec<u32> = running.values().flat_map(|(g, _)| g.clone()).collect();
                    let samples = gpus.samples(&busy);
                    let sent = Instant::now();
                    let beat = self.client.heartbeat(&credential, &samples, None, None).await;
                    self.record(|t| &mut t.heartbeats, sent, beat.is_ok());
                }
                Some(answer) = answered.recv() => {
                    reports = self.reconcile(&answer, &mut running, &mut finished);
                }
                () = sleep_until(next_end) => {
                    let now = tokio::time::Instant::now();
                    let ended: Vec<Uuid> = running
                        .iter()
                        .filter(|(_, (_, r))| r.ends_at.is_some_and(|at| at <= now))
                        .map(|(id, _)| *id)
                        .collect();
                    tally(&self.shared).ended += ended.len() as u64;
                    for id in ended {
                        running.remove(&id);
                        finished.insert(id);
                        reports.push(report(id, WorkloadState::Exited, Some(0)));
                    }
                }
            }
            if !reports.is_empty() {
                let sent = Instant::now();
                let reported = self.client.report(&credential, &reports).await;
                self.record(|t| &mut t.reports, sent, reported.is_ok());
            }
        }
    }

    /// Starts what is new, stops what is told to stop, and forgets what
    /// left; answers the reports.
    fn reconcile(
        &self,
        answer: &Assignments,
        running: &mut HashMap<Uuid, (Vec<u32>, Running)>,
        finished: &mut HashSet<Uuid>,
    ) -> Vec<Report> {
        let mut reports = Vec::new();
        let mut started = 0;
        let mut ended = 0;
        for a in &answer.assignments {
            match a.action {
                Action::Run
                    if !running.contains_key(&a.order_id) && !finished.contains(&a.order_id) =>
                {
                    let ends_at = a
                        .command
                        .as_ref()
                        .map(|_| tokio::time::Instant::now() + self.run);
                    running.insert(a.order_id, (a.gpu_ids.clone(), Running { ends_at }));
                    reports.push(report(a.order_id, WorkloadState::Running, None));
                    started += 1;
                }
                Action::Stop if finished.insert(a.order_id) => {
                    ended += u64::from(running.remove(&a.order_id).is_some());
                    reports.push(report(a.order_id, WorkloadState::Stopped, None));
                }
                Action::Stop | Action::Run => {}
            }
        }
        let listed: HashSet<Uuid> = answer.assignments.iter().map(|a| a.order_id).collect();
        running.retain(|id, _| listed.contains(id));
        finished.retain(|id| listed.contains(id));
        let mut tally = tally(&self.shared);
        tally.started += started;
        tally.ended += ended;
        reports
    }

    fn record(&self, series: impl Fn(&mut Tally) -> &mut Vec<u32>, sent: Instant, ok: bool) {
        if !*self.measuring.borrow() {
            return;
        }
        let micros = u32::try_from(sent.elapsed().as_micros()).unwrap_or(u32::MAX);
        let mut tally = tally(&self.shared);
        series(&mut tally).push(micros);
        tally.failures += u64::from(!ok);
    }
}

/// The long-poll: each answer goes to the node, which reconciles it.
async fn poll(
    client: Client,
    credential: String,
    answers: mpsc::Sender<Assignments>,
    shared: Shared,
) {
    let mut version: Option<String> = None;
    loop {
        match client
            .assignments_changed(&credential, version.as_deref(), WAIT)
            .await
        {
            Ok(answer) => {
                tally(&shared).polls += 1;
                let next = answer.version().map(str::to_owned);
                let changed = next != version;
                version = next;
                if changed && answers.send(answer).await.is_err() {
                    return;
                }
            }
            Err(_) => {
                tally(&shared).failures += 1;
                tokio::time::sleep(RETRY).await;
            }
        }
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn report(order_id: Uuid, state: WorkloadState, exit_code: Option<i32>) -> Report {
    Report {
        order_id,
        state,
        exit_code,
        message: None,
        access: None,
    }
}
