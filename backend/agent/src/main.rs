//! `gantry-agent`: joins a GPU server to a Gantry control plane and runs
//! the work the scheduler assigns to it.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use gantry_agent::client::{CallError, Client, Registration, Report, WorkloadState};
use gantry_agent::discovery::Source;
use gantry_agent::output::Line;
use gantry_agent::supervisor::{Event, Supervisor};
use serde::{Deserialize, Serialize};
use tracing_subscriber::EnvFilter;
use uuid::Uuid;

#[derive(Parser)]
#[command(name = "gantry-agent", version, about = "Gantry's node agent")]
struct Cli {
    /// The control plane, such as http://gantry.internal:8080.
    #[arg(long, env = "GANTRY_SERVER")]
    server: String,
    /// A join token from an operator; needed until the node is registered.
    #[arg(long, env = "GANTRY_JOIN_TOKEN")]
    join_token: Option<String>,
    /// This node's name; the host name when absent.
    #[arg(long, env = "GANTRY_NODE_NAME")]
    name: Option<String>,
    #[arg(long, default_value = "")]
    rack: String,
    #[arg(long = "label")]
    labels: Vec<String>,
    /// Where the node credential is kept across restarts.
    #[arg(
        long,
        env = "GANTRY_AGENT_STATE_DIR",
        default_value = "/var/lib/gantry-agent"
    )]
    state_dir: PathBuf,
    /// Pretend to have GPUs (COUNTxMODEL, such as 8xH100-SXM-80GB) on a
    /// machine without an NVIDIA driver, for development.
    #[arg(long)]
    simulate_gpus: Option<String>,
    /// Report every GPU as this catalog model instead of NVML's name.
    #[arg(long)]
    gpu_model: Option<String>,
    /// Print the discovered GPUs as JSON and exit.
    #[arg(long)]
    discover: bool,
    /// What runs for each assigned workload (by `sh -c`), with
    /// `CUDA_VISIBLE_DEVICES` and `GANTRY_ORDER_ID` set.
    #[arg(
        long,
        env = "GANTRY_WORKLOAD_COMMAND",
        default_value = "exec sleep infinity"
    )]
    workload_command: String,
    /// Between SIGTERM and SIGKILL when a workload is stopped.
    #[arg(long, default_value_t = 30.0)]
    grace_seconds: f64,
    /// How often to heartbeat and fetch assignments.
    #[arg(long, default_value_t = 2000)]
    interval_ms: u64,
}

#[derive(Serialize, Deserialize)]
struct Saved {
    node_id: uuid::Uuid,
    credential: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let source = Source::open(cli.simulate_gpus.as_deref())?;
    let gpus = source.gpus(cli.gpu_model.as_deref())?;
    if cli.discover {
        println!("{}", serde_json::to_string_pretty(&gpus)?);
        return Ok(());
    }
    let name = match &cli.name {
        Some(name) => name.clone(),
        None => std::fs::read_to_string("/etc/hostname")
            .context("reading the host name; pass --name")?
            .trim()
            .to_lowercase(),
    };
    let client = Client::new(&cli.server)?;
    let (cpu_milli, memory_mib) = machine_size();
    let registration = Registration {
        name: &name,
        rack: &cli.rack,
        labels: &cli.labels,
        cpu_milli,
        memory_mib,
        gpus: &gpus,
    };
    let saved_path = cli.state_dir.join("credential.json");
    let mut credential = match std::fs::read_to_string(&saved_path) {
        Ok(text) => serde_json::from_str::<Saved>(&text)?.credential,
        Err(_) => register(&client, &cli, &registration, &saved_path).await?,
    };
    tracing::info!(node = %name, gpus = gpus.len(), "agent running");
    let mut supervisor = Supervisor::new(
        cli.workload_command.clone(),
        Duration::from_secs_f64(cli.grace_seconds.max(0.0)),
        &cli.state_dir,
    )
    .with_context(|| format!("preparing {}", cli.state_dir.display()))?;
    let running = supervisor.adopt();
    if running > 0 {
        tracing::info!(running, "took back workloads from before the restart");
    }
    let mut unsent: Vec<Report> = Vec::new();
    let mut unsent_output: Vec<(Uuid, Vec<Line>)> = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_millis(cli.interval_ms.max(50)));
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = terminate.recv() => break,
        }
        let result = step(
            &client,
            &credential,
            &source,
            &mut supervisor,
            &mut unsent,
            &mut unsent_output,
        )
        .await;
        match result {
            Ok(()) => {}
            Err(CallError::Unauthorized) => {
                tracing::warn!("the control plane refused the node credential; registering again");
                credential = register(&client, &cli, &registration, &saved_path).await?;
            }
            // The control plane may be restarting: work keeps running and the
            // agent reconciles once it answers again.
            Err(CallError::Other(error)) => tracing::warn!(%error, "control plane unreachable"),
        }
    }
    tracing::info!("agent stopping; workloads keep running");
    Ok(())
}

async fn register(
    client: &Client,
    cli: &Cli,
    registration: &Registration<'_>,
    saved_path: &std::path::Path,
) -> anyhow::Result<String> {
    let Some(token) = &cli.join_token else {
        bail!("this node is not registered yet: pass --join-token from an operator");
    };
    let registered = client.register(token, registration).await?;
    std::fs::create_dir_all(&cli.state_dir)
        .with_context(|| format!("creating {}", cli.state_dir.display()))?;
    let saved = Saved {
        node_id: registered.node_id,
        credential: registered.credential.clone(),
    };
    std::fs::write(saved_path, serde_json::to_vec(&saved)?)
        .with_context(|| format!("writing {}", saved_path.display()))?;
    tracing::info!(node_id = %registered.node_id, "registered");
    Ok(registered.credential)
}

/// One round: heartbeat, fetch assignments, reconcile, ship output, report.
async fn step(
    client: &Client,
    credential: &str,
    source: &Source,
    supervisor: &mut Supervisor,
    unsent: &mut Vec<Report>,
    unsent_output: &mut Vec<(Uuid, Vec<Line>)>,
) -> Result<(), CallError> {
    client
        .heartbeat(credential, &source.samples(&supervisor.busy_gpus()))
        .await?;
    let assignments = client.assignments(credential).await?;
    let mut events = supervisor.reconcile(&assignments);
    events.extend(supervisor.poll());
    // Output goes first: once an exit is reported the work is released and
    // its late lines would no longer be taken.
    let ended: Vec<Uuid> = events.iter().filter_map(Event::ended).collect();
    unsent_output.extend(supervisor.output(&ended));
    unsent.extend(events.into_iter().map(report_of));
    // What cannot be sent now (the control plane away) waits for a later
    // round, in order, before any report.
    while let Some((order_id, lines)) = unsent_output.first_mut() {
        while !lines.is_empty() {
            let batch = upload_batch(lines);
            client
                .send_output(credential, *order_id, &lines[..batch])
                .await?;
            lines.drain(..batch);
        }
        unsent_output.remove(0);
    }
    while let Some(report) = unsent.first() {
        client.report(credential, report).await?;
        unsent.remove(0);
    }
    Ok(())
}

/// How many of `lines` go in one upload: at most 500, and under 128 KiB,
/// well inside the control plane's body limit.
fn upload_batch(lines: &[Line]) -> usize {
    const LINES: usize = 500;
    const BYTES: usize = 128 * 1024;
    let mut bytes = 0;
    lines
        .iter()
        .take(LINES)
        .take_while(|l| {
            bytes += l.line.len() + 32;
            bytes <= BYTES
        })
        .count()
        .max(1)
}

fn report_of(event: Event) -> Report {
    let (order_id, state, exit_code, message) = match event {
        Event::Running(id) => (id, WorkloadState::Running, None, None),
        Event::Exited(id, code) => (id, WorkloadState::Exited, code, None),
        Event::Stopped(id) => (id, WorkloadState::Stopped, None, None),
        Event::Failed(id, why) => (id, WorkloadState::Failed, None, Some(why)),
    };
    Report {
        order_id,
        state,
        exit_code,
        message,
    }
}

/// CPU (milli-cores) and memory (MiB) of this machine.
fn machine_size() -> (i64, i64) {
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let memory_kib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse::<i64>().ok())
        })
        .unwrap_or(1024 * 1024);
    (i64::try_from(cpus).unwrap_or(1) * 1000, memory_kib / 1024)
}
