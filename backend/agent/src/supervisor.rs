//! The workloads running on this node: each assignment to run has its
//! image pulled (in the background: the node goes on meanwhile), then
//! becomes a process group started through the node's runtime (which
//! decides what the workload can see and use), with `CUDA_VISIBLE_DEVICES`
//! set to exactly its GPUs, an id range, CPUs and node ports of its own; an
//! assignment to stop (or one that disappeared) gets SIGTERM for the whole
//! group, then SIGKILL when the grace period ends.
//!
//! Workloads outlive the agent: a ledger in the state directory names each
//! one's process group, so a restarted agent takes them back instead of
//! starting them a second time on the same GPUs, and a small shell wrapper
//! leaves each exit code in a file, so one that ended while the agent was
//! away is still reported with its code.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::Ipv4Addr;
use std::ops::RangeInclusive;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::process::{Child, Command};
use uuid::Uuid;

use crate::cgroup::Limits;
use crate::client::{Action, AssignedNetwork, Assignment};
use crate::images::{Image, Images, Pull};
use crate::output::{Line, Output};
use crate::runtime::{Access, Inside, Launch, PortMapping, Runtime, RuntimeKind};
use crate::userns::IDS_PER_WORKLOAD;
use crate::volumes::{NodeVolume, VolumeMount, VolumeStanding, Volumes};

/// What happened to a workload, for the control plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Started, reachable as `Access` says.
    Running(Uuid, Access),
    /// Ended by itself with this code; the reason when the runtime knows
    /// better than the code (out of memory).
    Exited(Uuid, Option<i32>, Option<String>),
    Stopped(Uuid),
    Failed(Uuid, String),
}

impl Event {
    /// The workload this event says has ended, if it says so.
    pub fn ended(&self) -> Option<Uuid> {
        match self {
            Self::Running(..) => None,
            Self::Exited(id, ..) | Self::Stopped(id) | Self::Failed(id, _) => Some(*id),
        }
    }
}

/// Runs the workload's program line (`$2…`) and writes its exit code to
/// `$1`. The wrapper catches SIGTERM instead of dying of it, so the
/// workload gets its whole grace period and the code is still written.
const WRAPPER: &str =
    r#"exit_path=$1; shift; trap : TERM; "$@"; code=$?; echo "$code" > "$exit_path"; exit "$code""#;

/// Where workloads' ids, CPUs and node ports come from, and their limits.
#[derive(Debug, Clone)]
pub struct Slots {
    /// Ids for isolated workloads, in ranges of 65,536, never two live
    /// workloads on one range.
    pub uids: RangeInclusive<u32>,
    /// Node ports for SSH servers and exposed ports.
    pub ports: RangeInclusive<u16>,
    /// The CPUs workloads run on.
    pub cpus: Vec<u32>,
    /// A workload's limits when its assignment names none.
    pub limits: Limits,
    /// Bytes of disk for instance types that sell none.
    pub default_disk: u64,
}

/// Where workloads' images come from.
#[derive(Debug, Clone)]
pub struct ImageSource {
    pub images: Images,
    /// What workloads that name no image run.
    pub default: String,
}

struct Workload {
    /// None for a workload taken back from an earlier run of the agent: not
    /// our child, so it is watched through its process group.
    child: Option<Child>,
    /// 0 when the group is gone: nothing may be signalled in its name.
    pgid: i32,
    /// The group leader's start time, which tells it from a later process
    /// that reuses the number.
    started: u64,
    gpus: Vec<u32>,
    /// The first id of its range.
    uid: u32,
    cpus: Vec<u32>,
    ports: Vec<u16>,
    /// The SSH keys last handed to its runtime.
    ssh_keys: Vec<String>,
    /// A helper of ours in its process group (its network), reaped when
    /// it ends.
    helper: Option<crate::network::Helper>,
    /// Its SSH server, reaped when it ends.
    ssh: Option<std::process::Child>,
    /// bubblewrap's info pipe, held open while the workload lives: its
    /// late writes must never meet a closed pipe.
    info: Option<std::fs::File>,
    /// When SIGKILL follows the SIGTERM already sent.
    kill_at: Option<Instant>,
    /// Stopped because its assignment vanished: nobody waits for a report.
    orphaned: bool,
    /// Which attempt of its order it is (`GANTRY_ATTEMPT`); unknown for
    /// one taken back after a restart.
    attempt: Option<String>,
    /// Its image's entrypoint and when it was started: an entrypoint that
    /// fails at once is named as the reason.
    entrypoint: Option<(String, Instant)>,
    /// Its place on its organization's private network.
    network: Option<AssignedNetwork>,
    /// The volumes it attaches: none of them is erased while it lives.
    volumes: Vec<Uuid>,
}

/// An end with a failing code this soon after the start is the
/// entrypoint's doing, not the workload's.
const AT_ONCE: Duration = Duration::from_secs(3);

impl Workload {
    /// Why a workload that ended with `code` did, when its image's
    /// entrypoint failed as soon as it started.
    fn entrypoint_failure(&self, code: Option<i32>) -> Option<String> {
        let (entrypoint, started) = self.entrypoint.as_ref()?;
        let code = code.filter(|c| *c != 0)?;
        (started.elapsed() < AT_ONCE).then(|| {
            format!(
                "the image's entrypoint ({entrypoint}) exited with code {code} as soon as it \
                 started: the image does not run commands it is given"
            )
        })
    }
}

fn attempt_of(assignment: &Assignment) -> Option<String> {
    assignment.env.get("GANTRY_ATTEMPT").cloned()
}

/// A workload spawned in this round, its network and SSH server still to
/// come up.
struct Started {
    id: Uuid,
    access: Access,
    network: Option<crate::network::PrivateNetwork>,
    /// Its place on its organization's private network, to attach once
    /// it runs.
    private: Option<AssignedNetwork>,
    inside: Option<Inside>,
    ssh: Option<crate::ssh::Server>,
}

/// An assignment to run whose image is being pulled.
struct Waiting {
    assignment: Assignment,
    pull: Pull,
}

/// A ledger entry: enough to find a workload's processes again, and to
/// tell them from unrelated ones that reuse the number after a reboot.
#[derive(Serialize, Deserialize)]
struct Record {
    pgid: i32,
    /// The group leader's start time in clock ticks since boot.
    started: u64,
    gpus: Vec<u32>,
    #[serde(default)]
    uid: u32,
    #[serde(default)]
    cpus: Vec<u32>,
    #[serde(default)]
    ports: Vec<u16>,
    #[serde(default)]
    network: Option<AssignedNetwork>,
    #[serde(default)]
    volumes: Vec<Uuid>,
}

pub struct Supervisor {
    runtime: Box<dyn Runtime>,
    /// None where the runtime runs no images (`process`).
    images: Option<ImageSource>,
    /// Assignments to run whose images are on their way.
    waiting: HashMap<Uuid, Waiting>,
    command: String,
    grace: Duration,
    state_dir: PathBuf,
    slots: Slots,
    workloads: HashMap<Uuid, Workload>,
    /// Ended workloads whose runtime could not tidy up yet.
    leftovers: Vec<Uuid>,
    /// Attempts that ended here while their assignment may still be listed
    /// (a copy of the assignments older than the exit report): never
    /// started twice.
    ended: HashSet<(Uuid, String)>,
    output: Output,
    /// The node's private networks, where it carries them.
    fabric: Option<crate::fabric::Fabric>,
    /// The node's local volumes, where its runtime can show them.
    volumes: Option<Volumes>,
    /// Started workloads that must answer on SSH before they count as
    /// running (VMs booting), with when they fail if they have not.
    booting: HashMap<Uuid, Booting>,
}

/// A started workload waiting to answer on SSH.
struct Booting {
    access: Access,
    port: u16,
    deadline: Instant,
}

/// Lines of a VM's console a failed boot's reason quotes, and at most how
/// many of their last characters (the control plane keeps 1,000 of a
/// reason).
const CONSOLE_LINES: usize = 12;
const CONSOLE_CHARS: usize = 800;

/// Whether an SSH server answers on the node's `port` (its banner).
fn ssh_answers(port: u16) -> bool {
    use std::io::Read;
    let address = std::net::SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let Ok(mut stream) = std::net::TcpStream::connect_timeout(&address, Duration::from_millis(200))
    else {
        return false;
    };
    stream
        .set_read_timeout(Some(Duration::from_millis(300)))
        .ok();
    let mut banner = [0u8; 4];
    stream.read_exact(&mut banner).is_ok() && &banner == b"SSH-"
}

impl Supervisor {
    /// `command` is what an instance runs (by `sh -c`); `state_dir` keeps
    /// the ledger and exit codes across agent restarts.
    pub fn new(
        runtime: Box<dyn Runtime>,
        images: Option<ImageSource>,
        command: String,
        grace: Duration,
        state_dir: &Path,
        slots: Slots,
    ) -> std::io::Result<Self> {
        std::fs::create_dir_all(state_dir.join("exits"))?;
        Ok(Self {
            runtime,
            images,
            waiting: HashMap::new(),
            command,
            grace,
            state_dir: state_dir.to_owned(),
            slots,
            workloads: HashMap::new(),
            leftovers: Vec::new(),
            ended: HashSet::new(),
            output: Output::new(state_dir)?,
            fabric: None,
            volumes: None,
            booting: HashMap::new(),
        })
    }

    /// Keeps local volumes for workloads to attach.
    pub fn set_volumes(&mut self, volumes: Volumes) {
        self.volumes = Some(volumes);
    }

    /// Brings the node's volumes in line with `wanted`: none is erased
    /// while a workload, or an assignment, still holds it, or while an
    /// ended workload's root is not yet tidied away.
    pub fn sync_volumes(&mut self, wanted: &[NodeVolume], assignments: &[Assignment]) {
        let Some(volumes) = self.volumes.as_mut() else {
            return;
        };
        let mut in_use: HashSet<Uuid> = assignments
            .iter()
            .flat_map(|a| a.volumes.iter().map(|v| v.volume_id))
            .chain(
                self.workloads
                    .values()
                    .flat_map(|w| w.volumes.iter().copied()),
            )
            .collect();
        if !self.leftovers.is_empty() {
            in_use.extend(wanted.iter().map(|v| v.volume_id));
        }
        volumes.reconcile(wanted, &in_use);
    }

    /// How the node's volumes stand and the room left for more, where it
    /// keeps them.
    pub fn volume_reports(&mut self) -> Option<VolumeStanding> {
        self.volumes.as_mut().map(Volumes::standing)
    }

    /// Where a workload sees each volume its assignment attaches.
    fn volume_mounts(&self, assignment: &Assignment) -> Result<Vec<VolumeMount>, String> {
        if assignment.volumes.is_empty() {
            return Ok(Vec::new());
        }
        let Some(volumes) = &self.volumes else {
            return Err(
                "this node runs workloads as plain processes and cannot attach volumes".into(),
            );
        };
        assignment
            .volumes
            .iter()
            .map(|a| {
                let (source, owner) = volumes
                    .source(a.volume_id)
                    .ok_or_else(|| format!("volume {} is not ready on this node", a.volume_id))?;
                Ok(VolumeMount {
                    source,
                    target: a.mount_path.clone(),
                    read_only: a.read_only,
                    owner,
                })
            })
            .collect()
    }

    /// Puts workloads with a private address on their networks (set
    /// before `adopt`, so those taken back keep their ports).
    pub fn set_fabric(&mut self, fabric: crate::fabric::Fabric) {
        self.fabric = Some(fabric);
    }

    pub fn runtime(&self) -> &dyn Runtime {
        self.runtime.as_ref()
    }

    /// Takes back the workloads an earlier run of the agent left behind;
    /// answers how many are still running. Those that ended meanwhile are
    /// reported by the next `poll`.
    pub fn adopt(&mut self) -> usize {
        let ledger: HashMap<Uuid, Record> = std::fs::read(self.ledger_path())
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .unwrap_or_default();
        let mut running = 0;
        for (id, record) in ledger {
            let alive = leader_running(record.pgid, record.started);
            running += usize::from(alive);
            tracing::info!(order = %id, pgid = record.pgid, alive, "took back workload");
            self.output.resume(id);
            if let (true, Some(fabric), Some(network)) =
                (alive, self.fabric.as_mut(), record.network.as_ref())
            {
                fabric.readopt(id, network);
            }
            if alive {
                self.runtime.adopted(id);
            }
            self.workloads.insert(
                id,
                Workload {
                    child: None,
                    pgid: if alive { record.pgid } else { 0 },
                    started: record.started,
                    gpus: record.gpus,
                    uid: record.uid,
                    cpus: record.cpus,
                    ports: record.ports,
                    ssh_keys: Vec::new(),
                    helper: None,
                    ssh: None,
                    info: None,
                    kill_at: None,
                    orphaned: false,
                    attempt: None,
                    entrypoint: None,
                    network: record.network,
                    volumes: record.volumes,
                },
            );
        }
        running
    }

    fn ledger_path(&self) -> PathBuf {
        self.state_dir.join("workloads.json")
    }

    fn exit_path(&self, id: Uuid) -> PathBuf {
        self.state_dir.join("exits").join(id.to_string())
    }

    /// Rewrites the ledger whole (through a rename, so a crash leaves the
    /// old one or the new one).
    fn save(&self) {
        let ledger: HashMap<Uuid, Record> = self
            .workloads
            .iter()
            .filter(|(_, w)| w.pgid > 0)
            .map(|(id, w)| {
                (
                    *id,
                    Record {
                        pgid: w.pgid,
                        started: w.started,
                        gpus: w.gpus.clone(),
                        uid: w.uid,
                        cpus: w.cpus.clone(),
                        ports: w.ports.clone(),
                        network: w.network.clone(),
                        volumes: w.volumes.clone(),
                    },
                )
            })
            .collect();
        let written = serde_json::to_vec(&ledger)
            .map_err(std::io::Error::other)
            .and_then(|bytes| {
                let next = self.state_dir.join("workloads.json.next");
                std::fs::write(&next, bytes)?;
                std::fs::rename(next, self.ledger_path())
            });
        if let Err(error) = written {
            tracing::warn!(%error, "cannot write the workload ledger");
        }
    }

    /// GPU indices held by running workloads.
    pub fn busy_gpus(&self) -> Vec<u32> {
        self.workloads
            .values()
            .flat_map(|w| w.gpus.iter().copied())
            .collect()
    }

    /// Output since the last call; `ended` workloads are read to the end.
    pub fn output(&mut self, ended: &[Uuid]) -> Vec<(Uuid, Vec<Line>)> {
        self.output.read(ended)
    }

    /// Brings the processes in line with the assignments.
    pub fn reconcile(&mut self, assignments: &[Assignment]) -> Vec<Event> {
        if let Some(fabric) = self.fabric.as_mut() {
            let mut wanted: HashMap<u32, BTreeSet<Ipv4Addr>> = HashMap::new();
            for network in assignments.iter().filter_map(|a| a.network.as_ref()) {
                wanted
                    .entry(network.vni)
                    .or_default()
                    .extend(network.peers.iter().copied());
            }
            fabric.sync(&wanted);
        }
        let mut events = Vec::new();
        let mut starting = Vec::new();
        for assignment in assignments {
            let id = assignment.order_id;
            match (assignment.action, self.workloads.get_mut(&id)) {
                (Action::Run, None) => {
                    let attempt = attempt_of(assignment).map(|a| (id, a));
                    if attempt.as_ref().is_some_and(|a| self.ended.contains(a)) {
                        continue;
                    }
                    // Its keys may change while its image comes.
                    if let Some(waiting) = self.waiting.get_mut(&id) {
                        waiting.assignment = assignment.clone();
                        continue;
                    }
                    if let Some(pull) = self.pull(assignment) {
                        self.waiting.insert(
                            id,
                            Waiting {
                                assignment: assignment.clone(),
                                pull,
                            },
                        );
                        continue;
                    }
                    match self.start(assignment, None) {
                        Ok(started) => starting.push(started),
                        Err(why) => {
                            self.ended.extend(attempt);
                            events.push(Event::Failed(id, why));
                        }
                    }
                }
                (Action::Stop, Some(_)) => self.terminate(id, false),
                (Action::Stop, None) => {
                    if self.waiting.remove(&id).is_some() {
                        self.output.forget(id);
                    }
                    events.push(Event::Stopped(id));
                }
                // Keys are handed over when they changed, not every round.
                (Action::Run, Some(workload)) => {
                    if workload.ssh_keys != assignment.ssh_keys {
                        self.runtime.authorize(id, &assignment.ssh_keys);
                        workload.ssh_keys.clone_from(&assignment.ssh_keys);
                    }
                    // Names too, as workloads of its network come and go.
                    if let (Some(now), Some(new)) =
                        (workload.network.as_mut(), assignment.network.as_ref())
                        && now.hosts != new.hosts
                    {
                        now.hosts.clone_from(&new.hosts);
                        self.runtime
                            .update_hosts(id, &crate::names::hosts_file(now));
                    }
                }
            }
        }
        let assigned: Vec<Uuid> = assignments.iter().map(|a| a.order_id).collect();
        self.ended.retain(|(id, _)| assigned.contains(id));
        let dropped: Vec<Uuid> = self
            .waiting
            .keys()
            .filter(|id| !assigned.contains(id))
            .copied()
            .collect();
        for id in dropped {
            self.waiting.remove(&id);
            self.output.forget(id);
        }
        let vanished: Vec<Uuid> = self
            .workloads
            .keys()
            .filter(|id| !assigned.contains(id))
            .copied()
            .collect();
        for id in vanished {
            self.terminate(id, true);
        }
        // Networks come up once every sandbox of the round is on its way,
        // so the sandboxes set themselves up side by side.
        for started in starting {
            events.extend(self.come_up(started));
        }
        events
    }

    /// Starts pulling the image of a workload that runs one; None where the
    /// runtime runs none.
    fn pull(&mut self, assignment: &Assignment) -> Option<Pull> {
        let source = self.images.as_ref()?;
        let (reference, login) = match &assignment.image {
            Some(image) => (image.reference.as_str(), image.login.as_ref()),
            None => (source.default.as_str(), None),
        };
        Some(source.images.pull(assignment.order_id, reference, login))
    }

    /// Notes how pulls go in their workloads' logs and starts those whose
    /// image is there; answers what became of them.
    fn start_pulled(&mut self) -> Vec<Event> {
        let mut events = Vec::new();
        let mut starting = Vec::new();
        let ids: Vec<Uuid> = self.waiting.keys().copied().collect();
        for id in ids {
            let Some(waiting) = self.waiting.get(&id) else {
                continue;
            };
            for line in waiting.pull.progress() {
                if let Err(error) = self.output.note(id, &line) {
                    tracing::warn!(order = %id, %error, "cannot log the pull");
                }
            }
            let Some(outcome) = waiting.pull.outcome() else {
                continue;
            };
            let Some(waiting) = self.waiting.remove(&id) else {
                continue;
            };
            let attempt = attempt_of(&waiting.assignment).map(|a| (id, a));
            let started = outcome.and_then(|image| self.start(&waiting.assignment, Some(&image)));
            match started {
                Ok(started) => starting.push(started),
                Err(why) => {
                    tracing::info!(order = %id, %why, "workload failed to start");
                    self.ended.extend(attempt);
                    events.push(Event::Failed(id, why));
                }
            }
        }
        for started in starting {
            events.extend(self.come_up(started));
        }
        events
    }

    /// Connects a started workload's network (when it has one of its own),
    /// releases it and starts its SSH server (when it has one); on failure
    /// nothing of it stays. A workload that ended by itself meanwhile says
    /// nothing here: its exit, which says why, is reported by `poll`.
    fn come_up(&mut self, started: Started) -> Option<Event> {
        let Started {
            id,
            access,
            network,
            private,
            inside,
            ssh,
        } = started;
        let Some(inside) = inside else {
            return Some(Event::Running(id, access));
        };
        let up = match inside {
            Inside::Info(fd) => {
                let mut info = std::fs::File::from(fd);
                let pid = crate::network::sandbox_pid(&mut info);
                if let Some(workload) = self.workloads.get_mut(&id) {
                    workload.info = Some(info);
                }
                pid
            }
            Inside::Runtime => self.wait_inside(id),
        };
        let Some(workload) = self.workloads.get_mut(&id) else {
            return Some(Event::Failed(
                id,
                "the workload vanished while it started".into(),
            ));
        };
        let up = up.and_then(|pid| {
            if let Some(network) = network {
                workload.helper = Some(network.bring_up(pid, workload.pgid)?);
            }
            if let (Some(private), Some(fabric)) = (&private, self.fabric.as_mut()) {
                fabric.attach(id, pid, private)?;
            }
            if let Some(ssh) = ssh {
                workload.ssh = Some(ssh.start(pid, workload.pgid)?);
            }
            Ok(())
        });
        match up {
            Ok(()) => self.booted_or_wait(id, access),
            Err(_) if ended_soon(workload) => None,
            Err(why) => {
                self.abandon(id);
                Some(Event::Failed(id, why))
            }
        }
    }

    /// Kills a started workload that never came up and forgets it; its
    /// runtime tidies up what is left.
    fn abandon(&mut self, id: Uuid) {
        let Some(workload) = self.workloads.remove(&id) else {
            return;
        };
        signal_group(workload.pgid, libc::SIGKILL);
        if let Some(helper) = workload.helper {
            helper.stop();
        }
        if let Some(fabric) = self.fabric.as_mut() {
            fabric.detach(id);
        }
        if let Some(attempt) = workload.attempt {
            self.ended.insert((id, attempt));
        }
        self.save();
        self.leftovers.push(id);
    }

    /// Running for a workload that is up once started; otherwise it waits
    /// (in `booting`) until it answers on SSH.
    fn booted_or_wait(&mut self, id: Uuid, access: Access) -> Option<Event> {
        let (Some(boot), Some(port)) = (
            self.runtime.boot_deadline(),
            access.ssh.as_ref().map(|s| s.port),
        ) else {
            return Some(Event::Running(id, access));
        };
        tracing::info!(order = %id, "booting");
        self.booting.insert(
            id,
            Booting {
                access,
                port,
                deadline: Instant::now() + boot,
            },
        );
        None
    }

    /// Running for the booting workloads that answer on SSH now; failed,
    /// with the last lines of their console, for those out of time.
    fn check_boots(&mut self) -> Vec<Event> {
        let mut events = Vec::new();
        let ids: Vec<Uuid> = self.booting.keys().copied().collect();
        for id in ids {
            let Some(booting) = self.booting.get(&id) else {
                continue;
            };
            if ssh_answers(booting.port) {
                if let Some(booting) = self.booting.remove(&id) {
                    tracing::info!(order = %id, "booted");
                    events.push(Event::Running(id, booting.access));
                }
                continue;
            }
            if Instant::now() < booting.deadline {
                continue;
            }
            self.booting.remove(&id);
            self.abandon(id);
            let console = self.output.last_lines(id, CONSOLE_LINES).join("\n");
            let skip = console.chars().count().saturating_sub(CONSOLE_CHARS);
            let console: String = console.chars().skip(skip).collect();
            events.push(Event::Failed(
                id,
                format!(
                    "the VM did not answer on SSH within {} s; the last lines of its \
                     console:\n{console}",
                    self.runtime.boot_deadline().unwrap_or_default().as_secs()
                ),
            ));
        }
        events
    }

    /// Waits (ten seconds at most: the agent's round waits with it) for the
    /// runtime to say which process is inside a workload it just started.
    fn wait_inside(&self, id: Uuid) -> Result<u32, String> {
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(pid) = self.runtime.inside(id) {
                return Ok(pid);
            }
            let gone = self
                .workloads
                .get(&id)
                .is_none_or(|w| !leader_running(w.pgid, w.started));
            if gone || Instant::now() > until {
                return Err("the workload ended before it was up; its output says why".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The first id of a range no live workload has.
    fn free_uid(&self) -> Option<u32> {
        let taken: HashSet<u32> = self.workloads.values().map(|w| w.uid).collect();
        let (first, last) = (*self.slots.uids.start(), *self.slots.uids.end());
        (0..)
            .map_while(|n: u32| {
                let start = first.checked_add(n.checked_mul(IDS_PER_WORKLOAD)?)?;
                let end = start.checked_add(IDS_PER_WORKLOAD - 1)?;
                (end <= last).then_some(start)
            })
            .find(|start| !taken.contains(start))
    }

    /// The range of ids starting at `owner` (an organization's on the
    /// region's shared file system), for a workload attaching its shared
    /// volumes: its files there carry those ids on every node. Refused
    /// where it overlaps the ranges this agent gives out, which would hand
    /// the organization's files to another workload.
    fn owner_range(&self, owner: u32) -> Result<u32, String> {
        let last = owner
            .checked_add(IDS_PER_WORKLOAD - 1)
            .ok_or("the shared file system's id range ends past the last id")?;
        let (first, end) = (*self.slots.uids.start(), *self.slots.uids.end());
        if owner <= end && first <= last {
            return Err(format!(
                "the shared file system's ids {owner}-{last} overlap this agent's --uid-range                  {first}-{end}: the operator must move one of them"
            ));
        }
        Ok(owner)
    }

    /// `count` node ports that no live workload holds and nothing else
    /// listens on.
    fn free_ports(&self, count: usize) -> Option<Vec<u16>> {
        let taken: HashSet<u16> = self
            .workloads
            .values()
            .flat_map(|w| w.ports.iter().copied())
            .collect();
        let free: Vec<u16> = self
            .slots
            .ports
            .clone()
            .filter(|p| !taken.contains(p))
            .filter(|p| std::net::TcpListener::bind(("0.0.0.0", *p)).is_ok())
            .take(count)
            .collect();
        (free.len() == count).then_some(free)
    }

    /// Spawns the workload (from `image`, where the runtime runs one),
    /// held before its command where its network must come up first;
    /// answers why it cannot start otherwise.
    fn start(&mut self, assignment: &Assignment, image: Option<&Image>) -> Result<Started, String> {
        let id = assignment.order_id;
        if let (RuntimeKind::Process, Some(named)) = (self.runtime.kind(), &assignment.image) {
            return Err(format!(
                "this node runs workloads as plain processes and cannot run image {}",
                named.reference
            ));
        }
        let isolated = self.runtime.kind() != RuntimeKind::Process;
        let volume_mounts = self.volume_mounts(assignment)?;
        let private = assignment
            .network
            .clone()
            .filter(|_| isolated && self.fabric.is_some());
        let uid = match volume_mounts.iter().find_map(|v| v.owner) {
            Some(owner) => self.owner_range(owner)?,
            None => match self.free_uid() {
                Some(uid) => uid,
                None if isolated => return Err("every id range of this node is taken".into()),
                None => 0,
            },
        };
        // An instance gets an SSH server where the runtime offers one.
        let ssh = assignment.command.is_none() && self.runtime.offers_ssh();
        let wanted = usize::from(ssh) + assignment.ports.len();
        let Some(mut node_ports) = self.free_ports(wanted) else {
            return Err("no free node port is left on this node".into());
        };
        let ports: Vec<u16> = node_ports.clone();
        let ssh_port = ssh.then(|| node_ports.remove(0));
        let mappings: Vec<PortMapping> = assignment
            .ports
            .iter()
            .zip(&node_ports)
            .map(|(port, node_port)| PortMapping {
                port: *port,
                node_port: *node_port,
            })
            .collect();
        let mut env = assignment.env.clone();
        for m in &mappings {
            env.insert(format!("GANTRY_PORT_{}", m.port), m.node_port.to_string());
        }
        let limits = assignment.limits.map_or(self.slots.limits, |l| Limits {
            cpu_milli: l.cpu_milli,
            memory_mib: l.memory_mib,
            pids: self.slots.limits.pids,
        });
        let disk = match assignment.limits.map_or(0, |l| l.disk_gib) {
            0 => self.slots.default_disk,
            gib => gib.saturating_mul(1 << 30),
        };
        let vcpus = usize::try_from(limits.cpu_milli.div_ceil(1000)).unwrap_or(1);
        let cpus = crate::cpus::choose(
            vcpus,
            &self.slots.cpus,
            self.workloads.values().flat_map(|w| w.cpus.iter().copied()),
        );
        let cpu_list = crate::cpus::list(&cpus);
        let hostname = private.as_ref().map_or_else(
            || crate::names::DEFAULT_HOSTNAME.to_owned(),
            crate::names::hostname,
        );
        let hosts = private.as_ref().map(crate::names::hosts_file);
        let launch = Launch {
            id,
            gpus: &assignment.gpu_ids,
            mig_devices: &assignment.mig_devices,
            env: &env,
            command: assignment.command.as_deref().unwrap_or(&self.command),
            working_dir: assignment.working_dir.as_deref(),
            limits,
            cpus: &cpu_list,
            disk,
            image,
            image_name: assignment
                .image
                .as_ref()
                .map(|i| i.name.as_deref().unwrap_or(i.reference.as_str())),
            uid,
            ssh_port,
            ssh_keys: &assignment.ssh_keys,
            ports: &mappings,
            // A gang gets a network of its own only where its ranks meet
            // on their private network; otherwise it shares the node's.
            private_network: assignment.node_count <= 1 || private.is_some(),
            hostname: &hostname,
            hosts: hosts.as_deref(),
            whole_gpus: assignment.gpu_milli >= 1000 && assignment.mig_devices.is_empty(),
            volumes: &volume_mounts,
        };
        let prepared = match self.runtime.prepare(&launch) {
            Ok(prepared) => prepared,
            Err(why) => {
                self.runtime.clean(id);
                return Err(why);
            }
        };
        let exit_path = self.exit_path(id);
        std::fs::remove_file(&exit_path).ok();
        let (stdout, stderr) = self
            .output
            .create(id)
            .map_err(|error| format!("could not capture output: {error}"))?;
        let joins = crate::cgroup::procs_cstrings(&prepared.cgroup_procs);
        let fds: Vec<(i32, i32)> = prepared
            .fds
            .iter()
            .map(|(fd, at)| (fd.as_raw_fd(), *at))
            .collect();
        // podman starts the user-mode NAT of `oci` workloads itself: it
        // runs in the helper group too.
        let gid = self
            .fabric
            .as_ref()
            .filter(|_| self.runtime.kind() == RuntimeKind::Oci)
            .map(crate::fabric::Fabric::helper_gid);
        let mut command = Command::new("/bin/sh");
        command
            .arg("-c")
            .arg(WRAPPER)
            .arg("gantry-workload")
            .arg(&exit_path)
            .args(&prepared.argv)
            .env_clear()
            .envs(prepared.env)
            .current_dir(&prepared.cwd)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .process_group(0);
        // SAFETY: between fork and exec the child only makes raw system
        // calls on memory prepared before the fork (no allocation, no lock).
        unsafe {
            command.pre_exec(move || {
                crate::cgroup::join(&joins)?;
                if let Some(gid) = gid
                    && (libc::setgroups(0, std::ptr::null()) < 0 || libc::setgid(gid) < 0)
                {
                    return Err(std::io::Error::last_os_error());
                }
                for (fd, at) in &fds {
                    if libc::dup2(*fd, *at) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let spawned = command.spawn();
        // The child has its copies; ours would keep its pipes open.
        drop(prepared.fds);
        let child = match spawned {
            Ok(child) => child,
            Err(error) => {
                self.runtime.clean(id);
                return Err(format!("could not start the workload: {error}"));
            }
        };
        let pgid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
        let started = leader(pgid).map_or(0, |(_, started)| started);
        tracing::info!(order = %id, gpus = ?assignment.gpu_ids, pgid, uid, "started workload");
        self.workloads.insert(
            id,
            Workload {
                child: Some(child),
                pgid,
                started,
                gpus: assignment.gpu_ids.clone(),
                uid,
                cpus,
                ports,
                ssh_keys: assignment.ssh_keys.clone(),
                helper: None,
                ssh: None,
                info: None,
                kill_at: None,
                orphaned: false,
                attempt: attempt_of(assignment),
                entrypoint: image
                    .filter(|i| !i.entrypoint.is_empty())
                    .map(|i| (i.entrypoint.join(" "), Instant::now())),
                network: private.clone(),
                volumes: assignment.volumes.iter().map(|v| v.volume_id).collect(),
            },
        );
        self.save();
        let helper_gid = self.fabric.as_ref().map(crate::fabric::Fabric::helper_gid);
        Ok(Started {
            id,
            access: prepared.access,
            network: prepared.network.map(|mut n| {
                n.gid = helper_gid;
                n
            }),
            // A private network is connected from inside the workload's
            // namespaces, which the runtime names once they exist.
            inside: prepared
                .inside
                .or_else(|| private.as_ref().map(|_| Inside::Runtime)),
            private,
            ssh: prepared.ssh,
        })
    }

    fn terminate(&mut self, id: Uuid, orphaned: bool) {
        let grace = self.grace;
        if let Some(workload) = self.workloads.get_mut(&id)
            && workload.kill_at.is_none()
        {
            if !self.runtime.stop(id) {
                signal_group(workload.pgid, libc::SIGTERM);
            }
            workload.kill_at = Some(Instant::now() + grace);
            workload.orphaned = orphaned;
            tracing::info!(order = %id, "stopping workload");
        }
    }

    /// Whether a workload has ended, or an image a workload waits for
    /// has been pulled, since the last `poll`, without taking the news: the
    /// round that reports it polls.
    pub fn any_news(&mut self) -> bool {
        self.waiting.values().any(|w| w.pull.outcome().is_some())
            || self
                .workloads
                .values_mut()
                .any(|workload| match &mut workload.child {
                    // The status stays with the child for `poll` to read again.
                    Some(child) => matches!(child.try_wait(), Ok(Some(_))),
                    None => !leader_running(workload.pgid, workload.started),
                })
    }

    /// Starts workloads whose images arrived, collects exits and kills
    /// groups whose grace period is over.
    pub fn poll(&mut self) -> Vec<Event> {
        let mut events = self.start_pulled();
        events.extend(self.check_boots());
        let mut done = Vec::new();
        for (id, workload) in &mut self.workloads {
            let ended = match &mut workload.child {
                Some(child) => match child.try_wait() {
                    Ok(ended) => ended.map(|status| status.code()),
                    Err(error) => {
                        tracing::warn!(order = %id, %error, "cannot read workload state");
                        None
                    }
                },
                None if leader_running(workload.pgid, workload.started) => None,
                // Not our child: the wrapper's file holds its exit code.
                None => Some(
                    std::fs::read_to_string(self.state_dir.join("exits").join(id.to_string()))
                        .ok()
                        .and_then(|code| code.trim().parse().ok()),
                ),
            };
            match ended {
                Some(code) => {
                    // The group may outlive its leader: nothing of it stays.
                    signal_group(workload.pgid, libc::SIGKILL);
                    if let Some(helper) = workload.helper.take() {
                        helper.stop();
                    }
                    if let Some(mut ssh) = workload.ssh.take() {
                        ssh.kill().ok();
                        ssh.wait().ok();
                    }
                    done.push(*id);
                    match (workload.kill_at, workload.orphaned) {
                        (Some(_), true) => {}
                        (Some(_), false) => events.push(Event::Stopped(*id)),
                        (None, _) => {
                            let why = self
                                .runtime
                                .ending(*id)
                                .or_else(|| workload.entrypoint_failure(code));
                            events.push(Event::Exited(*id, code, why));
                        }
                    }
                }
                None => {
                    if workload.kill_at.is_some_and(|at| Instant::now() >= at) {
                        signal_group(workload.pgid, libc::SIGKILL);
                    }
                }
            }
        }
        for id in &done {
            self.booting.remove(id);
            if let Some(fabric) = self.fabric.as_mut() {
                fabric.detach(*id);
            }
            if let Some(attempt) = self.workloads.remove(id).and_then(|w| w.attempt) {
                self.ended.insert((*id, attempt));
            }
            std::fs::remove_file(self.exit_path(*id)).ok();
        }
        if !done.is_empty() {
            self.save();
        }
        self.leftovers.extend(done);
        let runtime = &self.runtime;
        self.leftovers.retain(|id| !runtime.clean(*id));
        events
    }
}

/// Whether a workload that could not be joined ends by itself within a
/// second (its runtime, or its entrypoint, gave up), rather than being
/// up but out of reach.
fn ended_soon(workload: &mut Workload) -> bool {
    let Some(child) = workload.child.as_mut() else {
        return false;
    };
    let until = Instant::now() + Duration::from_secs(1);
    loop {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return true;
        }
        if Instant::now() > until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether a taken-back workload's leader still runs. Its group is judged
/// by its leader, as for our own children; a zombie counts as ended, since
/// whoever inherited it may never reap it.
fn leader_running(pgid: i32, started: u64) -> bool {
    pgid > 0
        && leader(pgid)
            .is_some_and(|(state, since)| since == started && !matches!(state, 'Z' | 'X'))
}

/// A process's state letter and start time (clock ticks since boot), from
/// /proc.
fn leader(pid: i32) -> Option<(char, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields are counted
    // after its closing parenthesis, from the state (the 3rd field) to the
    // start time (the 22nd).
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let started = fields.nth(18)?.parse().ok()?;
    Some((state, started))
}

fn signal_group(pgid: i32, signal: i32) {
    if pgid <= 0 {
        return;
    }
    // SAFETY: kill(2) takes plain integers and touches no memory of ours; a
    // negative pid addresses the process group the workload leads.
    unsafe {
        libc::kill(-pgid, signal);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assignment(action: Action, gpus: &[u32]) -> Assignment {
        let visible = gpus
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",");
        Assignment {
            order_id: Uuid::from_u128(7),
            org_id: None,
            organization: String::new(),
            action,
            gpu_ids: gpus.to_vec(),
            mig_devices: Vec::new(),
            gpu_milli: 1000,
            env: HashMap::from([("CUDA_VISIBLE_DEVICES".into(), visible)]),
            command: None,
            working_dir: None,
            limits: None,
            ssh_keys: Vec::new(),
            ports: Vec::new(),
            image: None,
            node_count: 1,
            network: None,
            volumes: Vec::new(),
        }
    }

    fn supervisor(command: &str, grace: Duration, dir: &Path) -> Supervisor {
        let runtime = crate::runtime::process::Process::new(dir).expect("scratch");
        let slots = Slots {
            uids: 1..=1,
            ports: 1..=1,
            cpus: vec![0],
            limits: Limits {
                cpu_milli: 1000,
                memory_mib: 1024,
                pids: 64,
            },
            default_disk: 1 << 30,
        };
        Supervisor::new(
            Box::new(runtime),
            None,
            command.to_owned(),
            grace,
            dir,
            slots,
        )
        .expect("state dir")
    }

    fn state_dir() -> PathBuf {
        std::env::temp_dir().join(format!("gantry-agent-state-{}", Uuid::new_v4()))
    }

    /// Lets a test stand in for the init process that inherits a dead
    /// agent's workloads: it reaps the child in the background.
    fn orphan(supervisor: &mut Supervisor) {
        for workload in supervisor.workloads.values_mut() {
            if let Some(mut child) = workload.child.take() {
                tokio::spawn(async move { child.wait().await });
            }
        }
    }

    async fn events_until(supervisor: &mut Supervisor, want: usize) -> Vec<Event> {
        let mut events = Vec::new();
        for _ in 0..200 {
            events.extend(supervisor.poll());
            if events.len() >= want {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        events
    }

    #[tokio::test]
    async fn a_workload_sees_its_gpus_and_reports_its_exit_code() {
        let out = std::env::temp_dir().join(format!("gantry-agent-{}", Uuid::new_v4()));
        let command = format!("echo \"$CUDA_VISIBLE_DEVICES\" > {}; exit 3", out.display());
        let mut supervisor = supervisor(&command, Duration::from_secs(1), &state_dir());
        let started = supervisor.reconcile(&[assignment(Action::Run, &[2, 5])]);
        assert_eq!(
            started,
            vec![Event::Running(Uuid::from_u128(7), Access::default())]
        );
        assert_eq!(supervisor.busy_gpus(), vec![2, 5]);
        let events = events_until(&mut supervisor, 1).await;
        assert_eq!(
            events,
            vec![Event::Exited(Uuid::from_u128(7), Some(3), None)]
        );
        assert_eq!(std::fs::read_to_string(&out).expect("output"), "2,5\n");
        std::fs::remove_file(out).ok();
    }

    #[tokio::test]
    async fn a_stop_kills_the_whole_group_after_the_grace_period() {
        // The shell and its sleeping child ignore SIGTERM: only SIGKILL of
        // the group ends them both.
        let pid_file = std::env::temp_dir().join(format!("gantry-agent-{}", Uuid::new_v4()));
        let command = format!(
            "trap '' TERM; sleep 30 & echo $! > {}; wait",
            pid_file.display()
        );
        let mut supervisor = supervisor(&command, Duration::from_millis(200), &state_dir());
        supervisor.reconcile(&[assignment(Action::Run, &[0])]);
        let mut child = String::new();
        for _ in 0..100 {
            child = std::fs::read_to_string(&pid_file).unwrap_or_default();
            if child.ends_with('\n') {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let began = Instant::now();
        assert!(
            supervisor
                .reconcile(&[assignment(Action::Stop, &[0])])
                .is_empty()
        );
        let events = events_until(&mut supervisor, 1).await;
        assert_eq!(events, vec![Event::Stopped(Uuid::from_u128(7))]);
        assert!(began.elapsed() >= Duration::from_millis(200));
        // Dead (reaped, or a zombie waiting for its reaper), not sleeping.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let stat =
            std::fs::read_to_string(format!("/proc/{}/stat", child.trim())).unwrap_or_default();
        let state = stat
            .rsplit(')')
            .next()
            .unwrap_or_default()
            .trim_start()
            .chars()
            .next();
        assert!(
            matches!(state, None | Some('Z' | 'X')),
            "the sleeping child was killed with its group: {stat}"
        );
        std::fs::remove_file(pid_file).ok();
        assert!(supervisor.busy_gpus().is_empty());
    }

    #[tokio::test]
    async fn a_restarted_agent_takes_its_workloads_back_with_their_exit_codes() {
        let dir = state_dir();
        let marker = dir.join("release");
        // Runs until the marker appears, then exits 5.
        let command = format!(
            "while [ ! -e {} ]; do sleep 0.05; done; exit 5",
            marker.display()
        );
        let run = assignment(Action::Run, &[1, 3]);
        let mut before = supervisor(&command, Duration::from_secs(1), &dir);
        before.reconcile(std::slice::from_ref(&run));
        orphan(&mut before);
        drop(before);

        let mut after = supervisor(&command, Duration::from_secs(1), &dir);
        assert_eq!(after.adopt(), 1);
        assert_eq!(after.busy_gpus(), vec![1, 3]);
        // Still assigned: taken back, not started a second time.
        assert!(after.reconcile(std::slice::from_ref(&run)).is_empty());
        assert!(after.poll().is_empty());
        std::fs::write(&marker, "").expect("marker");
        let events = events_until(&mut after, 1).await;
        assert_eq!(
            events,
            vec![Event::Exited(Uuid::from_u128(7), Some(5), None)]
        );

        // A workload that ended while no agent watched is reported once.
        std::fs::remove_file(&marker).ok();
        let command = "exit 4".to_owned();
        let mut before = supervisor(&command, Duration::from_secs(1), &dir);
        before.reconcile(std::slice::from_ref(&run));
        orphan(&mut before);
        drop(before);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut after = supervisor(&command, Duration::from_secs(1), &dir);
        assert_eq!(after.adopt(), 0);
        assert!(after.reconcile(std::slice::from_ref(&run)).is_empty());
        assert_eq!(
            after.poll(),
            vec![Event::Exited(Uuid::from_u128(7), Some(4), None)]
        );
        assert!(after.busy_gpus().is_empty());
        let mut again = supervisor("", Duration::from_secs(1), &dir);
        assert_eq!(again.adopt(), 0);
        assert!(
            again.poll().is_empty(),
            "the ledger forgot the reported workload"
        );
        std::fs::remove_dir_all(dir).ok();
    }
}
