//! Queues: the per-tenant (or per-project) quotas and fair-share weights.

use std::collections::BTreeMap;

/// The GPUs of one model a queue is guaranteed and may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Quota {
    /// GPUs always available to the queue: it reclaims them from borrowers.
    pub guaranteed: u32,
    /// GPUs it may borrow beyond its guarantee while others leave theirs
    /// idle; unlimited when `None`.
    pub borrow_limit: Option<u32>,
    /// A hard ceiling on the GPUs it holds at once.
    pub max: Option<u32>,
}

/// One queue. Work in a queue without an entry for a GPU model has no
/// guarantee for it but may borrow idle capacity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queue {
    /// Unique name; workloads name it.
    pub name: String,
    /// Fair-share weight: a queue of weight 2 gets twice the share of a
    /// queue of weight 1 when both want more than there is.
    pub weight: u32,
    /// Admission limit: more pending work than this is rejected.
    pub max_pending: Option<u32>,
    /// Quotas by GPU model.
    pub quotas: BTreeMap<String, Quota>,
}

impl Queue {
    /// A queue of weight 1 with no quotas and no limits.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            weight: 1,
            max_pending: None,
            quotas: BTreeMap::new(),
        }
    }

    /// The quota for `model`.
    pub fn quota(&self, model: &str) -> Quota {
        self.quotas.get(model).copied().unwrap_or_default()
    }
}
