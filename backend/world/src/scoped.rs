//! Quotas narrower than an organization's whole use of a GPU model — per
//! project, or per region — which the engine does not know. Before a cycle,
//! queued orders are taken in submission order against each such maximum,
//! counting what runs and what was let through before them, so the engine
//! can never start more than a narrow quota allows. An order that may run
//! anywhere loses only the regions whose quota is full.

use std::collections::HashMap;

use gantry_scheduler as engine;
use uuid::Uuid;

use gantry_entities::{order, quota};
use gantry_types::reasons::WaitReason;

/// GPUs held or let through, by organization, GPU model, region and project.
pub type Use = HashMap<(Uuid, Uuid, Uuid, Option<Uuid>), i64>;

/// An order held back this cycle, and why.
#[derive(Debug, Clone)]
pub struct Held {
    pub order_id: Uuid,
    pub reason: String,
    pub details: WaitReason,
}

/// What holding back did: the orders removed, with their reasons, and
/// those whose regions it narrowed.
#[derive(Debug, Default)]
pub struct HeldBack {
    pub held: Vec<Held>,
    pub narrowed: Vec<Uuid>,
}

/// Narrows or removes pending workloads that would exceed a project or
/// regional maximum. `used` counts what runs; it is asked for only when
/// such a maximum exists.
pub fn hold_back(
    pending: &mut Vec<engine::Workload>,
    orders: &HashMap<Uuid, order::Model>,
    quotas: &HashMap<Uuid, quota::Model>,
    used: impl FnOnce() -> Use,
    regions: &HashMap<Uuid, String>,
) -> HeldBack {
    let mut narrow: Vec<&quota::Model> = quotas
        .values()
        .filter(|q| q.max_gpus.is_some() && (q.project_id.is_some() || q.region_id.is_some()))
        .collect();
    if narrow.is_empty() {
        return HeldBack::default();
    }
    narrow.sort_by_key(|q| q.id);
    let mut used = used();
    let mut queued: Vec<&order::Model> = pending
        .iter()
        .filter_map(|w| Uuid::try_parse(&w.id).ok())
        .filter_map(|id| orders.get(&id))
        .collect();
    queued.sort_by_key(|o| (o.created_at, o.id));
    let mut held = Vec::new();
    let mut narrowed: HashMap<Uuid, Vec<String>> = HashMap::new();
    for o in queued {
        let gpus = i64::from(o.gpus_per_node) * i64::from(o.node_count);
        let rules: Vec<&&quota::Model> = narrow
            .iter()
            .filter(|q| {
                q.org_id == o.org_id
                    && q.gpu_model_id == o.gpu_model_id
                    && q.project_id.is_none_or(|p| o.project_id == Some(p))
            })
            .collect();
        if rules.is_empty() {
            continue;
        }
        // In a fixed order: the first open region is counted against, and
        // every build of the input must count alike.
        let candidates: Vec<Uuid> = match o.region_id {
            Some(region) => vec![region],
            None => {
                let mut all: Vec<Uuid> = regions.keys().copied().collect();
                all.sort();
                all
            }
        };
        let within = |region: Uuid, used: &Use| {
            rules.iter().all(|q| {
                if q.region_id.is_some_and(|r| r != region) {
                    return true;
                }
                let held: i64 = used
                    .iter()
                    .filter(|((org, model, r, p), _)| {
                        *org == q.org_id
                            && *model == q.gpu_model_id
                            && q.region_id.is_none_or(|x| x == *r)
                            && q.project_id.is_none_or(|x| Some(x) == *p)
                    })
                    .map(|(_, g)| g)
                    .sum();
                held + gpus <= i64::from(q.max_gpus.unwrap_or(i32::MAX))
            })
        };
        let open: Vec<Uuid> = candidates
            .iter()
            .copied()
            .filter(|r| within(*r, &used))
            .collect();
        if open.is_empty() {
            held.push(Held {
                order_id: o.id,
                reason: format!(
                    "quota: a project or regional maximum for this GPU model is reached; it needs {gpus} more"
                ),
                details: WaitReason::ScopedQuota { needed_gpus: gpus },
            });
            continue;
        }
        // Counted against the first open region: conservative when the
        // engine picks another.
        *used
            .entry((o.org_id, o.gpu_model_id, open[0], o.project_id))
            .or_default() += gpus;
        if o.region_id.is_none() && open.len() < candidates.len() {
            let mut names: Vec<String> = open
                .iter()
                .filter_map(|r| regions.get(r).cloned())
                .collect();
            names.sort();
            narrowed.insert(o.id, names);
        }
    }
    let removed: std::collections::HashSet<String> =
        held.iter().map(|h| h.order_id.to_string()).collect();
    pending.retain(|w| !removed.contains(&w.id));
    let ids: Vec<Uuid> = narrowed.keys().copied().collect();
    for w in pending.iter_mut() {
        if let Some(names) = Uuid::try_parse(&w.id)
            .ok()
            .and_then(|id| narrowed.remove(&id))
        {
            w.regions = names;
        }
    }
    HeldBack {
        held,
        narrowed: ids,
    }
}
