//! The handle request handlers and drivers use to reach the scheduling
//! loop: wake it, ask whether this process leads, and wait for agents'
//! assignments to change.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::{Notify, watch};
use uuid::Uuid;

/// What request handlers and drivers use to reach the loop.
#[derive(Clone)]
pub struct SchedulerHandle {
    wake: Arc<Notify>,
    leader: Arc<AtomicBool>,
    /// This process's name on the lease.
    holder: Arc<str>,
    /// Counts the changes of what agents run, for all nodes and per node;
    /// waiting agent fetches watch it.
    assignments: Arc<watch::Sender<AssignmentChanges>>,
    /// Set when the server shuts down: no fetch waits any more.
    stopping: Arc<AtomicBool>,
    /// Asks the leader to compare its copy of the rows with a full read at
    /// its next cycle.
    check_soon: Arc<AtomicBool>,
    /// Consistency checks run by this process, and how many found a
    /// difference.
    checks: Arc<watch::Sender<Checks>>,
}

/// How many times agents' assignments may have changed: on every node at
/// once (`all`) and on single nodes. A waiting fetch looks again when
/// either count it watches moves.
#[derive(Debug, Default)]
pub struct AssignmentChanges {
    all: u64,
    nodes: HashMap<Uuid, u64>,
}

impl AssignmentChanges {
    /// What a fetch for `node` compares to tell a change that concerns it.
    pub fn mark(&self, node: Uuid) -> (u64, u64) {
        (self.all, self.nodes.get(&node).copied().unwrap_or(0))
    }
}

/// The consistency checks this process has run as leader, how often it
/// read its copy of the rows whole (as leader or follower), and how many
/// of its cycles planned new orders alone against the last whole plan.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Checks {
    pub run: u64,
    /// Checks whose copy of the rows differed from a full read.
    pub differing: u64,
    /// Checks whose kept engine input differed from one built whole.
    pub input_differing: u64,
    pub full_reads: u64,
    pub arrival_plans: u64,
}

impl Default for SchedulerHandle {
    fn default() -> Self {
        Self {
            wake: Arc::default(),
            leader: Arc::default(),
            holder: Uuid::new_v4().to_string().into(),
            assignments: Arc::new(watch::Sender::new(AssignmentChanges::default())),
            stopping: Arc::default(),
            check_soon: Arc::default(),
            checks: Arc::new(watch::Sender::new(Checks::default())),
        }
    }
}

impl SchedulerHandle {
    /// This process's name on the scheduler lease.
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// Asks for a cycle soon; several requests before it runs make one.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Whether this process runs the loop now.
    pub fn is_leader(&self) -> bool {
        self.leader.load(Ordering::Relaxed)
    }

    /// Tells when agents' assignments may have changed in this process.
    pub fn assignment_changes(&self) -> watch::Receiver<AssignmentChanges> {
        self.assignments.subscribe()
    }

    /// How many agent fetches wait on this process now (each holds one
    /// receiver of the changes).
    pub fn waiting_fetches(&self) -> usize {
        self.assignments.receiver_count()
    }

    /// Wakes every agent fetch waiting on this process to look again.
    pub fn assignments_may_have_changed(&self) {
        self.assignments
            .send_modify(|c| c.all = c.all.wrapping_add(1));
    }

    /// Wakes the fetches waiting for these nodes' assignments.
    pub fn assignments_changed_on(&self, nodes: &HashSet<Uuid>) {
        if nodes.is_empty() {
            return;
        }
        self.assignments.send_modify(|c| {
            for node in nodes {
                let count = c.nodes.entry(*node).or_default();
                *count = count.wrapping_add(1);
            }
        });
    }

    /// Ends every wait for changed assignments, now and from now on.
    pub fn stop_assignment_waits(&self) {
        self.stopping.store(true, Ordering::Relaxed);
        self.assignments_may_have_changed();
    }

    /// Whether fetches may still wait for changed assignments.
    pub fn assignment_waits_allowed(&self) -> bool {
        !self.stopping.load(Ordering::Relaxed)
    }

    /// Has the leader check its copy of the rows against a full read in
    /// its next cycle, and wakes it.
    pub fn check_consistency_soon(&self) {
        self.check_soon.store(true, Ordering::Relaxed);
        self.wake();
    }

    /// Waits until a cycle is asked for.
    pub async fn woken(&self) {
        self.wake.notified().await;
    }

    /// Records whether this process now holds the lease; answers whether it
    /// held it before.
    pub fn set_leader(&self, leading: bool) -> bool {
        self.leader.swap(leading, Ordering::Relaxed)
    }

    /// Whether a consistency check was asked for since the last call.
    pub fn take_consistency_request(&self) -> bool {
        self.check_soon.swap(false, Ordering::Relaxed)
    }

    /// Counts a consistency check this process ran, and whether it found a
    /// difference in the copy of the rows and in the kept engine input.
    pub fn record_check(&self, differing: bool, input_differing: bool) {
        self.checks.send_modify(|checks| {
            checks.run += 1;
            checks.differing += u64::from(differing);
            checks.input_differing += u64::from(input_differing);
        });
    }

    /// Counts a cycle that planned new orders alone.
    pub fn record_arrival_plan(&self) {
        self.checks.send_modify(|checks| checks.arrival_plans += 1);
    }

    /// Counts a full read of this process's copy of the rows.
    pub fn record_full_read(&self) {
        self.checks.send_modify(|checks| checks.full_reads += 1);
    }

    /// Tells when a consistency check has run, and what it found.
    pub fn consistency_checks(&self) -> watch::Receiver<Checks> {
        self.checks.subscribe()
    }
}
