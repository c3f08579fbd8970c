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
///
/// A node's capacity only grows when one of its allocations or holds ends,
/// so after the nodes that fit at `not_before`, only those moments are
/// tried, in time order, each on its own node.
pub(crate) fn earliest(state: &State<'_>, demand: &Demand<'_>, not_before: i64) -> Option<Plan> {
    let gpus = whole_gpus(demand)?;
    let count = demand.workload.node_count as usize;
    if count == 0 {
        return None;
    }
    let hosts = |id: u32| {
        let node = state.node(id);
        (demand.regions.is_empty() || demand.regions.contains(&node.region))
            && eligible(node, demand.workload)
            && bits(node.model_mask(demand.model)) >= gpus
            && node.node.cpu_milli >= demand.workload.cpu_milli_per_node
            && node.node.memory_mib >= demand.workload.memory_mib_per_node
    };
    let initial: Vec<u32> = if not_before > state.now {
        could_host(state, demand, gpus)
    } else {
        state
            .buckets(demand.model, &demand.regions, gpus, false)
            .iter()
            .flat_map(|bucket| bucket.ids().collect::<Vec<u32>>())
            .collect()
    };
    // The nodes that fit, with the GPUs each would give.
    let mut fitting: BTreeMap<u32, Mask> = BTreeMap::new();
    let check = |id: u32, at: i64, fitting: &mut BTreeMap<u32, Mask>| {
        match fit_on(state, id, demand, gpus, at).filter(|_| hosts(id)) {
            Some((mask, _)) => fitting.insert(id, mask),
            None => fitting.remove(&id),
        };
    };
    for id in initial {
        check(id, not_before, &mut fitting);
    }
    if let Some(plan) = ready(state, demand, gpus, not_before, &mut fitting) {
        return Some(plan);
    }
    let mut events = state
        .events
        .range((not_before.saturating_add(1), 0)..)
        .peekable();
    while let Some(&(at, id)) = events.next() {
        check(id, at, &mut fitting);
        if events.peek().is_some_and(|(next, _)| *next == at) {
            continue;
        }
        if let Some(plan) = ready(state, demand, gpus, at, &mut fitting) {
            return Some(plan);
        }
    }
    None
}

/// The plan at `at` if enough of the `fitting` nodes still fit then. A node
/// without holds that fitted earlier still fits (capacity only grows
/// between its events); one with holds is checked again, as a hold may
/// have begun.
fn ready(
    state: &State<'_>,
    demand: &Demand<'_>,
    gpus: u32,
    at: i64,
    fitting: &mut BTreeMap<u32, Mask>,
) -> Option<Plan> {
    let count = demand.workload.node_count as usize;
    if fitting.len() < count {
        return None;
    }
    fitting.retain(|id, mask| {
        if state.node(*id).holds.is_empty() {
            return true;
        }
        match fit_on(state, *id, demand, gpus, at) {
            Some((now, _)) => {
                *mask = now;
                true
            }
            None => false,
        }
    });
    if fitting.len() < count {
        return None;
    }
    let mut racks: BTreeMap<u32, Vec<(u32, Mask)>> = BTreeMap::new();
    for (id, mask) in fitting.iter() {
        racks
            .entry(state.node(*id).rack)
            .or_default()
            .push((*id, *mask));
    }
    let nodes = racks
        .into_values()
        .find(|rack| rack.len() >= count)
        .unwrap_or_else(|| fitting.iter().map(|(id, mask)| (*id, *mask)).collect());
    Some(Plan {
        at,
        nodes: nodes.into_iter().take(count).collect(),
    })
}

/// The nodes and GPUs `demand` would get over the window its view names,
/// for an advance reservation.
pub(crate) fn fit_window(state: &State<'_>, demand: &Demand<'_>) -> Option<Vec<(u32, Mask)>> {
    let gpus = whole_gpus(demand)?;
    let nodes = could_host(state, demand, gpus);
    gang_at(state, demand, gpus, demand.view.from, &nodes)
}
