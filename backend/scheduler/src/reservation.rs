//! Choosing the exact GPUs of a new advance reservation.

use std::collections::BTreeSet;

use crate::placement::Demand;
use crate::plan::fit_window;
use crate::policy::Policy;
use crate::schedule::{Snapshot, prepared};
use crate::state::View;
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
    if request.end <= request.start || request.end <= snapshot.now || request.node_count == 0 {
        return None;
    }
    let policy = Policy::default();
    let cycle = prepared(snapshot, &policy);
    let state = cycle.state();
    let workload = Workload {
        id: format!("reservation for {}", request.queue),
        queue: request.queue.clone(),
        gpu_models: request.gpu_models.clone(),
        gpus: GpuRequest::Whole(request.gpus_per_node),
        node_count: request.node_count,
        duration_estimate: Some(request.end - request.start),
        regions: request.regions.clone(),
        required_labels: request.required_labels.clone(),
        ..Workload::default()
    };
    let regions = cycle.regions_of(&workload);
    let from = request.start.max(snapshot.now);
    request
        .gpu_models
        .iter()
        .filter_map(|model| state.models.get(model))
        .find_map(|model| {
            let demand = Demand {
                workload: &workload,
                model,
                regions: regions.clone(),
                view: View {
                    from,
                    until: Some(request.end),
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
