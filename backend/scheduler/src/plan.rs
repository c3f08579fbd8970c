//! Planning ahead: the earliest time a blocked workload fits, given when
//! running work is expected to end and what is already held for others.

use std::collections::BTreeMap;

use crate::placement::{Demand, eligible};
use crate::state::{Mask, State, View, bits};
use crate::workload::GpuRequest;

/// Where and when a workload would start.
pub(crate) struct Plan {
    pub(crate) at: i64,
    /// Per node, the GPUs it would hold.
    pub(crate) nodes: Vec<(u32, Mask)>,
}

/// GPUs per node for planning; fractions and MIG slices are not planned.
fn whole_gpus(demand: &Demand<'_>) -> Option<u32> {
    match demand.workload.gpus {
        GpuRequest::Whole(k) => Some(k),
        GpuRequest::Milli(_) | GpuRequest::Mig(_) => None,
    }
}

fn view_at(demand: &Demand<'_>, at: i64) -> View {
    View {
        from: at,
        until: demand
            .workload
            .duration_estimate
            .map(|d| at.saturating_add(d)),
        ..demand.view
    }
}

/// What node `id` would give `demand` if it started at `at`.
fn fit_on(
    state: &State<'_>,
    id: u32,
    demand: &Demand<'_>,
    gpus: u32,
    at: i64,
) -> Option<(Mask, bool)> {
    let node = state.node(id);
    let room = node.room(demand.model, view_at(demand, at), state.now);
    if room.cpu < demand.workload.cpu_milli_per_node
        || room.mem < demand.workload.memory_mib_per_node
    {
        return None;
    }
    node.choose(room.mask, gpus)
}

/// Nodes that could ever host one node's share of `demand`.
pub(crate) fn could_host(state: &State<'_>, demand: &Demand<'_>, gpus: u32) -> Vec<u32> {
    state
        .nodes_in(&demand.regions)
        .into_iter()
        .filter(|id| {
            let node = state.node(*id);
            eligible(node, demand.workload)
                && bits(node.model_mask(demand.model)) >= gpus
                && node.node.cpu_milli >= demand.workload.cpu_milli_per_node
                && node.node.memory_mib >= demand.workload.memory_mib_per_node
        })
        .collect()
}

/// The nodes for a gang starting at `at`, from one rack when one rack can
/// hold it.
fn gang_at(
    state: &State<'_>,
    demand: &Demand<'_>,
    gpus: u32,
    at: i64,
    nodes: &[u32],
) -> Option<Vec<(u32, Mask)>> {
    let count = demand.workload.node_count as usize;
    let fits: Vec<(u32, Mask, bool)> = nodes
        .iter()
        .filter_map(|id| {
            fit_on(state, *id, demand, gpus, at).map(|(mask, spans)| (*id, mask, spans))
        })
        .collect();
    if fits.len() < count {
        return None;
    }
    let mut racks: BTreeMap<u32, Vec<(u32, Mask)>> = BTreeMap::new();
    for (id, mask, _) in &fits {
        racks
            .entry(state.node(*id).rack)
            .or_default()
            .push((*id, *mask));
    }
    if let Some(rack) = racks.into_values().find(|rack| rack.len() >= count) {
        return Some(rack.into_iter().take(count).collect());
    }
    Some(
        fits.into_iter()
            .take(count)
            .map(|(id, mask, _)| (id, mask))
            .collect(),
    )
}

/// The earliest start at or after `not_before` at which `demand` fits, with
/// the GPUs it would get; `None` when it depends on work whose end nobody
/// knows.
pub(crate) fn earliest(state: &State<'_>, demand: &Demand<'_>, not_before: i64) -> Option<Plan> {
    let gpus = whole_gpus(demand)?;
    let nodes = could_host(state, demand, gpus);
    let count = demand.workload.node_count as usize;
    if nodes.len() < count || count == 0 {
        return None;
    }
    // Each node's earliest fit: capacity only changes when an allocation
    // ends or a hold ends, so those are the moments worth trying.
    let mut firsts: Vec<(i64, bool, u32, Mask)> = Vec::new();
    for id in &nodes {
        let node = state.node(*id);
        let mut times: Vec<i64> = node
            .allocs
            .iter()
            .filter_map(|a| a.release_at)
            .chain(node.holds.iter().filter_map(|h| h.until))
            .filter(|t| *t > not_before)
            .collect();
        times.push(not_before);
        times.sort_unstable();
        times.dedup();
        if let Some((at, (mask, spans))) = times
            .into_iter()
            .find_map(|t| fit_on(state, *id, demand, gpus, t).map(|fit| (t, fit)))
        {
            firsts.push((at, spans, *id, mask));
        }
    }
    firsts.sort_by_key(|(at, spans, id, _)| (*at, *spans, *id));
    if count == 1 {
        return firsts.first().map(|(at, _, id, mask)| Plan {
            at: *at,
            nodes: vec![(*id, *mask)],
        });
    }
    let mut moments: Vec<i64> = firsts.iter().map(|(at, ..)| *at).collect();
    moments.dedup();
    for at in moments {
        let candidates: Vec<u32> = firsts
            .iter()
            .filter(|(first, ..)| *first <= at)
            .map(|(_, _, id, _)| *id)
            .collect();
        if candidates.len() < count {
            continue;
        }
        if let Some(nodes) = gang_at(state, demand, gpus, at, &candidates) {
            return Some(Plan { at, nodes });
        }
    }
    None
}

/// The nodes and GPUs `demand` would get over the window its view names,
/// for an advance reservation.
pub(crate) fn fit_window(state: &State<'_>, demand: &Demand<'_>) -> Option<Vec<(u32, Mask)>> {
    let gpus = whole_gpus(demand)?;
    let nodes = could_host(state, demand, gpus);
    gang_at(state, demand, gpus, demand.view.from, &nodes)
}
