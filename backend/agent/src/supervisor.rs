//! The workloads running on this node: each assignment to run becomes a
//! process in its own process group with `CUDA_VISIBLE_DEVICES` set to
//! exactly its GPUs; an assignment to stop (or one that disappeared) gets
//! SIGTERM for the whole group, then SIGKILL when the grace period ends.
//!
//! Workloads outlive the agent: a ledger in the state directory names each
//! one's process group, so a restarted agent takes them back instead of
//! starting them a second time on the same GPUs, and a small shell wrapper
//! leaves each exit code in a file, so one that ended while the agent was
//! away is still reported with its code.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::process::{Child, Command};
use uuid::Uuid;

use crate::client::{Action, Assignment};
use crate::output::{Line, Output};

/// What happened to a workload, for the control plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Running(Uuid),
    Exited(Uuid, Option<i32>),
    Stopped(Uuid),
    Failed(Uuid, String),
}

impl Event {
    /// The workload this event says has ended, if it says so.
    pub fn ended(&self) -> Option<Uuid> {
        match self {
            Self::Running(_) => None,
            Self::Exited(id, _) | Self::Stopped(id) | Self::Failed(id, _) => Some(*id),
        }
    }
}

/// Runs the workload command (`$1`) and writes its exit code to `$2`. The
/// wrapper catches SIGTERM instead of dying of it, so the workload gets its
/// whole grace period and the code is still written.
const WRAPPER: &str = r#"trap : TERM; sh -c "$1"; code=$?; echo "$code" > "$2"; exit "$code""#;

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
    /// When SIGKILL follows the SIGTERM already sent.
    kill_at: Option<Instant>,
    /// Stopped because its assignment vanished: nobody waits for a report.
    orphaned: bool,
}

/// A ledger entry: enough to find a workload's processes again, and to
/// tell them from unrelated ones that reuse the number after a reboot.
#[derive(Serialize, Deserialize)]
struct Record {
    pgid: i32,
    /// The group leader's start time in clock ticks since boot.
    started: u64,
    gpus: Vec<u32>,
}

pub struct Supervisor {
    command: String,
    grace: Duration,
    state_dir: PathBuf,
    workloads: HashMap<Uuid, Workload>,
    output: Output,
}

impl Supervisor {
    /// `command` is run by `sh -c` for every workload; `state_dir` keeps the
    /// ledger and exit codes across agent restarts.
    pub fn new(command: String, grace: Duration, state_dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(state_dir.join("exits"))?;
        Ok(Self {
            command,
            grace,
            state_dir: state_dir.to_owned(),
            workloads: HashMap::new(),
            output: Output::new(state_dir)?,
        })
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
            self.workloads.insert(
                id,
                Workload {
                    child: None,
                    pgid: if alive { record.pgid } else { 0 },
                    started: record.started,
                    gpus: record.gpus,
                    kill_at: None,
                    orphaned: false,
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
        let mut events = Vec::new();
        for assignment in assignments {
            let id = assignment.order_id;
            match (assignment.action, self.workloads.contains_key(&id)) {
                (Action::Run, false) => events.push(self.start(assignment)),
                (Action::Stop, true) => self.terminate(id, false),
                (Action::Stop, false) => events.push(Event::Stopped(id)),
                (Action::Run, true) => {}
            }
        }
        let assigned: Vec<Uuid> = assignments.iter().map(|a| a.order_id).collect();
        let vanished: Vec<Uuid> = self
            .workloads
            .keys()
            .filter(|id| !assigned.contains(id))
            .copied()
            .collect();
        for id in vanished {
            self.terminate(id, true);
        }
        events
    }

    fn start(&mut self, assignment: &Assignment) -> Event {
        let id = assignment.order_id;
        let exit_path = self.exit_path(id);
        std::fs::remove_file(&exit_path).ok();
        let (stdout, stderr) = match self.output.create(id) {
            Ok(files) => files,
            Err(error) => return Event::Failed(id, format!("could not capture output: {error}")),
        };
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(WRAPPER)
            .arg("gantry-workload")
            .arg(assignment.command.as_deref().unwrap_or(&self.command))
            .arg(&exit_path)
            .envs(&assignment.env)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr)
            .process_group(0);
        if let Some(dir) = &assignment.working_dir {
            command.current_dir(dir);
        }
        let spawned = command.spawn();
        match spawned {
            Ok(child) => {
                let pgid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
                let started = leader(pgid).map_or(0, |(_, started)| started);
                tracing::info!(order = %id, gpus = ?assignment.gpu_ids, pgid, "started workload");
                self.workloads.insert(
                    id,
                    Workload {
                        child: Some(child),
                        pgid,
                        started,
                        gpus: assignment.gpu_ids.clone(),
                        kill_at: None,
                        orphaned: false,
                    },
                );
                self.save();
                Event::Running(id)
            }
            Err(error) => Event::Failed(id, format!("could not start the workload: {error}")),
        }
    }

    fn terminate(&mut self, id: Uuid, orphaned: bool) {
        let grace = self.grace;
        if let Some(workload) = self.workloads.get_mut(&id)
            && workload.kill_at.is_none()
        {
            signal_group(workload.pgid, libc::SIGTERM);
            workload.kill_at = Some(Instant::now() + grace);
            workload.orphaned = orphaned;
            tracing::info!(order = %id, "stopping workload");
        }
    }

    /// Collects exits and kills groups whose grace period is over.
    pub fn poll(&mut self) -> Vec<Event> {
        let mut events = Vec::new();
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
                    done.push(*id);
                    match (workload.kill_at, workload.orphaned) {
                        (Some(_), true) => {}
                        (Some(_), false) => events.push(Event::Stopped(*id)),
                        (None, _) => events.push(Event::Exited(*id, code)),
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
            self.workloads.remove(id);
            std::fs::remove_file(self.exit_path(*id)).ok();
        }
        if !done.is_empty() {
            self.save();
        }
        events
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
            action,
            gpu_ids: gpus.to_vec(),
            env: HashMap::from([("CUDA_VISIBLE_DEVICES".into(), visible)]),
            command: None,
            working_dir: None,
        }
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
        let mut supervisor =
            Supervisor::new(command, Duration::from_secs(1), &state_dir()).expect("state dir");
        let started = supervisor.reconcile(&[assignment(Action::Run, &[2, 5])]);
        assert_eq!(started, vec![Event::Running(Uuid::from_u128(7))]);
        assert_eq!(supervisor.busy_gpus(), vec![2, 5]);
        let events = events_until(&mut supervisor, 1).await;
        assert_eq!(events, vec![Event::Exited(Uuid::from_u128(7), Some(3))]);
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
        let mut supervisor =
            Supervisor::new(command, Duration::from_millis(200), &state_dir()).expect("state dir");
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
        let mut before =
            Supervisor::new(command.clone(), Duration::from_secs(1), &dir).expect("state dir");
        before.reconcile(std::slice::from_ref(&run));
        orphan(&mut before);
        drop(before);

        let mut after = Supervisor::new(command, Duration::from_secs(1), &dir).expect("state dir");
        assert_eq!(after.adopt(), 1);
        assert_eq!(after.busy_gpus(), vec![1, 3]);
        // Still assigned: taken back, not started a second time.
        assert!(after.reconcile(std::slice::from_ref(&run)).is_empty());
        assert!(after.poll().is_empty());
        std::fs::write(&marker, "").expect("marker");
        let events = events_until(&mut after, 1).await;
        assert_eq!(events, vec![Event::Exited(Uuid::from_u128(7), Some(5))]);

        // A workload that ended while no agent watched is reported once.
        std::fs::remove_file(&marker).ok();
        let command = "exit 4".to_owned();
        let mut before =
            Supervisor::new(command.clone(), Duration::from_secs(1), &dir).expect("state dir");
        before.reconcile(std::slice::from_ref(&run));
        orphan(&mut before);
        drop(before);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut after = Supervisor::new(command, Duration::from_secs(1), &dir).expect("state dir");
        assert_eq!(after.adopt(), 0);
        assert!(after.reconcile(std::slice::from_ref(&run)).is_empty());
        assert_eq!(
            after.poll(),
            vec![Event::Exited(Uuid::from_u128(7), Some(4))]
        );
        assert!(after.busy_gpus().is_empty());
        let mut again =
            Supervisor::new(String::new(), Duration::from_secs(1), &dir).expect("state dir");
        assert_eq!(again.adopt(), 0);
        assert!(
            again.poll().is_empty(),
            "the ledger forgot the reported workload"
        );
        std::fs::remove_dir_all(dir).ok();
    }
}
