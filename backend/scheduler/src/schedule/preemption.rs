//! Preemption: evicting running work for higher-ranked work, for
//! reclaimed quota and for advance reservations, each with a grace period.

use super::{Cycle, NONE};
use crate::decision::{Preemption, PreemptionCause, Reason};
use crate::placement::Demand;
use crate::preempt::{Candidate, Status, evict};
use crate::state::{Hold, HoldFor, Holder};
use crate::workload::{GpuRequest, PriorityClass};

impl<'a> Cycle<'a> {
    pub(super) fn apply_advance_reservations(&mut self) {
        let now = self.now;
        let mut evictions: Vec<(u32, usize)> = Vec::new();
        for (index, reservation) in self.snap.reservations.iter().enumerate() {
            if reservation.end <= now {
                continue;
            }
            let ri = u32::try_from(index).unwrap_or(NONE);
            for placement in &reservation.placements {
                let Some(id) = self.state.node_id(&placement.node) else {
                    continue;
                };
                let mask = self.state.node(id).mask_of(&placement.gpus);
                if reservation.start <= now {
                    for alloc in &self.state.node(id).allocs {
                        if let Holder::Running(r) = alloc.holder
                            && alloc.mask & mask != 0
                            && self.snap.running[r as usize]
                                .workload
                                .reservation
                                .as_deref()
                                != Some(reservation.id.as_str())
                        {
                            evictions.push((r, index));
                        }
                    }
                }
                self.state.add_hold(
                    id,
                    Hold {
                        mask,
                        cpu: 0,
                        mem: 0,
                        from: reservation.start,
                        until: Some(reservation.end),
                        binding: true,
                        holder: HoldFor::Advance(ri),
                    },
                );
            }
        }
        evictions.sort_unstable();
        evictions.dedup_by_key(|(r, _)| *r);
        for (r, index) in evictions {
            let by = self.snap.reservations[index].id.clone();
            self.preempt(r, by, PreemptionCause::AdvanceReservation);
        }
    }

    fn preempt(&mut self, r: u32, by: String, cause: PreemptionCause) {
        let run = &mut self.runs[r as usize];
        if run.stopping {
            return;
        }
        run.stopping = true;
        let stop_at = self.now + self.policy.grace_seconds.max(0);
        self.state.set_release(Holder::Running(r), stop_at);
        self.decisions.preemptions.push(Preemption {
            workload: self.snap.running[r as usize].workload.id.clone(),
            by,
            cause,
            gpu_seconds_lost: self.runs[r as usize].loss,
            grace_seconds: self.policy.grace_seconds.max(0),
            stop_at,
        });
    }

    /// What running entry `r` is to a workload of `class` from `slot`,
    /// within its guarantee or not.
    fn status(&self, r: u32, class: PriorityClass, slot: usize, within: bool) -> Status {
        let run = &self.runs[r as usize];
        if run.stopping {
            return Status::Stopping;
        }
        let lower = run.class < class;
        let evictable = !run.protected
            && class != PriorityClass::Preemptible
            && ((self.policy.preemption && run.class == PriorityClass::Preemptible)
                || (self.policy.preemption && lower && (run.slot == slot || run.borrowing))
                || (self.policy.reclaim && within && run.slot != slot && run.borrowing));
        if !evictable {
            return Status::Kept;
        }
        Status::Evictable(Candidate {
            preemptible: run.class == PriorityClass::Preemptible,
            loss: run.loss,
        })
    }

    pub(super) fn try_preempt(
        &mut self,
        p: u32,
        slot: usize,
        model: u32,
        within: bool,
        regions: &[u32],
    ) -> Option<Reason> {
        let workload = &self.snap.pending[p as usize];
        if !(self.policy.preemption || self.policy.reclaim)
            || workload.priority == PriorityClass::Preemptible
            || !matches!(workload.gpus, GpuRequest::Whole(k) if k > 0)
        {
            return None;
        }
        let view = self.view(workload, self.now);
        let key = (
            self.fit_key(p, model, regions),
            workload.priority,
            slot,
            within,
        );
        if self.failed_evictions.contains(&key) || self.searches >= self.policy.preemption_searches
        {
            return None;
        }
        self.searches += 1;
        let demand = Demand {
            workload,
            model,
            regions: regions.to_vec(),
            view,
        };
        let status = |r: u32| self.status(r, workload.priority, slot, within);
        let Some(eviction) = evict(&self.state, &demand, &status) else {
            self.failed_evictions.insert(key);
            return None;
        };
        let victims = eviction.victims.len();
        for r in eviction.victims {
            let run = &self.runs[r as usize];
            let cause = if run.class < workload.priority
                && (run.slot == slot || !within || !self.policy.reclaim)
            {
                PreemptionCause::Priority
            } else {
                PreemptionCause::Reclaim
            };
            self.preempt(r, workload.id.clone(), cause);
        }
        let stop_at = (victims > 0).then_some(self.now + self.policy.grace_seconds.max(0));
        let hold = Hold {
            mask: 0,
            cpu: workload.cpu_milli_per_node,
            mem: workload.memory_mib_per_node,
            from: self.now,
            until: None,
            binding: true,
            holder: HoldFor::Preemptor(p),
        };
        self.hold_nodes(&eviction.nodes, &hold);
        let stopping = self.runs.iter().filter(|r| r.stopping).count();
        Some(Reason::WaitingForPreemption {
            victims: u32::try_from(if victims > 0 {
                victims
            } else {
                stopping.min(1)
            })
            .unwrap_or(NONE),
            until: stop_at.into_iter().chain(eviction.ready_at).max(),
        })
    }
}
