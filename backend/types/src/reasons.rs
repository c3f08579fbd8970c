//! Why an order waits, as data: the engine's reasons with their figures,
//! times as instants and the orders they name as links, so that a client
//! renders them in its reader's language and time zone instead of showing
//! the scheduler's English. The scheduling loop stores them beside the
//! text; the order view adds the names of the orders they mention.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, TimeZone, Utc};
use gantry_scheduler as engine;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::classes::OrderStatus;

/// An order a reason mentions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct OrderRef {
    pub id: Uuid,
    /// Its name, when the reader may see it: only orders of the reader's
    /// own organization are named.
    #[serde(default)]
    pub name: Option<String>,
}

/// When a node frees and whose end frees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Release {
    pub at: DateTime<Utc>,
    pub node: String,
    /// The order whose end frees it, when it is an order.
    pub order: Option<OrderRef>,
}

/// Which quota ceiling was hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum QuotaCeiling {
    /// The queue's hard maximum.
    Maximum,
    /// Its guarantee plus its borrowing limit.
    Borrowing,
}

/// One reason an order waits, most telling first. GPU figures are in
/// GPUs, fractions included.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum WaitReason {
    /// Its queue would go over a quota ceiling.
    Quota {
        queue: String,
        gpu_model: String,
        used_gpus: f64,
        limit_gpus: f64,
        needed_gpus: f64,
        ceiling: QuotaCeiling,
    },
    /// Fewer GPUs of the model are free where it may run than it needs.
    Capacity {
        gpu_model: String,
        free_gpus: f64,
        needed_gpus: f64,
        next_release: Option<Release>,
    },
    /// Enough GPUs are free in all, but not enough together on a node.
    Fragmentation {
        gpu_model: String,
        free_gpus: u32,
        gpus_per_node: u32,
        nodes_needed: u32,
        nodes_with_room: u32,
        largest_free_on_one_node: u32,
        next_release: Option<Release>,
    },
    /// Nodes have the GPUs free but not the CPU or memory beside them.
    CpuOrMemory { nodes_with_free_gpus: u32 },
    /// The GPUs it could use are held for a reservation or maintenance.
    HeldForReservation {
        /// The reservation, maintenance window or order they are held for.
        holder: String,
        from: DateTime<Utc>,
        /// It would start now with a duration ending before `from`.
        fits_with_shorter_estimate: bool,
    },
    /// Running work was told to stop for it; it starts when they have.
    WaitingForPreemption {
        victims: u32,
        until: Option<DateTime<Utc>>,
    },
    /// Higher-ranked work competing for the same GPUs waits too.
    BehindHigherRanked { ahead: u32 },
    /// It asked not to start before this time.
    NotBefore { at: DateTime<Utc> },
    /// It waits for the cheaper off-peak window, which its deadline allows.
    OffPeak { region: String, at: DateTime<Utc> },
    /// A project's or a region's maximum for the GPU model is reached.
    ScopedQuota { needed_gpus: i64 },
    /// Its local volume lives on one node, so it runs there only and waits
    /// for that node (added by the order view, not by the engine).
    PinnedByVolume {
        volume: String,
        node: String,
        /// Whether the node takes new work now.
        node_state: crate::classes::NodeState,
    },
    /// A job it depends on has not ended as it must.
    Dependency {
        order: OrderRef,
        /// The dependency's status now.
        status: OrderStatus,
        /// What it waits for the dependency to do.
        until: DependencyEnd,
    },
}

/// What a job waits for a job it depends on to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DependencyEnd {
    /// Complete successfully.
    Complete,
    /// End, however.
    End,
}

fn instant(seconds: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(seconds, 0)
        .single()
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

fn gpus(milli: u64) -> f64 {
    milli as f64 / 1000.0
}

fn release(next: Option<&engine::NextRelease>) -> Option<Release> {
    next.map(|n| Release {
        at: instant(n.at),
        node: n.node.clone(),
        order: Uuid::try_parse(&n.workload)
            .ok()
            .map(|id| OrderRef { id, name: None }),
    })
}

impl From<&engine::Reason> for WaitReason {
    fn from(reason: &engine::Reason) -> Self {
        use engine::Reason as R;
        match reason {
            R::Quota {
                queue,
                model,
                used_milli,
                limit_milli,
                needed_milli,
                limit,
            } => Self::Quota {
                queue: queue.clone(),
                gpu_model: model.clone(),
                used_gpus: gpus(*used_milli),
                limit_gpus: gpus(*limit_milli),
                needed_gpus: gpus(*needed_milli),
                ceiling: match limit {
                    engine::QuotaLimit::Max => QuotaCeiling::Maximum,
                    engine::QuotaLimit::Borrowing => QuotaCeiling::Borrowing,
                },
            },
            R::Capacity {
                model,
                free_milli,
                needed_milli,
                next_release,
            } => Self::Capacity {
                gpu_model: model.clone(),
                free_gpus: gpus(*free_milli),
                needed_gpus: gpus(*needed_milli),
                next_release: release(next_release.as_ref()),
            },
            R::Fragmentation {
                model,
                free_gpus,
                gpus_per_node,
                nodes_needed,
                nodes_with_room,
                largest_free_on_one_node,
                next_release,
            } => Self::Fragmentation {
                gpu_model: model.clone(),
                free_gpus: *free_gpus,
                gpus_per_node: *gpus_per_node,
                nodes_needed: *nodes_needed,
                nodes_with_room: *nodes_with_room,
                largest_free_on_one_node: *largest_free_on_one_node,
                next_release: release(next_release.as_ref()),
            },
            R::CpuOrMemory {
                nodes_with_free_gpus,
            } => Self::CpuOrMemory {
                nodes_with_free_gpus: *nodes_with_free_gpus,
            },
            R::HeldForReservation {
                holder,
                from,
                fits_with_shorter_estimate,
            } => Self::HeldForReservation {
                holder: holder.clone(),
                from: instant(*from),
                fits_with_shorter_estimate: *fits_with_shorter_estimate,
            },
            R::WaitingForPreemption { victims, until } => Self::WaitingForPreemption {
                victims: *victims,
                until: until.map(instant),
            },
            R::BehindHigherRanked { ahead } => Self::BehindHigherRanked { ahead: *ahead },
            R::NotBefore { at } => Self::NotBefore { at: instant(*at) },
            R::OffPeak { region, at } => Self::OffPeak {
                region: region.clone(),
                at: instant(*at),
            },
        }
    }
}

/// Reasons as stored.
pub fn stored(reasons: &[WaitReason]) -> Option<String> {
    (!reasons.is_empty()).then(|| serde_json::to_string(reasons).unwrap_or_default())
}

/// Stored reasons; none when absent or unreadable.
pub fn parse(stored: Option<&str>) -> Vec<WaitReason> {
    stored
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default()
}

impl WaitReason {
    /// The `kind` it is tagged with on the wire, for metric labels.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Quota { .. } => "quota",
            Self::Capacity { .. } => "capacity",
            Self::Fragmentation { .. } => "fragmentation",
            Self::CpuOrMemory { .. } => "cpu_or_memory",
            Self::HeldForReservation { .. } => "held_for_reservation",
            Self::WaitingForPreemption { .. } => "waiting_for_preemption",
            Self::BehindHigherRanked { .. } => "behind_higher_ranked",
            Self::NotBefore { .. } => "not_before",
            Self::OffPeak { .. } => "off_peak",
            Self::ScopedQuota { .. } => "scoped_quota",
            Self::PinnedByVolume { .. } => "pinned_by_volume",
            Self::Dependency { .. } => "dependency",
        }
    }

    fn order(&self) -> Option<&OrderRef> {
        match self {
            Self::Capacity { next_release, .. } | Self::Fragmentation { next_release, .. } => {
                next_release.as_ref().and_then(|r| r.order.as_ref())
            }
            Self::Dependency { order, .. } => Some(order),
            _ => None,
        }
    }

    fn order_mut(&mut self) -> Option<&mut OrderRef> {
        match self {
            Self::Capacity { next_release, .. } | Self::Fragmentation { next_release, .. } => {
                next_release.as_mut().and_then(|r| r.order.as_mut())
            }
            Self::Dependency { order, .. } => Some(order),
            _ => None,
        }
    }
}

/// The orders these reasons mention.
pub fn mentioned<'a>(reasons: impl IntoIterator<Item = &'a WaitReason>) -> HashSet<Uuid> {
    reasons
        .into_iter()
        .filter_map(|r| r.order().map(|o| o.id))
        .collect()
}

/// Names the orders these reasons mention that `names` holds: those the
/// reader's organization owns. Another tenant's order stays an id, which
/// tells the reader nothing about that tenant.
pub fn name_orders<'a>(
    reasons: impl IntoIterator<Item = &'a mut WaitReason>,
    names: &HashMap<Uuid, String>,
) {
    for reason in reasons {
        if let Some(order) = reason.order_mut() {
            order.name = names.get(&order.id).cloned();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_the_tags_on_the_wire() {
        let reasons = [
            WaitReason::CpuOrMemory {
                nodes_with_free_gpus: 1,
            },
            WaitReason::BehindHigherRanked { ahead: 2 },
            WaitReason::ScopedQuota { needed_gpus: 8 },
            WaitReason::Dependency {
                order: OrderRef {
                    id: Uuid::nil(),
                    name: None,
                },
                status: OrderStatus::Running,
                until: DependencyEnd::Complete,
            },
        ];
        for reason in reasons {
            let wire = serde_json::to_value(&reason).expect("serialize");
            assert_eq!(wire["kind"], reason.kind());
        }
    }

    #[test]
    fn engine_reasons_keep_their_figures_and_times() {
        let reason = engine::Reason::Capacity {
            model: "H100".into(),
            free_milli: 2500,
            needed_milli: 8000,
            next_release: Some(engine::NextRelease {
                at: 1_800_000_000,
                workload: "01939d3c-7c2a-7b3e-8f4d-2a1b3c4d5e6f".into(),
                node: "gpu-7".into(),
            }),
        };
        let json = serde_json::to_value(WaitReason::from(&reason)).unwrap();
        assert_eq!(json["kind"], "capacity");
        assert_eq!(json["free_gpus"], 2.5);
        assert_eq!(json["next_release"]["at"], "2027-01-15T08:00:00Z");
        assert_eq!(
            json["next_release"]["order"]["id"],
            "01939d3c-7c2a-7b3e-8f4d-2a1b3c4d5e6f"
        );
        let back = parse(stored(&[WaitReason::from(&reason)]).as_deref());
        assert_eq!(back, vec![WaitReason::from(&reason)]);
    }

    #[test]
    fn only_the_readers_orders_are_named() {
        let own = Uuid::now_v7();
        let other = Uuid::now_v7();
        let blocked = |id: Uuid| WaitReason::Capacity {
            gpu_model: "H100".into(),
            free_gpus: 0.0,
            needed_gpus: 8.0,
            next_release: Some(Release {
                at: instant(1_800_000_000),
                node: "gpu-1".into(),
                order: Some(OrderRef { id, name: None }),
            }),
        };
        let mut reasons = vec![blocked(own), blocked(other)];
        assert_eq!(mentioned(&reasons), HashSet::from([own, other]));
        name_orders(&mut reasons, &HashMap::from([(own, "mine".to_owned())]));
        let names: Vec<Option<String>> = reasons
            .iter()
            .map(|r| r.order().and_then(|o| o.name.clone()))
            .collect();
        assert_eq!(names, vec![Some("mine".to_owned()), None]);
    }
}
