//! The capacity calendar: for one GPU model in some regions, slot by slot
//! into the future, how many GPUs exist, how many advance reservations
//! hold, how many running work is expected to hold, what is left, and how
//! many instances of one shape could still be reserved.

use crate::policy::Policy;
use crate::schedule::{Snapshot, prepared};
use crate::state::{HoldFor, View, bits};

/// What one slot of the calendar holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CalendarSlot {
    /// Start of the slot, seconds since the epoch.
    pub start: i64,
    /// Healthy GPUs of the model on schedulable nodes.
    pub gpus: u32,
    /// Of those, held by advance reservations during the slot.
    pub reserved: u32,
    /// Of those, not reserved but held by running work expected to last
    /// into the slot (work without an estimate lasts for ever).
    pub busy: u32,
    /// Neither reserved nor busy.
    pub free: u32,
    /// Nodes that could still hold one instance of the asked shape for the
    /// whole slot: how many such instances could be reserved then.
    pub instances: u32,
}

impl CalendarSlot {
    fn empty(start: i64) -> Self {
        Self {
            start,
            gpus: 0,
            reserved: 0,
            busy: 0,
            free: 0,
            instances: 0,
        }
    }
}

/// What a calendar covers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CalendarRequest {
    /// The GPU model.
    pub model: String,
    /// Regions; all when empty.
    pub regions: Vec<String>,
    /// The instance shape whose room is counted: whole GPUs, CPU in
    /// thousandths of a core and memory in MiB on one node.
    pub gpus_per_node: u32,
    pub cpu_milli: u64,
    pub memory_mib: u64,
    /// The first slot's start, seconds since the epoch.
    pub from: i64,
    /// Seconds per slot.
    pub step: i64,
    /// How many slots.
    pub slots: usize,
}

/// The calendar `request` asks for; empty when it names a region the
/// cluster does not have.
pub fn capacity_calendar(snapshot: &Snapshot<'_>, request: &CalendarRequest) -> Vec<CalendarSlot> {
    let policy = Policy::default();
    let cycle = prepared(snapshot, &policy);
    let state = cycle.state();
    let step = request.step.max(1);
    let (gpus_per_node, cpu_milli, memory_mib) =
        (request.gpus_per_node, request.cpu_milli, request.memory_mib);
    let from = request.from;
    let regions = &request.regions;
    let starts = (0..request.slots)
        .map(|i| from.saturating_add(step.saturating_mul(i64::try_from(i).unwrap_or(i64::MAX))));
    let Some(model) = state.models.get(&request.model) else {
        return starts.map(CalendarSlot::empty).collect();
    };
    let region_ids: Vec<u32> = regions
        .iter()
        .filter_map(|r| state.regions.get(r))
        .collect();
    if !regions.is_empty() && region_ids.is_empty() {
        return Vec::new();
    }
    let nodes: Vec<u32> = state
        .nodes_in(&region_ids)
        .into_iter()
        .filter(|id| state.node(*id).node.schedulable)
        .collect();
    starts
        .map(|start| {
            let end = start.saturating_add(step);
            let mut slot = CalendarSlot::empty(start);
            for id in &nodes {
                let node = state.node(*id);
                let mask = node.model_mask(model);
                if mask == 0 {
                    continue;
                }
                let reserved = node
                    .holds
                    .iter()
                    .filter(|h| {
                        matches!(h.holder, HoldFor::Advance(_)) && h.overlaps(start, Some(end))
                    })
                    .fold(0, |held, h| held | h.mask)
                    & mask;
                let busy = node
                    .allocs
                    .iter()
                    .filter(|a| a.release_at.is_none_or(|at| at > start))
                    .fold(0, |held, a| held | a.mask)
                    & mask
                    & !reserved;
                slot.gpus += bits(mask);
                slot.reserved += bits(reserved);
                slot.busy += bits(busy);
                slot.free += bits(mask & !reserved & !busy);
                let room = node.room(
                    model,
                    View {
                        from: start.max(state.now),
                        until: Some(end),
                        reservation: None,
                        tentative: false,
                        binding: true,
                    },
                    state.now,
                );
                if gpus_per_node > 0
                    && bits(room.mask) >= gpus_per_node
                    && room.cpu >= cpu_milli
                    && room.mem >= memory_mib
                {
                    slot.instances += 1;
                }
            }
            slot
        })
        .collect()
}
