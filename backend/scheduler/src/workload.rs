//! Workloads: what they ask for, how urgent they are, and the allocations of
//! those already running.

use std::collections::BTreeSet;

/// Priority classes, lowest first. A class may preempt the classes below it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum PriorityClass {
    /// Spot work: runs only on idle capacity, preempts nothing and is the
    /// first victim.
    Preemptible,
    /// Batch work.
    Batch,
    /// The default class.
    #[default]
    Standard,
    /// Production work.
    Production,
}

/// What kind of work it is, which decides whether it may move in time and
/// space for a cheaper region or hour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum WorkloadClass {
    /// Model training.
    #[default]
    Training,
    /// Fine-tuning.
    FineTuning,
    /// Serving: stays where its users are.
    Inference,
    /// Interactive development: stays where its users are.
    Dev,
    /// Batch processing.
    Batch,
    /// Hyperparameter optimisation trials.
    Hpo,
}

impl WorkloadClass {
    /// Throughput work that may follow the sun to an off-peak region, or
    /// wait for an off-peak hour while its deadline holds.
    pub fn is_deferrable(self) -> bool {
        !matches!(self, Self::Inference | Self::Dev)
    }
}

/// The GPUs a workload needs on each node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GpuRequest {
    /// Whole GPUs, never shared; zero for CPU-only work.
    Whole(u32),
    /// A fraction of one GPU in thousandths (1..=999), packed with other
    /// fractions onto a shared GPU.
    Milli(u32),
    /// Compute slices of one GPU in MIG mode.
    Mig(u8),
}

impl Default for GpuRequest {
    fn default() -> Self {
        Self::Whole(1)
    }
}

impl GpuRequest {
    /// Thousandths of a GPU per node, for quotas and fair share; a MIG slice
    /// counts as its share of a seven-slice GPU.
    pub fn milli_per_node(self) -> u64 {
        match self {
            Self::Whole(gpus) => u64::from(gpus) * 1000,
            Self::Milli(milli) => u64::from(milli),
            Self::Mig(slices) => u64::from(slices) * 1000 / 7,
        }
    }
}

/// A workload waiting to be placed (or, inside [`Running`], one that was).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Workload {
    /// Unique id.
    pub id: String,
    /// The queue it is charged to: one per tenant or per project.
    pub queue: String,
    /// GPU models it can run on; one of them for all its GPUs.
    pub gpu_models: Vec<String>,
    /// GPUs on each node.
    pub gpus: GpuRequest,
    /// Nodes it needs at once: more than one makes a gang, placed whole or
    /// not at all.
    pub node_count: u32,
    /// CPU per node, in thousandths of a core.
    pub cpu_milli_per_node: u64,
    /// Memory per node, in MiB.
    pub memory_mib_per_node: u64,
    /// Its priority class.
    pub priority: PriorityClass,
    /// What kind of work it is.
    pub class: WorkloadClass,
    /// Seconds since the epoch when it was submitted.
    pub submitted_at: i64,
    /// How long it expects to run, in seconds; backfill and estimated starts
    /// rest on it.
    pub duration_estimate: Option<i64>,
    /// When it must be done, in seconds since the epoch.
    pub deadline: Option<i64>,
    /// It may not start before this time.
    pub earliest_start: Option<i64>,
    /// Seconds it runs before it may be preempted.
    pub min_runtime: i64,
    /// It saves its progress when told to checkpoint, within its grace
    /// period, and restarts from there: moving it costs only that time.
    pub checkpointable: bool,
    /// Regions it may run in, home region first; any when empty.
    pub regions: Vec<String>,
    /// Labels every node it runs on must carry.
    pub required_labels: BTreeSet<String>,
    /// The advance reservation it runs in, if any: it then runs only on that
    /// reservation's GPUs and inside its window.
    pub reservation: Option<String>,
}

impl Workload {
    /// Thousandths of a GPU it holds in all.
    pub fn total_milli(&self) -> u64 {
        self.gpus
            .milli_per_node()
            .saturating_mul(u64::from(self.node_count))
    }
}

/// The GPUs a workload gets on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The node.
    pub node: String,
    /// Indices of the GPUs on that node: one for a fraction or MIG slice.
    pub gpus: Vec<u32>,
}

/// A workload that holds GPUs now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Running {
    /// What it asked for.
    pub workload: Workload,
    /// Where it runs.
    pub placements: Vec<Placement>,
    /// When it started.
    pub started_at: i64,
    /// Its last checkpoint: preempting it loses the work since then.
    pub last_checkpoint_at: Option<i64>,
    /// Set once it was told to stop (preempted): it releases its GPUs then.
    pub stopping_at: Option<i64>,
}

impl Running {
    /// When it is expected to release its GPUs; `None` when nobody knows.
    pub fn expected_end(&self, now: i64) -> Option<i64> {
        if let Some(at) = self.stopping_at {
            return Some(at.max(now));
        }
        // Work past its estimate is assumed to end now: planning rests on
        // estimates, and the caller enforces them.
        self.workload
            .duration_estimate
            .map(|d| self.started_at.saturating_add(d).max(now))
    }
}

/// GPUs held for one queue over a window of time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdvanceReservation {
    /// Unique id; workloads name it to run inside it.
    pub id: String,
    /// The queue the GPUs are held for.
    pub queue: String,
    /// Window start, seconds since the epoch.
    pub start: i64,
    /// Window end.
    pub end: i64,
    /// The exact GPUs held, as chosen by [`crate::plan_advance_reservation`].
    pub placements: Vec<Placement>,
}
