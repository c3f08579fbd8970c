//! Advance reservations: choosing the exact GPUs of a new one, finding the
//! earliest windows that would fit when the asked one does not, and telling
//! whether one can be extended on the GPUs it already holds.

use std::collections::BTreeSet;

use crate::placement::Demand;
use crate::plan::fit_window;
use crate::policy::Policy;
use crate::schedule::{Snapshot, prepared};
use crate::state::{HoldFor, Holder, State, View};
use crate::workload::{GpuRequest, Placement, Workload};

/// GPUs a queue wants held over a window.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ReservationRequest {
    /// The queue the GPUs are for.
    pub queue: String,
    /// Acceptable GPU models.
    pub gpu_models: Vec<String>,
    /// Whole GPUs on each node.
    pub gpus_per_node: u32,
    /// Nodes.
    pub node_count: u32,
    /// Regions it may be in; any when empty.
    pub regions: Vec<String>,
    /// Labels every node must carry.
    pub required_labels: BTreeSet<String>,
    /// Window start, seconds since the epoch.
    pub start: i64,
    /// Window end.
    pub end: i64,
}

/// The GPUs to hold for `request`: free over its whole window given the
/// estimated ends of running work and the reservations already in
/// `snapshot`. `None` when no set of GPUs is free for the window, or the
/// window is empty or past.
pub fn plan_advance_reservation(
    snapshot: &Snapshot<'_>,
    request: &ReservationRequest,
) -> Option<Vec<Placement>> {
    let policy = Policy::default();
    let cycle = prepared(snapshot, &policy);
    let workload = request_workload(request);
    let regions = cycle.regions_of(&workload);
    fit(
        cycle.state(),
        &workload,
        &regions,
        request.start,
        request.end,
    )
}

/// Up to `count` windows as long as `request`'s, starting at or after its
/// start and no later than `latest_start`, that would fit, earliest first,
/// with the GPUs each would hold. Capacity only changes when running work
/// is expected to end or a reservation ends, so those moments (rounded up
/// to a multiple of `step` seconds) are the only starts tried.
pub fn earliest_windows(
    snapshot: &Snapshot<'_>,
    request: &ReservationRequest,
    latest_start: i64,
    step: i64,
    count: usize,
) -> Vec<(i64, Vec<Placement>)> {
    let policy = Policy::default();
    let cycle = prepared(snapshot, &policy);
    let workload = request_workload(request);
    let regions = cycle.regions_of(&workload);
    let length = request.end - request.start;
    let step = step.max(1);
    let up = |t: i64| {
        t.saturating_add(step - 1)
            .div_euclid(step)
            .saturating_mul(step)
    };
    let ends = snapshot
        .running
        .iter()
        .filter_map(|r| r.expected_end(snapshot.now))
        .chain(snapshot.reservations.iter().map(|r| r.end));
    let starts: BTreeSet<i64> = std::iter::once(request.start)
        .chain(ends.map(up))
        .filter(|t| (request.start..=latest_start).contains(t))
        .collect();
    starts
        .into_iter()
        .filter_map(|start| {
            fit(cycle.state(), &workload, &regions, start, start + length)
                .map(|placements| (start, placements))
        })
        .take(count)
        .collect()
}

/// Whether reservation `id` can keep exactly its GPUs until `new_end`: no
/// other reservation holds them and no other running work is expected on
/// them between its current end and `new_end`. Work running inside the
/// reservation itself ends with it, so it does not count.
pub fn can_extend(snapshot: &Snapshot<'_>, id: &str, new_end: i64) -> bool {
    let Some((index, reservation)) = snapshot
        .reservations
        .iter()
        .enumerate()
        .find(|(_, r)| r.id == id)
    else {
        return false;
    };
    if new_end <= reservation.end || reservation.end <= snapshot.now {
        return false;
    }
    let policy = Policy::default();
    let cycle = prepared(snapshot, &policy);
    let state = cycle.state();
    let from = reservation.end;
    reservation.placements.iter().all(|placement| {
        let Some(node_id) = state.node_id(&placement.node) else {
            return false;
        };
        let node = state.node(node_id);
        let mask = node.mask_of(&placement.gpus);
        let taken_by_work = node.allocs.iter().any(|alloc| {
            let own = matches!(alloc.holder, Holder::Running(r)
                if snapshot.running[r as usize].workload.reservation.as_deref() == Some(id));
            !own && alloc.mask & mask != 0 && alloc.release_at.is_none_or(|at| at > from)
        });
        let held_for_others = node.holds.iter().any(|hold| {
            let own = matches!(hold.holder, HoldFor::Advance(r) if r as usize == index);
            !own && hold.binding && hold.mask & mask != 0 && hold.overlaps(from, Some(new_end))
        });
        node.node.schedulable && !taken_by_work && !held_for_others
    })
}

fn request_workload(request: &ReservationRequest) -> Workload {
    Workload {
        id: format!("reservation for {}", request.queue),
        queue: request.queue.clone(),
        gpu_models: request.gpu_models.clone(),
        gpus: GpuRequest::Whole(request.gpus_per_node),
        node_count: request.node_count,
        duration_estimate: Some(request.end - request.start),
        regions: request.regions.clone(),
        required_labels: request.required_labels.clone(),
        ..Workload::default()
    }
}

/// The GPUs free for `workload` over `[start, end)`, on the first of its
/// models that has room.
fn fit(
    state: &State<'_>,
    workload: &Workload,
    regions: &[u32],
    start: i64,
    end: i64,
) -> Option<Vec<Placement>> {
    if end <= start || end <= state.now || workload.node_count == 0 {
        return None;
    }
    let from = start.max(state.now);
    workload
        .gpu_models
        .iter()
        .filter_map(|model| state.models.get(model))
        .find_map(|model| {
            let demand = Demand {
                workload,
                model,
                regions: regions.to_vec(),
                view: View {
                    from,
                    until: Some(end),
                    reservation: None,
                    tentative: false,
                    binding: true,
                },
            };
            fit_window(state, &demand)
        })
        .map(|nodes| {
            nodes
                .into_iter()
                .map(|(id, mask)| Placement {
                    node: state.node(id).node.name.clone(),
                    gpus: state.node(id).indices(mask),
                })
                .collect()
        })
}
