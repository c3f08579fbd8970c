//! The workloads running on this node: each assignment to run becomes a
//! process in its own process group with `CUDA_VISIBLE_DEVICES` set to
//! exactly its GPUs; an assignment to stop (or one that disappeared) gets
//! SIGTERM for the whole group, then SIGKILL when the grace period ends.

use std::collections::HashMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};
use uuid::Uuid;

use crate::client::{Action, Assignment};

/// What happened to a workload, for the control plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Running(Uuid),
    Exited(Uuid, Option<i32>),
    Stopped(Uuid),
    Failed(Uuid, String),
}

struct Workload {
    child: Child,
    pgid: i32,
    gpus: Vec<u32>,
    /// When SIGKILL follows the SIGTERM already sent.
    kill_at: Option<Instant>,
    /// Stopped because its assignment vanished: nobody waits for a report.
    orphaned: bool,
}

pub struct Supervisor {
    command: String,
    grace: Duration,
    workloads: HashMap<Uuid, Workload>,
}

impl Supervisor {
    /// `command` is run by `sh -c` for every workload.
    pub fn new(command: String, grace: Duration) -> Self {
        Self {
            command,
            grace,
            workloads: HashMap::new(),
        }
    }

    /// GPU indices held by running workloads.
    pub fn busy_gpus(&self) -> Vec<u32> {
        self.workloads
            .values()
            .flat_map(|w| w.gpus.iter().copied())
            .collect()
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
        let spawned = Command::new("sh")
            .arg("-c")
            .arg(&self.command)
            .envs(&assignment.env)
            .stdin(Stdio::null())
            .process_group(0)
            .spawn();
        match spawned {
            Ok(child) => {
                let pgid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
                tracing::info!(order = %id, gpus = ?assignment.gpu_ids, pgid, "started workload");
                self.workloads.insert(
                    id,
                    Workload {
                        child,
                        pgid,
                        gpus: assignment.gpu_ids.clone(),
                        kill_at: None,
                        orphaned: false,
                    },
                );
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
            match workload.child.try_wait() {
                Ok(Some(status)) => {
                    // The group may outlive its leader: nothing of it stays.
                    signal_group(workload.pgid, libc::SIGKILL);
                    done.push(*id);
                    match (workload.kill_at, workload.orphaned) {
                        (Some(_), true) => {}
                        (Some(_), false) => events.push(Event::Stopped(*id)),
                        (None, _) => events.push(Event::Exited(*id, status.code())),
                    }
                }
                Ok(None) => {
                    if workload.kill_at.is_some_and(|at| Instant::now() >= at) {
                        signal_group(workload.pgid, libc::SIGKILL);
                    }
                }
                Err(error) => {
                    tracing::warn!(order = %id, %error, "cannot read workload state");
                }
            }
        }
        for id in done {
            self.workloads.remove(&id);
        }
        events
    }
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
        let mut supervisor = Supervisor::new(command, Duration::from_secs(1));
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
        let mut supervisor = Supervisor::new(command, Duration::from_millis(200));
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
}
