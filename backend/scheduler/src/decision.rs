//! What one cycle decides, and the reasons it gives, with numbers.

use std::fmt;

use crate::workload::Placement;

/// Formats thousandths of a GPU as GPUs: `8`, `0.5`.
fn gpus(milli: u64) -> String {
    if milli.is_multiple_of(1000) {
        (milli / 1000).to_string()
    } else {
        format!("{}", milli as f64 / 1000.0)
    }
}

/// A workload to start now, with every GPU it gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start {
    /// The workload.
    pub workload: String,
    /// One placement per node of the gang.
    pub placements: Vec<Placement>,
}

/// Why running work is evicted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreemptionCause {
    /// A workload of a higher priority class needs the GPUs.
    Priority,
    /// The victim borrowed quota its owner now reclaims.
    Reclaim,
    /// An advance reservation's window began on its GPUs.
    AdvanceReservation,
    /// A defragmentation plan moves it to let blocked work start.
    Defragmentation,
}

/// A running workload told to stop.
#[derive(Debug, Clone, PartialEq)]
pub struct Preemption {
    /// The victim.
    pub workload: String,
    /// The workload (or advance reservation) it makes room for.
    pub by: String,
    /// Why.
    pub cause: PreemptionCause,
    /// GPU-seconds of work since its last checkpoint that it loses.
    pub gpu_seconds_lost: f64,
    /// It is told now and stopped at `stop_at`, this many seconds later.
    pub grace_seconds: i64,
    /// When it must have stopped.
    pub stop_at: i64,
}

/// GPUs reserved for a blocked workload at its planned start; later work
/// may use them only if it ends before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    /// The workload.
    pub workload: String,
    /// Planned start.
    pub start_at: i64,
    /// The GPUs it will get.
    pub placements: Vec<Placement>,
}

/// Why a workload is refused outright.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RejectReason {
    /// The request itself is malformed.
    Invalid(String),
    /// It names a queue that does not exist.
    UnknownQueue(String),
    /// It names an advance reservation that does not exist, has ended or
    /// belongs to another queue.
    UnknownReservation(String),
    /// Fewer nodes than it needs could host it even on an empty cluster.
    NeverFits {
        /// Nodes it needs at once.
        nodes_needed: u32,
        /// Nodes that could host one of its parts.
        nodes_that_could: u32,
    },
    /// It asks for more than its queue may ever hold.
    OverQuota {
        /// The GPU model whose ceiling is lowest.
        model: String,
        /// Thousandths of a GPU it needs.
        needed_milli: u64,
        /// The queue's ceiling, in thousandths.
        max_milli: u64,
    },
    /// Its queue holds as much pending work as it may.
    QueueFull {
        /// The admission limit.
        limit: u32,
    },
}

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Invalid(message) => write!(f, "invalid request: {message}"),
            Self::UnknownQueue(queue) => write!(f, "no queue named {queue}"),
            Self::UnknownReservation(id) => write!(
                f,
                "advance reservation {id} does not exist, has ended or belongs to another queue"
            ),
            Self::NeverFits {
                nodes_needed,
                nodes_that_could,
            } => write!(
                f,
                "can never fit: it needs {nodes_needed} nodes at once and only {nodes_that_could} \
                 could host it (GPU model, region, labels, GPUs, CPU, memory)"
            ),
            Self::OverQuota {
                model,
                needed_milli,
                max_milli,
            } => write!(
                f,
                "over quota: it needs {} {model} and its queue may hold at most {}",
                gpus(*needed_milli),
                gpus(*max_milli)
            ),
            Self::QueueFull { limit } => {
                write!(f, "queue full: it already has {limit} pending workloads")
            }
        }
    }
}

/// A workload refused outright.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// The workload.
    pub workload: String,
    /// Why.
    pub reason: RejectReason,
}

/// When and why a node frees: the counterfactual behind a capacity reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NextRelease {
    /// When.
    pub at: i64,
    /// The workload whose end frees it.
    pub workload: String,
    /// The node.
    pub node: String,
}

/// Which ceiling a quota reason hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaLimit {
    /// The queue's hard maximum.
    Max,
    /// Its guarantee plus its borrowing limit.
    Borrowing,
}

/// One reason a workload waits, with the numbers behind it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// Its queue would go over a quota ceiling.
    Quota {
        /// The queue.
        queue: String,
        /// The GPU model.
        model: String,
        /// Thousandths the queue holds now.
        used_milli: u64,
        /// The ceiling.
        limit_milli: u64,
        /// Thousandths it needs.
        needed_milli: u64,
        /// Which ceiling.
        limit: QuotaLimit,
    },
    /// Fewer GPUs of the model are free where it may run than it needs.
    Capacity {
        /// The GPU model.
        model: String,
        /// Thousandths free where it may run.
        free_milli: u64,
        /// Thousandths it needs.
        needed_milli: u64,
        /// The next node to free enough, if any end is known.
        next_release: Option<NextRelease>,
    },
    /// Enough GPUs are free in all, but not enough together on a node.
    Fragmentation {
        /// The GPU model.
        model: String,
        /// GPUs free where it may run.
        free_gpus: u32,
        /// GPUs it needs on each node.
        gpus_per_node: u32,
        /// Nodes it needs at once.
        nodes_needed: u32,
        /// Nodes with that many free.
        nodes_with_room: u32,
        /// The most free on one node.
        largest_free_on_one_node: u32,
        /// The next node to free enough, if any end is known.
        next_release: Option<NextRelease>,
    },
    /// Nodes have the GPUs free but not the CPU or memory beside them.
    CpuOrMemory {
        /// Nodes with enough free GPUs.
        nodes_with_free_gpus: u32,
    },
    /// The GPUs it could use are held for a reserved workload.
    HeldForReservation {
        /// The workload or advance reservation they are held for.
        holder: String,
        /// When the hold begins.
        from: i64,
        /// Whether it would start now if it declared a duration ending
        /// before then.
        fits_with_shorter_estimate: bool,
    },
    /// Running work was told to stop for it; it starts when they have.
    WaitingForPreemption {
        /// Workloads stopping for it.
        victims: u32,
        /// When their GPUs are free.
        until: Option<i64>,
    },
    /// Higher-ranked work competing for the same GPUs waits too.
    BehindHigherRanked {
        /// How many.
        ahead: u32,
    },
    /// It asked not to start before this time.
    NotBefore {
        /// Seconds since the epoch.
        at: i64,
    },
    /// It waits for a cheaper off-peak window, which its deadline allows.
    OffPeak {
        /// The region whose window it waits for.
        region: String,
        /// When the window opens.
        at: i64,
    },
}

impl Reason {
    /// How its text begins, the same whatever its figures: what tells one
    /// kind of reason from another in a stored text.
    pub fn prefix(&self) -> &'static str {
        match self {
            Self::Quota { .. } => "quota:",
            Self::Capacity { .. } => "capacity:",
            Self::Fragmentation { .. } => "fragmentation:",
            Self::CpuOrMemory { .. } => "CPU or memory:",
            Self::HeldForReservation { .. } => "held for reservation ",
            Self::WaitingForPreemption { .. } => "preemption:",
            Self::BehindHigherRanked { .. } => "behind ",
            Self::NotBefore { .. } => "not before ",
            Self::OffPeak { .. } => "waiting for the off-peak window in ",
        }
    }
}

impl fmt::Display for NextRelease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} frees at {} when {} ends",
            self.node, self.at, self.workload
        )
    }
}

fn release(next: Option<&NextRelease>) -> String {
    next.map(|n| format!("; {n}")).unwrap_or_default()
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Quota {
                queue,
                model,
                used_milli,
                limit_milli,
                needed_milli,
                limit,
            } => {
                let more = (used_milli + needed_milli).saturating_sub(*limit_milli);
                let ceiling = match limit {
                    QuotaLimit::Max => "maximum",
                    QuotaLimit::Borrowing => "guarantee plus borrowing limit",
                };
                write!(
                    f,
                    "quota: {queue} uses {}/{} {model} ({ceiling}); it needs {} (would fit with {} more {model} quota)",
                    gpus(*used_milli),
                    gpus(*limit_milli),
                    gpus(*needed_milli),
                    gpus(more)
                )
            }
            Self::Capacity {
                model,
                free_milli,
                needed_milli,
                next_release,
            } => write!(
                f,
                "capacity: {} {model} free where it may run, {} needed{}",
                gpus(*free_milli),
                gpus(*needed_milli),
                release(next_release.as_ref())
            ),
            Self::Fragmentation {
                model,
                free_gpus,
                gpus_per_node,
                nodes_needed,
                nodes_with_room,
                largest_free_on_one_node,
                next_release,
            } => write!(
                f,
                "fragmentation: {free_gpus} {model} free, but {nodes_with_room} of the {nodes_needed} \
                 nodes needed have {gpus_per_node} free (at most {largest_free_on_one_node} on one node){}",
                release(next_release.as_ref())
            ),
            Self::CpuOrMemory {
                nodes_with_free_gpus,
            } => write!(
                f,
                "CPU or memory: {nodes_with_free_gpus} nodes have the GPUs free but not the CPU or memory beside them"
            ),
            Self::HeldForReservation {
                holder,
                from,
                fits_with_shorter_estimate,
            } => {
                write!(f, "held for reservation {holder} from {from}")?;
                if *fits_with_shorter_estimate {
                    write!(
                        f,
                        "; it would start now with a duration estimate ending before then"
                    )?;
                }
                Ok(())
            }
            Self::WaitingForPreemption { victims, until } => {
                write!(f, "preemption: {victims} workloads are stopping for it")?;
                if let Some(until) = until {
                    write!(f, "; their GPUs are free at {until}")?;
                }
                Ok(())
            }
            Self::BehindHigherRanked { ahead } => {
                write!(
                    f,
                    "behind {ahead} higher-ranked workloads for the same GPUs"
                )
            }
            Self::NotBefore { at } => write!(f, "not before {at}, as asked"),
            Self::OffPeak { region, at } => write!(
                f,
                "waiting for the off-peak window in {region} at {at}; its deadline still holds"
            ),
        }
    }
}

/// A workload that keeps waiting, with every reason and, where the plan
/// gives one, an estimated start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// The workload.
    pub workload: String,
    /// Every reason it waits, most telling first.
    pub reasons: Vec<Reason>,
    /// When the backfill plan expects it to start.
    pub estimated_start: Option<i64>,
    /// How far that start can be trusted, when there is one.
    pub estimate_confidence: Option<EstimateConfidence>,
    /// The running work whose estimated ends that start rests on.
    pub estimate_rests_on: Vec<String>,
}

/// How far an estimated start can be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EstimateConfidence {
    /// GPUs are held for it from then: work started behind it may not delay
    /// it, so only a preemption, a node going away or work ranked above it
    /// arriving later can.
    Reserved,
    /// Planned behind the reservations of work ranked above it: any work
    /// that gains rank on it (shorter, more urgent, of a higher class, of a
    /// queue with a smaller share) may push it back, and backfill may take
    /// its GPUs.
    Planned,
}

/// What one cycle decided.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Decisions {
    /// Workloads to start now, in the order they were placed.
    pub starts: Vec<Start>,
    /// Running work to stop, each with its grace period.
    pub preemptions: Vec<Preemption>,
    /// GPUs reserved for blocked work.
    pub reservations: Vec<Reservation>,
    /// Workloads refused outright.
    pub rejections: Vec<Rejection>,
    /// Workloads that wait, in rank order.
    pub waiting: Vec<Waiting>,
}

impl Decisions {
    /// The start of `workload`, if it starts.
    pub fn start(&self, workload: &str) -> Option<&Start> {
        self.starts.iter().find(|s| s.workload == workload)
    }

    /// The waiting entry of `workload`, if it waits.
    pub fn waiting(&self, workload: &str) -> Option<&Waiting> {
        self.waiting.iter().find(|w| w.workload == workload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_text_begins_with_its_prefix() {
        let release = Some(NextRelease {
            node: "n1".into(),
            at: 1_800_000_000,
            workload: "w9".into(),
        });
        let reasons = [
            Reason::Quota {
                queue: "team".into(),
                model: "H100".into(),
                used_milli: 8000,
                limit_milli: 8000,
                needed_milli: 1000,
                limit: QuotaLimit::Max,
            },
            Reason::Capacity {
                model: "H100".into(),
                free_milli: 0,
                needed_milli: 8000,
                next_release: release.clone(),
            },
            Reason::Fragmentation {
                model: "H100".into(),
                free_gpus: 9,
                gpus_per_node: 8,
                nodes_needed: 1,
                nodes_with_room: 0,
                largest_free_on_one_node: 5,
                next_release: release,
            },
            Reason::CpuOrMemory {
                nodes_with_free_gpus: 3,
            },
            Reason::HeldForReservation {
                holder: "r1".into(),
                from: 1_800_000_000,
                fits_with_shorter_estimate: true,
            },
            Reason::WaitingForPreemption {
                victims: 2,
                until: Some(1_800_000_000),
            },
            Reason::BehindHigherRanked { ahead: 4 },
            Reason::NotBefore { at: 1_800_000_000 },
            Reason::OffPeak {
                region: "eu".into(),
                at: 1_800_000_000,
            },
        ];
        for reason in reasons {
            assert!(
                reason.to_string().starts_with(reason.prefix()),
                "{reason} does not begin with {:?}",
                reason.prefix()
            );
        }
    }
}
