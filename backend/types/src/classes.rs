//! The product's named classes, as stored, sent over the API and handed to
//! the engine: pricing, priority and workload classes, order, node and
//! allocation states.

use gantry_scheduler as engine;
use sea_orm::entity::prelude::*;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Declares a string enum stored in a `VARCHAR(16)` column and written in
/// snake_case on the wire; each variant lists its stored value.
macro_rules! stored_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $value:literal,)+ }) => {
        $(#[$meta])*
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash, EnumIter, DeriveActiveEnum, Serialize,
            Deserialize, ToSchema,
        )]
        #[sea_orm(rs_type = "String", db_type = "String(StringLen::N(16))")]
        #[serde(rename_all = "snake_case")]
        pub enum $name {
            $($(#[$vmeta])* #[sea_orm(string_value = $value)] $variant,)+
        }

        impl $name {
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $value,)+
                }
            }
        }
    };
}

stored_enum! {
    /// How capacity is priced: on demand, spot (preemptible, discounted) or
    /// reserved (committed, discounted).
    PricingClass {
        OnDemand = "on_demand",
        Spot = "spot",
        Reserved = "reserved",
    }
}

stored_enum! {
    /// Which work yields to which: higher classes may preempt lower ones.
    PriorityClass {
        /// May be stopped at any time for anything else.
        Preemptible = "preemptible",
        Batch = "batch",
        Standard = "standard",
        /// Never preempted for priority.
        Production = "production",
    }
}

stored_enum! {
    /// What the work is, which decides how it may be deferred and placed.
    WorkloadClass {
        Training = "training",
        FineTuning = "fine_tuning",
        Inference = "inference",
        Dev = "dev",
        Batch = "batch",
        Hpo = "hpo",
    }
}

stored_enum! {
    /// What a series of the fleet history measures. Its subject is a GPU
    /// model, an organization or the whole fleet.
    HistoryMetric {
        /// GPUs held by running work, by model.
        GpusAllocated = "gpus_allocated",
        /// Healthy, unheld GPUs on nodes taking work, by model.
        GpusFree = "gpus_free",
        /// Free GPUs that can serve a whole node of the model's largest
        /// size: free less what fragmentation strands.
        GpusSchedulable = "gpus_schedulable",
        /// Orders waiting to be placed, over the fleet.
        PendingOrders = "pending_orders",
        /// The 95th percentile of creation-to-start waits of the orders that
        /// came up in an interval; over a longer step, the worst interval's.
        AdmissionWaitP95Seconds = "admission_wait_p95_seconds",
        /// GPU-hours of running work, by organization (shares of a GPU count
        /// as their share).
        GpuHours = "gpu_hours",
        /// Mean busy share of the GPUs that reported telemetry, by model.
        GpuUtilizationRatio = "gpu_utilization_ratio",
    }
}

stored_enum! {
    /// Where an order is in its life.
    OrderStatus {
        /// Admitted, waiting for the engine to place it.
        Queued = "queued",
        /// Placed on exact GPUs; the driver has not yet taken it.
        Scheduled = "scheduled",
        /// The driver is bringing it up.
        Provisioning = "provisioning",
        Running = "running",
        Completed = "completed",
        Failed = "failed",
        Cancelled = "cancelled",
        /// Stopping for higher-priority work; queued again once stopped.
        Preempted = "preempted",
        /// A job stopped at its walltime.
        TimedOut = "timed_out",
    }
}

stored_enum! {
    /// Whether a node takes new work.
    NodeState {
        Ready = "ready",
        /// Keeps its work, takes no new work.
        Cordoned = "cordoned",
        /// Its work is being stopped; it takes no new work.
        Draining = "draining",
        /// Stopped answering or reported a fault.
        Unhealthy = "unhealthy",
    }
}

stored_enum! {
    /// Which provisioning driver brings work up on a node.
    DriverKind {
        /// An in-process stand-in for a GPU server, for the demo and tests.
        Simulated = "simulated",
        /// A real node agent.
        Agent = "agent",
        /// A node of a Slurm cluster Gantry fronts: Slurm runs the work
        /// where Gantry placed it.
        Slurm = "slurm",
    }
}

stored_enum! {
    /// Whether an allocation still holds its GPUs.
    AllocationState {
        Active = "active",
        /// Being stopped; its GPUs stay held until the stop is done.
        Stopping = "stopping",
        Released = "released",
    }
}

stored_enum! {
    /// Why an attempt of an order was stopped: what its tenant reads on the
    /// order's timeline.
    StopCause {
        /// Its tenant cancelled it.
        Cancelled = "cancelled",
        /// It reached the duration it was ordered for.
        DurationReached = "duration_reached",
        /// A job reached its walltime.
        Walltime = "walltime",
        /// Its work exited (a job's command ended, or it could not start).
        Exited = "exited",
        /// Preempted for work ranked above it.
        Preempted = "preempted",
        /// Moved, checkpointed, to make room for work that needs whole nodes.
        Moved = "moved",
        /// An operator drained its node for maintenance.
        NodeDrained = "node_drained",
        /// Its node was marked unhealthy.
        NodeUnhealthy = "node_unhealthy",
        /// Its node stopped answering.
        NodeLost = "node_lost",
        /// Its organization's prepaid balance ran out.
        OutOfBalance = "out_of_balance",
        /// Found still holding GPUs after its order ended; freed.
        Reconciled = "reconciled",
    }
}

impl OrderStatus {
    /// States of an order that is waiting, starting or running.
    pub const LIVE: [Self; 5] = [
        Self::Queued,
        Self::Scheduled,
        Self::Provisioning,
        Self::Running,
        Self::Preempted,
    ];

    /// States of an order that is over and will never hold GPUs again.
    pub const FINAL: [Self; 4] = [
        Self::Completed,
        Self::Failed,
        Self::Cancelled,
        Self::TimedOut,
    ];

    /// Whether the order is over and will never hold GPUs again.
    pub fn is_final(self) -> bool {
        Self::FINAL.contains(&self)
    }
}

impl From<PriorityClass> for engine::PriorityClass {
    fn from(class: PriorityClass) -> Self {
        match class {
            PriorityClass::Preemptible => Self::Preemptible,
            PriorityClass::Batch => Self::Batch,
            PriorityClass::Standard => Self::Standard,
            PriorityClass::Production => Self::Production,
        }
    }
}

impl From<WorkloadClass> for engine::WorkloadClass {
    fn from(class: WorkloadClass) -> Self {
        match class {
            WorkloadClass::Training => Self::Training,
            WorkloadClass::FineTuning => Self::FineTuning,
            WorkloadClass::Inference => Self::Inference,
            WorkloadClass::Dev => Self::Dev,
            WorkloadClass::Batch => Self::Batch,
            WorkloadClass::Hpo => Self::Hpo,
        }
    }
}

stored_enum! {
    /// Where an invoice is: a draft is re-rated until it is finalized, and
    /// from then on never changes but for being paid or voided.
    InvoiceStatus {
        Draft = "draft",
        Finalized = "finalized",
        Paid = "paid",
        Void = "void",
    }
}

stored_enum! {
    /// What an invoice line is.
    LineKind {
        /// Rated usage of one instance type, pricing class, region and price.
        Usage = "usage",
        /// Time down through a provider fault: shown, not charged.
        Downtime = "downtime",
        /// The organization's standing discount.
        Discount = "discount",
        /// A manual credit or charge by an operator, with its reason.
        Adjustment = "adjustment",
        /// A service credit for an earlier month's missed availability.
        SlaCredit = "sla_credit",
        /// Usage an operator took back, with the reason.
        Correction = "correction",
        /// What the prepaid balance already paid for this period's usage.
        Prepaid = "prepaid",
        /// Reserved GPU time in the period, used or not, at the
        /// reservation's price.
        Reservation = "reservation",
        /// The fee for cancelling a reservation late.
        CancellationFee = "cancellation_fee",
        /// One volume's provisioned GiB-seconds at one storage price.
        Storage = "storage",
    }
}

stored_enum! {
    /// Where a reservation is, as stored; whether it is upcoming or active
    /// follows from the clock.
    ReservationStatus {
        /// Its GPUs are held for its window.
        Confirmed = "confirmed",
        /// Cancelled: its GPUs are free from the cancellation on.
        Cancelled = "cancelled",
        /// Its window is over and its work was stopped.
        Ended = "ended",
    }
}

stored_enum! {
    /// What a usage record is.
    UsageKind {
        /// Written by metering.
        Metered = "metered",
        /// An operator's compensating record: its span (of an earlier
        /// record's billable time) is excluded from billing, with a reason.
        Correction = "correction",
    }
}

stored_enum! {
    /// A movement of a prepaid balance.
    BalanceKind {
        /// Money an operator added.
        TopUp = "top_up",
        /// Rated usage drawn from it.
        Usage = "usage",
    }
}

stored_enum! {
    /// Which private network a project's work is on.
    ProjectNetwork {
        /// Its organization's, shared with the organization's other work.
        Organization = "organization",
        /// One of its own: no other project's work reaches it unless that
        /// project joins it.
        Own = "own",
        /// Another project's own network (`network_project_id`), which
        /// that project opens to it.
        Joined = "joined",
    }
}

stored_enum! {
    /// How far a waiting order's estimated start can be trusted.
    EstimateConfidence {
        /// GPUs are held for it from then: work started behind it cannot
        /// delay it; a preemption, a node going away or work ranked above it
        /// that arrives later can.
        Reserved = "reserved",
        /// Planned behind work ranked above it: work that gains rank on it
        /// (shorter, more urgent, of a higher class or a less served
        /// organization) may push it back.
        Planned = "planned",
    }
}

impl From<engine::EstimateConfidence> for EstimateConfidence {
    fn from(confidence: engine::EstimateConfidence) -> Self {
        match confidence {
            engine::EstimateConfidence::Reserved => Self::Reserved,
            engine::EstimateConfidence::Planned => Self::Planned,
        }
    }
}

stored_enum! {
    /// Where a volume's bytes live.
    VolumeKind {
        /// An image of exactly its size on one node's disk: orders that
        /// attach it run on that node.
        Local = "local",
        /// A directory on the region's distributed file system, reachable
        /// from every node of the region.
        Shared = "shared",
    }
}

stored_enum! {
    /// How tenants reach an instance that a Slurm cluster holds for them.
    SlurmAccess {
        /// `srun --jobid=<id> --pty bash` from the cluster's login node.
        Srun = "srun",
        /// SSH to the allocated nodes, which Slurm's `pam_slurm_adopt`
        /// admits while the job holds them.
        Ssh = "ssh",
    }
}

stored_enum! {
    /// Whom a Slurm region's jobs run as.
    SlurmUsers {
        /// Each organization's jobs run as its own Unix user on the
        /// cluster (`user_prefix` and the organization id's last twelve hex
        /// digits), so one tenant's job can neither signal another's nor
        /// read its files.
        PerOrganization = "per_organization",
        /// Every job runs as the user the Slurm commands run as: for a
        /// cluster that serves one tenant, or tenants who trust each other.
        Shared = "shared",
    }
}

stored_enum! {
    /// The distributed file system a region's `shared` volumes live on.
    SharedFsKind {
        Glusterfs = "glusterfs",
        Nfs = "nfs",
        Cephfs = "cephfs",
        Lustre = "lustre",
        Weka = "weka",
    }
}

stored_enum! {
    /// Where a volume is in its life, as stored; `attached` is shown while
    /// live orders use an available volume.
    VolumeState {
        /// Its node has not made it yet.
        Creating = "creating",
        Available = "available",
        /// Its node erases and frees it.
        Deleting = "deleting",
        /// Erased and gone; kept for usage and invoices.
        Deleted = "deleted",
        /// Its node could not make it: the reason says why.
        Failed = "failed",
    }
}
