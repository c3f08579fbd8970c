//! `gantry-agent`: joins a GPU server to a Gantry control plane and runs
//! the work the scheduler assigns to it.

use std::collections::HashMap;
use std::io::Write;
use std::ops::RangeInclusive;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use gantry_agent::cgroup::{Cgroups, Limits};
use gantry_agent::client::{CallError, Client, Delivered, Registration, Report, WorkloadState};
use gantry_agent::devices::GpuDevices;
use gantry_agent::discovery::{Gpu, Source};
use gantry_agent::exporter;
use gantry_agent::images::Images;
use gantry_agent::output::Line;
use gantry_agent::root::Roots;
use gantry_agent::runtime::oci::Oci;
use gantry_agent::runtime::process::Process;
use gantry_agent::runtime::sandbox::{Node, Sandbox, Tools};
use gantry_agent::runtime::vm::{self, Vm};
use gantry_agent::runtime::{Access, Runtime, RuntimeKind};
use gantry_agent::supervisor::{Event, ImageSource, Slots, Supervisor};
use gantry_agent::volumes::Volumes;
use serde::{Deserialize, Serialize};
use tracing_subscriber::EnvFilter;
use uuid::Uuid;

#[derive(Parser)]
#[command(name = "gantry-agent", version, about = "Gantry's node agent")]
struct Cli {
    /// The control plane, such as http://gantry.internal:8080.
    #[arg(long, env = "GANTRY_SERVER")]
    server: String,
    /// A file holding a join token from an operator, needed until the node
    /// is registered (`GANTRY_JOIN_TOKEN` may hold the token instead). The
    /// token is never taken on the command line, where every local user
    /// could read it, and is forgotten once the node is registered.
    #[arg(long, env = "GANTRY_JOIN_TOKEN_FILE")]
    join_token_file: Option<PathBuf>,
    /// This node's name; the host name when absent.
    #[arg(long, env = "GANTRY_NODE_NAME")]
    name: Option<String>,
    #[arg(long, default_value = "")]
    rack: String,
    #[arg(long = "label")]
    labels: Vec<String>,
    /// Where the node credential, the workload ledger, output and scratch
    /// are kept across restarts; readable by the agent's user only.
    #[arg(
        long,
        env = "GANTRY_AGENT_STATE_DIR",
        default_value = "/var/lib/gantry-agent"
    )]
    state_dir: PathBuf,
    /// How workloads are isolated: `sandbox` (bubblewrap namespaces in a
    /// user namespace of their own, their image as a sized root, their GPUs
    /// only, cgroup limits), `oci` (the same as podman containers with CDI
    /// GPUs), `vm` (a virtual machine per instance, QEMU with KVM, GPUs
    /// passed through) or `process` (no isolation: trusted single-tenant
    /// nodes).
    #[arg(long, value_enum, env = "GANTRY_RUNTIME", default_value = "sandbox")]
    runtime: RuntimeKind,
    /// The node's ids workloads' user namespaces map to (FIRST-LAST), in
    /// ranges of 65,536, one per live workload (the default: 256).
    #[arg(long, default_value = "200000-16977215", value_parser = range::<u32>)]
    uid_range: RangeInclusive<u32>,
    /// Node ports for instances' SSH servers and exposed ports (FIRST-LAST).
    #[arg(long, default_value = "42000-42999", value_parser = range::<u16>)]
    port_range: RangeInclusive<u16>,
    /// The most processes one workload may have.
    #[arg(long, default_value_t = 4096)]
    pids_max: u64,
    /// The address tenants reach this node at; the node name when absent.
    #[arg(long, env = "GANTRY_PUBLIC_HOST")]
    public_host: Option<String>,
    /// Where pulled images' layers are kept (the agent's own podman
    /// store); `<state-dir>/images` when absent. Agents on one machine may
    /// share it.
    #[arg(long)]
    image_dir: Option<PathBuf>,
    /// The most the image store may hold, in GiB: a file system of this
    /// size is made for it (its space taken at once), so no pull can fill
    /// the node's disk. 0 keeps the image directory as it is (give it a
    /// disk of its own then).
    #[arg(long, default_value_t = 100)]
    image_store_gib: u64,
    /// What workloads that name no image run.
    #[arg(
        long,
        env = "GANTRY_DEFAULT_IMAGE",
        default_value = "docker.io/library/debian:bookworm"
    )]
    default_image: String,
    /// A registry (host or host:port) pulled over plain HTTP or without
    /// checking its certificate; repeat for more.
    #[arg(long = "insecure-registry")]
    insecure_registries: Vec<String>,
    /// The disk, in GiB, of workloads whose instance type sells none.
    #[arg(long, default_value_t = 10)]
    default_disk_gib: u64,
    /// Free space, in GiB, the agent keeps on the node: a workload's disk
    /// that would eat into it is refused.
    #[arg(long, default_value_t = 10)]
    disk_reserve_gib: u64,
    /// How often, in seconds, the files of a shared volume are measured
    /// (a walk of its tree on the shared file system).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    shared_measure_seconds: u64,
    /// Where lxcfs is mounted: workloads' `/proc/meminfo`, `/proc/cpuinfo`
    /// and friends come from there, so they say the instance type's size.
    #[arg(long, default_value = "/var/lib/lxcfs")]
    lxcfs_dir: PathBuf,
    /// The node's address on the data centre's network and that network's
    /// prefix (`10.0.0.11/16`): organizations' private networks reach
    /// other nodes from it (VXLAN, UDP port 4789), and workloads reach
    /// nothing of that network but their own private network. Unset, the
    /// node carries no private networks: a gang's workloads share the
    /// node's network.
    #[arg(long)]
    fabric_address: Option<ipnet::Ipv4Net>,
    /// The MTU of workloads' private interfaces: the fabric's less the 50
    /// bytes of VXLAN's headers.
    #[arg(long, default_value_t = 1450)]
    fabric_mtu: u32,
    /// A group no one else on the node uses: the user-mode NAT that gives
    /// workloads the internet runs as it, so the firewall can keep it off
    /// the data centre's network.
    #[arg(long, default_value_t = 199_999)]
    helper_gid: u32,
    /// Keeps workloads on private networks off the internet: their
    /// user-mode NAT opens no connection at all (exposed ports and SSH
    /// still come in). Their private network's names still resolve.
    #[arg(long)]
    no_egress: bool,
    /// Where VM images are (`vm`): `NAME.qcow2` for the catalog's image
    /// `NAME`, placed by the operator, readable by all.
    #[arg(long, default_value = "/var/lib/gantry-agent/vm-images")]
    vm_image_dir: PathBuf,
    /// What VM instances that name no image boot (`vm`).
    #[arg(long, default_value = "debian-12")]
    default_vm_image: String,
    /// How VMs run (`vm`): `kvm`, or `tcg` (QEMU's emulation, many times
    /// slower) where KVM cannot boot a stock kernel.
    #[arg(long, value_enum, default_value = "kvm")]
    vm_accel: vm::Accel,
    /// QEMU's CPU model for VMs (`vm`): `host` gives guests the node's
    /// (`max` with `--vm-accel tcg`).
    #[arg(long, default_value = "host")]
    vm_cpu: String,
    /// How long a VM has to answer on SSH before its order fails (`vm`).
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=3600))]
    vm_boot_seconds: u64,
    /// The OCI runtime podman runs containers with (`oci`): runc works
    /// with cgroup v1, v2 and hybrid layouts.
    #[arg(long, default_value = "runc")]
    podman_runtime: String,
    /// Where the oci runtime writes the CDI spec of this node's GPUs.
    #[arg(long, default_value = "/etc/cdi")]
    cdi_dir: PathBuf,
    /// The cgroup file system.
    #[arg(long, default_value = "/sys/fs/cgroup")]
    cgroup_root: PathBuf,
    /// Pretend to have GPUs (COUNTxMODEL, such as 8xH100-SXM-80GB) on a
    /// machine without an NVIDIA driver, for development.
    #[arg(long)]
    simulate_gpus: Option<String>,
    /// With simulated GPUs: report this many CPU thousandths instead of the
    /// machine's, so that many emulated servers on one machine each have a
    /// server's size.
    #[arg(long, requires = "simulate_gpus")]
    simulate_cpu_milli: Option<i64>,
    /// With simulated GPUs: report this much memory (MiB) instead of the
    /// machine's.
    #[arg(long, requires = "simulate_gpus")]
    simulate_memory_mib: Option<i64>,
    /// With simulated GPUs: pretend to have this many RDMA devices
    /// (InfiniBand or RoCE), as stand-in device nodes.
    #[arg(long, requires = "simulate_gpus", default_value_t = 0)]
    simulate_rdma: usize,
    /// Report every GPU as this catalog model instead of NVML's name.
    #[arg(long)]
    gpu_model: Option<String>,
    /// Print the discovered GPUs as JSON and exit.
    #[arg(long)]
    discover: bool,
    /// What an instance runs (by `sh -c`), with `CUDA_VISIBLE_DEVICES` and
    /// `GANTRY_ORDER_ID` set; a job runs its own command.
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
    /// Serve the GPUs' telemetry for Prometheus at `/metrics` on this
    /// address (DCGM's port is 9400). Its labels name the tenants holding
    /// the GPUs: bind it to an interface only Prometheus reaches.
    #[arg(long, env = "GANTRY_AGENT_METRICS_LISTEN")]
    metrics_listen: Option<std::net::SocketAddr>,
}

#[derive(Serialize, Deserialize)]
struct Saved {
    node_id: uuid::Uuid,
    credential: String,
}

/// `FIRST-LAST` as an inclusive range.
fn range<T: std::str::FromStr + PartialOrd>(text: &str) -> Result<RangeInclusive<T>, String> {
    let (first, last) = text.split_once('-').ok_or("expected FIRST-LAST")?;
    let parse = |t: &str| {
        t.trim()
            .parse::<T>()
            .map_err(|_| format!("{t:?} is not a number"))
    };
    let (first, last) = (parse(first)?, parse(last)?);
    if first > last {
        return Err("FIRST must not be above LAST".into());
    }
    Ok(first..=last)
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let join_token = join_token(&cli)?;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run(cli, join_token))
}

/// The join token from its file or the environment, taken out of the
/// environment before any thread or workload could inherit it.
fn join_token(cli: &Cli) -> anyhow::Result<Option<String>> {
    let from_env = std::env::var("GANTRY_JOIN_TOKEN").ok();
    // SAFETY: called from main before the async runtime starts any thread.
    unsafe { std::env::remove_var("GANTRY_JOIN_TOKEN") };
    match &cli.join_token_file {
        Some(path) => Ok(Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("reading the join token from {}", path.display()))?
                .trim()
                .to_owned(),
        )),
        None => Ok(from_env.map(|t| t.trim().to_owned())),
    }
}

/// The runtime `--runtime` names and where its images come from, or why
/// this node cannot have it.
/// What isolates workloads on this node: the runtime, and where it has
/// them, their images and the node's volumes.
struct Opened {
    runtime: Box<dyn Runtime>,
    images: Option<ImageSource>,
    volumes: Option<Volumes>,
}

fn open_runtime(cli: &Cli, source: &Source, gpus: &[Gpu]) -> anyhow::Result<Opened> {
    if cli.runtime == RuntimeKind::Process {
        tracing::warn!(
            "runtime `process`: workloads run unisolated as the agent's user; \
             use it only on trusted single-tenant nodes"
        );
        return Ok(Opened {
            runtime: Box::new(Process::new(&cli.state_dir)?),
            images: None,
            volumes: None,
        });
    }
    let tools = match cli.runtime {
        RuntimeKind::Sandbox => Some(Tools::find().map_err(anyhow::Error::msg)?),
        _ => None,
    };
    let vm_tools = match cli.runtime {
        RuntimeKind::Vm => Some(vm::Tools::find(cli.vm_accel).map_err(anyhow::Error::msg)?),
        _ => None,
    };
    let state_dir = Node::check_state_dir(&cli.state_dir).map_err(anyhow::Error::msg)?;
    let roots =
        Roots::new(&state_dir.join("roots"), cli.disk_reserve_gib).map_err(anyhow::Error::msg)?;
    let volumes = Volumes::new(
        &state_dir.join("volumes"),
        roots.disks().clone(),
        cli.disk_reserve_gib,
        Duration::from_secs(cli.shared_measure_seconds),
    )
    .map_err(anyhow::Error::msg)?;
    let devices = match source {
        Source::Simulated(_) => GpuDevices::simulated(&state_dir, gpus)
            .context("making stand-in device nodes for the simulated GPUs")?,
        Source::Nvml(_) => GpuDevices::real(source.minor_numbers(), gpus),
    };
    let lxcfs = gantry_agent::view::lxcfs_at(&cli.lxcfs_dir);
    if lxcfs.is_none() {
        tracing::warn!(
            dir = %cli.lxcfs_dir.display(),
            "lxcfs is not mounted: workloads read the node's memory and CPUs in /proc \
             (install and start the Debian package lxcfs)"
        );
    }
    // Simulated GPUs need no driver: the node's own, if any, stays out.
    let driver = match source {
        Source::Simulated(_) => Vec::new(),
        Source::Nvml(_) => gantry_agent::driver::discover(),
    };
    tracing::info!(files = driver.len(), "NVIDIA driver files for workloads");
    let rdma = match source {
        Source::Simulated(_) => gantry_agent::rdma::Rdma::simulated(&state_dir, cli.simulate_rdma)
            .context("making stand-in RDMA devices")?,
        Source::Nvml(_) => gantry_agent::rdma::Rdma::discover(
            std::path::Path::new(gantry_agent::rdma::SYS_VERBS),
            std::path::Path::new(gantry_agent::rdma::DEV),
        ),
    };
    if !rdma.is_empty() {
        tracing::info!(devices = %rdma.hca_list(), "RDMA devices for workloads that hold the whole node");
    }
    let node = Node {
        rdma,
        driver,
        state_dir: state_dir.clone(),
        roots,
        devices,
        cgroups: Cgroups::detect(&cli.cgroup_root).map_err(anyhow::Error::msg)?,
        pids_max: cli.pids_max,
        lxcfs,
    };
    if let Some(vm_tools) = vm_tools {
        let settings = vm::Settings {
            image_dir: std::path::absolute(&cli.vm_image_dir)?,
            default_image: cli.default_vm_image.clone(),
            accel: cli.vm_accel,
            cpu: cli.vm_cpu.clone(),
            boot: Duration::from_secs(cli.vm_boot_seconds),
            disk_reserve: cli.disk_reserve_gib << 30,
            gpu_addresses: source.pci_addresses(),
        };
        return Ok(Opened {
            runtime: Box::new(Vm::new(vm_tools, node, settings)),
            images: None,
            volumes: None,
        });
    }
    let images = open_images(cli, &node.state_dir, &node.roots)?;
    let runtime: Box<dyn Runtime> = match tools {
        None => Box::new(
            Oci::new(
                node,
                images.clone(),
                &cli.podman_runtime,
                &cli.cdi_dir,
                gpus,
            )
            .map_err(anyhow::Error::msg)?,
        ),
        Some(tools) => {
            if tools.slirp4netns.is_none() {
                tracing::warn!(
                    "no slirp4netns: workloads share the node's network \
                     (install the Debian package slirp4netns)"
                );
            }
            Box::new(Sandbox::new(tools, node))
        }
    };
    if !runtime.offers_ssh() {
        tracing::warn!(
            "no sshd: instances get no SSH access (install the Debian package openssh-server)"
        );
    }
    let images = ImageSource {
        images,
        default: cli.default_image.clone(),
    };
    Ok(Opened {
        runtime,
        images: Some(images),
        volumes: Some(volumes),
    })
}

/// The agent's image store, on a file system of its own size when
/// `--image-store-gib` asks for one.
fn open_images(cli: &Cli, state_dir: &Path, roots: &Roots) -> anyhow::Result<Images> {
    let dir = cli
        .image_dir
        .clone()
        .unwrap_or_else(|| state_dir.join("images"));
    let dir = std::path::absolute(&dir)?;
    if cli.image_store_gib > 0 && !gantry_agent::mounts::is_mount_point(&dir) {
        let file = dir.with_extension("img");
        let disks = roots.disks();
        disks
            .make(&file, cli.image_store_gib << 30, 0)
            .and_then(|()| disks.mount(&file, &dir))
            .map_err(|e| anyhow::anyhow!("making the image store at {}: {e}", dir.display()))?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
    }
    // Podman's locks live on a file system a reboot empties, one per store.
    let tag = {
        use sha2::Digest;
        let hash = sha2::Sha256::digest(dir.as_os_str().as_encoded_bytes());
        hash[..4]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let runroot = Path::new("/run/gantry-agent").join(format!("podman-{tag}"));
    Images::new(
        &dir,
        &runroot,
        &state_dir.join("auth"),
        cli.insecure_registries.clone(),
    )
    .map_err(anyhow::Error::msg)
}

async fn run(cli: Cli, mut join_token: Option<String>) -> anyhow::Result<()> {
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
    let public_host = cli.public_host.clone().unwrap_or_else(|| name.clone());
    std::fs::create_dir_all(&cli.state_dir)
        .and_then(|()| {
            std::fs::set_permissions(&cli.state_dir, std::fs::Permissions::from_mode(0o700))
        })
        .with_context(|| format!("preparing {}", cli.state_dir.display()))?;
    let Opened {
        runtime,
        images,
        volumes,
    } = open_runtime(&cli, &source, &gpus)?;
    if let Some(address) = cli.metrics_listen {
        exporter::serve(address, Duration::from_millis(cli.interval_ms.max(50)))?;
    }
    let client = Client::new(&cli.server)?;
    let (machine_cpu, machine_memory) = machine_size();
    let cpu_milli = cli.simulate_cpu_milli.unwrap_or(machine_cpu);
    let memory_mib = cli.simulate_memory_mib.unwrap_or(machine_memory);
    let registration = Registration {
        name: &name,
        rack: &cli.rack,
        labels: &cli.labels,
        cpu_milli,
        memory_mib,
        gpus: &gpus,
        runtime: runtime.kind().as_str(),
    };
    let saved_path = cli.state_dir.join("credential.json");
    let mut credential = match std::fs::read_to_string(&saved_path) {
        Ok(text) => serde_json::from_str::<Saved>(&text)?.credential,
        Err(_) => {
            let Some(token) = join_token.take() else {
                bail!(
                    "this node is not registered yet: give the agent a join token from an \
                     operator in a file (--join-token-file) or in GANTRY_JOIN_TOKEN"
                );
            };
            register(&client, &token, &registration, &saved_path).await?
        }
    };
    // Registered: the token is not kept.
    drop(join_token);
    tracing::info!(node = %name, gpus = gpus.len(), runtime = runtime.kind().as_str(), "agent running");
    let slots = Slots {
        uids: cli.uid_range.clone(),
        ports: cli.port_range.clone(),
        cpus: gantry_agent::cpus::available(),
        default_disk: cli.default_disk_gib.max(1) << 30,
        limits: Limits {
            cpu_milli: u64::try_from(cpu_milli).unwrap_or(1000),
            memory_mib: u64::try_from(memory_mib).unwrap_or(1024),
            pids: cli.pids_max,
        },
    };
    let mut supervisor = Supervisor::new(
        runtime,
        images,
        cli.workload_command.clone(),
        Duration::from_secs_f64(cli.grace_seconds.max(0.0)),
        &cli.state_dir,
        slots,
    )
    .with_context(|| format!("preparing {}", cli.state_dir.display()))?;
    if let Some(volumes) = volumes {
        supervisor.set_volumes(volumes);
    }
    if let Some(address) = cli.fabric_address {
        let fabric = gantry_agent::fabric::Fabric::new(gantry_agent::fabric::FabricConfig {
            address,
            mtu: cli.fabric_mtu,
            helper_gid: cli.helper_gid,
            egress: !cli.no_egress,
        })
        .map_err(|why| anyhow::anyhow!("setting up the fabric: {why}"))?;
        supervisor.set_fabric(fabric);
        tracing::info!(%address, "carrying private networks");
    }
    let running = supervisor.adopt();
    if running > 0 {
        tracing::info!(running, "took back workloads from before the restart");
    }
    let mut round = Round {
        fabric_address: cli.fabric_address.map(|a| a.addr()),
        client: &client,
        source: &source,
        public_host: &public_host,
        exported_as: cli.metrics_listen.map(|_| name.as_str()),
        holders: HashMap::new(),
        unsent: Vec::new(),
        unsent_output: Vec::new(),
        delivered: Arc::default(),
    };
    let mut exits = tokio::time::interval(EXIT_CHECK);
    let mut unreachable = false;
    let mut tick = tokio::time::interval(Duration::from_millis(cli.interval_ms.max(50)));
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let (current_credential, watched_credential) = tokio::sync::watch::channel(credential.clone());
    let changed = Arc::new(tokio::sync::Notify::new());
    let watcher = tokio::spawn(watch_assignments(
        client.clone(),
        watched_credential,
        round.delivered.clone(),
        changed.clone(),
    ));
    loop {
        // Only ticks heartbeat; rounds that look at the assignments take
        // the long-poll's answer while no report has left since it was
        // asked for, and fetch them afresh otherwise.
        let why = tokio::select! {
            _ = tick.tick() => Why::Tick,
            () = changed.notified() => Why::Changed,
            // A workload that ended is reported at once, not at the next
            // tick; while the control plane is away, ticks retry alone.
            _ = exits.tick() => {
                if unreachable || !supervisor.any_news() {
                    continue;
                }
                Why::Ended
            }
            _ = terminate.recv() => break,
        };
        let stepped = round.step(&credential, &mut supervisor, why).await;
        unreachable = matches!(stepped, Err(CallError::Other(_)));
        match stepped {
            Ok(None) => {}
            Ok(Some(rotated)) => {
                save(&saved_path, rotated.node_id, &rotated.credential)?;
                credential = rotated.credential;
                current_credential.send_replace(credential.clone());
                tracing::info!("node credential rotated");
            }
            Err(CallError::Unauthorized) => {
                std::fs::remove_file(&saved_path).ok();
                bail!(
                    "the control plane refused this node's credential (revoked by an operator?); \
                     workloads keep running: start the agent again with a join token issued for \
                     node {name}"
                );
            }
            // The control plane may be restarting: work keeps running and the
            // agent reconciles once it answers again.
            Err(CallError::Other(error)) => tracing::warn!(%error, "control plane unreachable"),
        }
    }
    watcher.abort();
    tracing::info!("agent stopping; workloads keep running");
    Ok(())
}

/// How often the agent looks for workloads that ended between rounds: a
/// `waitpid` per workload, cheap enough to keep exit-to-report short.
const EXIT_CHECK: Duration = Duration::from_millis(20);

/// The most reports one call carries, as the control plane takes them.
const REPORTS_PER_CALL: usize = 256;

/// How long one wait for new assignments lasts: under the control plane's
/// 20 s bound. Every answer is a read of the node's assignments, so a
/// fleet's idle waits cost its size over this per second.
const ASSIGNMENT_WAIT: Duration = Duration::from_secs(18);
/// How long the watch rests after the control plane did not answer.
const WATCH_RETRY: Duration = Duration::from_secs(8);

/// Waits on the control plane for this node's assignments to change and
/// wakes the agent's round the moment they do, with the answer kept for it,
/// so a start or a stop waits for neither the next tick nor another fetch.
/// Rounds still run on every tick, which is all there is with a control
/// plane that cannot wait.
async fn watch_assignments(
    client: Client,
    credential: tokio::sync::watch::Receiver<String>,
    delivered: Arc<Mutex<Delivered>>,
    changed: Arc<tokio::sync::Notify>,
) {
    let mut version: Option<String> = None;
    loop {
        let current = credential.borrow().clone();
        let epoch = lock(&delivered).epoch();
        match client
            .assignments_changed(&current, version.as_deref(), ASSIGNMENT_WAIT)
            .await
        {
            Ok(answer) => {
                let Some(next) = answer.version().map(str::to_owned) else {
                    // Nothing to wait on: look again a little later.
                    tokio::time::sleep(WATCH_RETRY).await;
                    continue;
                };
                lock(&delivered).offer(epoch, answer);
                if version.as_ref() != Some(&next) {
                    version = Some(next);
                    changed.notify_one();
                }
            }
            // The control plane away or refusing (the round reports that):
            // fetch afresh, and look again a little later.
            Err(_) => {
                lock(&delivered).invalidate();
                tokio::time::sleep(WATCH_RETRY).await;
            }
        }
    }
}

/// The long-poll's kept answer; a poisoned lock still holds a usable one.
fn lock(delivered: &Mutex<Delivered>) -> std::sync::MutexGuard<'_, Delivered> {
    delivered
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

async fn register(
    client: &Client,
    token: &str,
    registration: &Registration<'_>,
    saved_path: &Path,
) -> anyhow::Result<String> {
    let registered = client.register(token, registration).await?;
    save(saved_path, registered.node_id, &registered.credential)?;
    tracing::info!(node_id = %registered.node_id, "registered");
    Ok(registered.credential)
}

/// Keeps the credential for the agent's user alone, replaced whole
/// through a rename.
fn save(path: &Path, node_id: Uuid, credential: &str) -> anyhow::Result<()> {
    let saved = Saved {
        node_id,
        credential: credential.to_owned(),
    };
    let next = path.with_extension("next");
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&next)
        .with_context(|| format!("writing {}", next.display()))?;
    file.write_all(&serde_json::to_vec(&saved)?)?;
    file.sync_all()?;
    std::fs::rename(&next, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// What started a round of the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Why {
    /// The regular tick: heartbeat, then everything else.
    Tick,
    /// The control plane says the assignments changed.
    Changed,
    /// A workload ended.
    Ended,
}

/// What one round of the agent needs, and what waits for the next.
struct Round<'a> {
    /// Told the control plane with every heartbeat.
    fabric_address: Option<std::net::Ipv4Addr>,
    client: &'a Client,
    source: &'a Source,
    public_host: &'a str,
    /// The node's name, when its telemetry is exported.
    exported_as: Option<&'a str>,
    /// Who held each GPU at the last look at the assignments.
    holders: HashMap<i32, exporter::Holder>,
    unsent: Vec<Report>,
    unsent_output: Vec<(Uuid, Vec<Line>)>,
    /// The long-poll's answer, shared with the watcher.
    delivered: Arc<Mutex<Delivered>>,
}

impl Round<'_> {
    /// Heartbeat (on ticks), fetch assignments and reconcile (unless only
    /// a workload ended), ship output, report; answers a new credential
    /// when the control plane asked for a rotation.
    async fn step(
        &mut self,
        credential: &str,
        supervisor: &mut Supervisor,
        why: Why,
    ) -> Result<Option<gantry_agent::client::Registered>, CallError> {
        let rotate = if why == Why::Tick {
            let samples = self.source.samples(&supervisor.busy_gpus());
            if let Some(node) = self.exported_as {
                exporter::record(node, &samples, &self.holders);
            }
            // Volumes a heartbeat reports may move on the control plane
            // (made, erased), so answers from before it are stale.
            let volumes = supervisor.volume_reports();
            let moving = volumes.as_ref().is_some_and(|v| !v.reports.is_empty());
            if moving {
                lock(&self.delivered).invalidate();
            }
            let beat = self
                .client
                .heartbeat(credential, &samples, self.fabric_address, volumes)
                .await;
            if moving {
                lock(&self.delivered).invalidate();
            }
            beat?.rotate_credential
        } else {
            false
        };
        // An end is reported before anything else: its GPUs are released
        // sooner, and the work it makes room for comes through the watch.
        let mut events = Vec::new();
        if why != Why::Ended {
            let kept = lock(&self.delivered).current();
            let wanted = match kept {
                Some(answer) => answer,
                None => self.client.assignments(credential).await?,
            };
            let assignments = wanted.assignments;
            self.holders = exporter::holders(&assignments);
            // Volumes first: a workload starting this round finds its own.
            if let Some(volumes) = &wanted.volumes {
                supervisor.sync_volumes(volumes, &assignments);
            }
            events = supervisor.reconcile(&assignments);
        }
        events.extend(supervisor.poll());
        // Output goes first: once an exit is reported the work is released and
        // its late lines would no longer be taken.
        let ended: Vec<Uuid> = events.iter().filter_map(Event::ended).collect();
        self.unsent_output.extend(supervisor.output(&ended));
        let kind = supervisor.runtime().kind();
        self.unsent.extend(
            events
                .into_iter()
                .map(|e| report_of(e, kind, self.public_host)),
        );
        // What cannot be sent now (the control plane away) waits for a later
        // round, in order, before any report.
        while let Some((order_id, lines)) = self.unsent_output.first_mut() {
            while !lines.is_empty() {
                let batch = upload_batch(lines);
                self.client
                    .send_output(credential, *order_id, &lines[..batch])
                    .await?;
                lines.drain(..batch);
            }
            self.unsent_output.remove(0);
        }
        while !self.unsent.is_empty() {
            let batch = self.unsent.len().min(REPORTS_PER_CALL);
            lock(&self.delivered).invalidate();
            let reported = self.client.report(credential, &self.unsent[..batch]).await;
            lock(&self.delivered).invalidate();
            reported?;
            self.unsent.drain(..batch);
        }
        if rotate {
            return Ok(Some(self.client.rotate_credential(credential).await?));
        }
        Ok(None)
    }
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

fn report_of(event: Event, runtime: RuntimeKind, host: &str) -> Report {
    let (order_id, state, exit_code, message, access) = match event {
        Event::Running(id, access) => (
            id,
            WorkloadState::Running,
            None,
            None,
            Some(access_of(&access, runtime, host)),
        ),
        Event::Exited(id, code, why) => (id, WorkloadState::Exited, code, why, None),
        Event::Stopped(id) => (id, WorkloadState::Stopped, None, None, None),
        Event::Failed(id, why) => (id, WorkloadState::Failed, None, Some(why), None),
    };
    Report {
        order_id,
        state,
        exit_code,
        message,
        access,
    }
}

/// How a tenant reaches the workload, as the control plane takes it.
fn access_of(access: &Access, runtime: RuntimeKind, host: &str) -> serde_json::Value {
    serde_json::json!({
        "runtime": runtime,
        "host": host,
        "ssh": access.ssh,
        "ports": access.ports,
    })
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
