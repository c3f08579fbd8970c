//! Choosing victims: the running work whose eviction makes room for a
//! higher-ranked workload at the least lost GPU-time.

use crate::placement::Demand;
use crate::plan::could_host;
use crate::state::{Holder, Mask, State, WHOLE, bits};
use crate::workload::GpuRequest;

/// What a running workload is to the workload at hand.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Status {
    /// Already told to stop: its GPUs come free at its release time.
    Stopping,
    /// It may be evicted.
    Evictable(Candidate),
    /// It stays.
    Kept,
}

/// A running workload that may be evicted.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Candidate {
    /// Spot work goes first.
    pub(crate) preemptible: bool,
    /// GPU-seconds of work since its last checkpoint, lost if evicted.
    pub(crate) loss: f64,
}

/// Room made for a workload on its nodes.
pub(crate) struct Eviction {
    /// Running entries to stop; empty when work already stopping makes room.
    pub(crate) victims: Vec<u32>,
    /// Per node, the GPUs the workload will get.
    pub(crate) nodes: Vec<(u32, Mask)>,
    /// When the last GPU it waits for comes free, for work already stopping.
    pub(crate) ready_at: Option<i64>,
}

struct NodeChoice {
    node: u32,
    mask: Mask,
    victims: Vec<u32>,
    /// Work lost by victims that are not spot work, then by spot work:
    /// evicting spot work first is the promise its class makes.
    loss: (f64, f64),
    ready_at: Option<i64>,
}

/// The cheapest way to make room for `demand`: capacity that is free or
/// already stopping first, then victims in order of spot first and least
/// lost work. `status` says what each running entry is to the workload.
pub(crate) fn evict(
    state: &State<'_>,
    demand: &Demand<'_>,
    status: &dyn Fn(u32) -> Status,
) -> Option<Eviction> {
    let GpuRequest::Whole(gpus) = demand.workload.gpus else {
        return None;
    };
    let workload = demand.workload;
    let count = workload.node_count as usize;
    let mut choices: Vec<NodeChoice> = Vec::new();
    let mut victims: Vec<(Candidate, u32, Mask, u64, u64)> = Vec::new();
    for id in could_host(state, demand, gpus) {
        let node = state.node(id);
        let model_mask = node.model_mask(demand.model);
        let room = node.room(demand.model, demand.view, state.now);
        let (mut mask, mut cpu, mut mem) = (room.mask, room.cpu, room.mem);
        let mut ready_at: Option<i64> = None;
        victims.clear();
        for alloc in &node.allocs {
            let Holder::Running(running) = alloc.holder else {
                continue;
            };
            let whole = alloc.units == WHOLE || alloc.mask == 0;
            let freed = alloc.mask & model_mask & !room.held;
            match status(running) {
                Status::Stopping if whole => {
                    mask |= freed;
                    cpu += alloc.cpu;
                    mem += alloc.mem;
                    if let Some(at) = alloc.release_at {
                        ready_at = Some(ready_at.map_or(at, |r| r.max(at)));
                    }
                }
                Status::Evictable(found) if whole => {
                    victims.push((found, running, freed, alloc.cpu, alloc.mem));
                }
                _ => {}
            }
        }
        victims.sort_by(|a, b| {
            (!a.0.preemptible)
                .cmp(&!b.0.preemptible)
                .then(a.0.loss.total_cmp(&b.0.loss))
                .then(a.1.cmp(&b.1))
        });
        let fits = |mask: Mask, cpu: u64, mem: u64| {
            cpu >= workload.cpu_milli_per_node
                && mem >= workload.memory_mib_per_node
                && bits(mask) >= gpus
        };
        let mut chosen = Vec::new();
        let mut loss = (0.0, 0.0);
        for (found, running, freed, alloc_cpu, alloc_mem) in victims.iter().copied() {
            if fits(mask, cpu, mem) {
                break;
            }
            mask |= freed;
            cpu += alloc_cpu;
            mem += alloc_mem;
            if found.preemptible {
                loss.1 += found.loss;
            } else {
                loss.0 += found.loss;
            }
            chosen.push(running);
        }
        if !fits(mask, cpu, mem) {
            continue;
        }
        if let Some((taken, _)) = node.choose(mask, gpus) {
            choices.push(NodeChoice {
                node: id,
                mask: taken,
                victims: chosen,
                loss,
                ready_at,
            });
        }
    }
    if choices.len() < count || count == 0 {
        return None;
    }
    choices.sort_by(|a, b| {
        a.loss
            .0
            .total_cmp(&b.loss.0)
            .then(a.loss.1.total_cmp(&b.loss.1))
            .then(a.victims.len().cmp(&b.victims.len()))
            .then(a.node.cmp(&b.node))
    });
    choices.truncate(count);
    let mut victims: Vec<u32> = choices
        .iter()
        .flat_map(|c| c.victims.iter().copied())
        .collect();
    victims.sort_unstable();
    victims.dedup();
    Some(Eviction {
        victims,
        ready_at: choices.iter().filter_map(|c| c.ready_at).max(),
        nodes: choices.into_iter().map(|c| (c.node, c.mask)).collect(),
    })
}
