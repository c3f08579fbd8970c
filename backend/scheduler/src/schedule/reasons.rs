//! The reasons a workload waits, with numbers and counterfactuals.

use super::{ANY, Cycle};
use crate::decision::{NextRelease, Reason, Waiting};
use crate::placement::{Demand, eligible, find};
use crate::state::{FastMap, HoldFor, Holder, Mask, View, bits};
use crate::workload::{GpuRequest, Workload};

impl<'a> Cycle<'a> {
    fn hold_name(&self, holder: HoldFor) -> String {
        match holder {
            HoldFor::Planned(p) | HoldFor::Preemptor(p) => self.snap.pending[p as usize].id.clone(),
            HoldFor::Advance(r) => self.snap.reservations[r as usize].id.clone(),
        }
    }

    /// Free GPUs of `model` where `workload` may run, nodes with room for
    /// its per-node share, and the most free on one node. From the index
    /// unless labels narrow the nodes; held GPUs count as free here (the
    /// holds have their own reason).
    fn free_counts(
        &self,
        workload: &Workload,
        model: u32,
        regions: &[u32],
        per_node: u32,
    ) -> (u32, u32, u32) {
        if workload.required_labels.is_empty() {
            return self.state.free_summary(model, regions, per_node);
        }
        let mut counts = (0, 0, 0);
        for id in self.state.nodes_in(regions) {
            let node = self.state.node(id);
            if eligible(node, workload) {
                let free = bits(node.free_whole & node.model_mask(model));
                counts.0 += free;
                counts.1 += u32::from(free >= per_node);
                counts.2 = counts.2.max(free);
            }
        }
        counts
    }

    /// The reason a workload blocked on capacity waits, with the numbers.
    fn capacity_reason(&self, workload: &Workload, model: u32, regions: &[u32]) -> Reason {
        let name = self.state.models.name(model).to_owned();
        let GpuRequest::Whole(per_node) = workload.gpus else {
            let free_milli: u64 = self
                .state
                .nodes_in(regions)
                .into_iter()
                .map(|id| self.state.node(id))
                .filter(|node| eligible(node, workload))
                .flat_map(|node| node.gpus.iter())
                .filter(|g| g.model == model && g.healthy)
                .map(|g| u64::from(g.capacity() - g.used) * 1000 / u64::from(g.capacity()))
                .sum();
            return Reason::Capacity {
                model: name,
                free_milli,
                needed_milli: workload.total_milli(),
                next_release: None,
            };
        };
        let (free_total, with_room, largest) = self.free_counts(workload, model, regions, per_node);
        let needed = per_node * workload.node_count;
        if free_total < needed {
            return Reason::Capacity {
                model: name,
                free_milli: u64::from(free_total) * 1000,
                needed_milli: u64::from(needed) * 1000,
                next_release: None,
            };
        }
        if with_room >= workload.node_count {
            return Reason::CpuOrMemory {
                nodes_with_free_gpus: with_room,
            };
        }
        Reason::Fragmentation {
            model: name,
            free_gpus: free_total,
            gpus_per_node: per_node,
            nodes_needed: workload.node_count,
            nodes_with_room: with_room,
            largest_free_on_one_node: largest,
            next_release: None,
        }
    }

    /// The first node expected to free enough GPUs of `model` for one node's
    /// share of `workload`, as the cycle ends: the counterfactual behind a
    /// capacity reason.
    fn next_release(
        &self,
        workload: &Workload,
        model: u32,
        regions: &[u32],
    ) -> Option<NextRelease> {
        let GpuRequest::Whole(per_node) = workload.gpus else {
            return None;
        };
        // Free GPUs as the capacity reasons count them, holds aside: the
        // answer then depends on the workload's size only, not on its
        // duration, and is shared by every workload of that size.
        let mut next: Option<(i64, u32, Holder)> = None;
        for id in self.state.nodes_in(regions) {
            let node = self.state.node(id);
            if !eligible(node, workload) || !node.has_model(model) {
                continue;
            }
            let model_mask: Mask = node.model_mask(model);
            let free = bits(node.free_whole & model_mask);
            for alloc in &node.allocs {
                if let Some(at) = alloc.release_at
                    && at > self.now
                    && free + bits(alloc.mask & model_mask) >= per_node
                    && next.is_none_or(|(best, ..)| at < best)
                {
                    next = Some((at, id, alloc.holder));
                }
            }
        }
        next.map(|(at, id, holder)| NextRelease {
            at,
            workload: self.holder_name(holder),
            node: self.state.node(id).node.name.clone(),
        })
    }

    /// Whether holds for others are what keeps `workload` waiting: the
    /// first hold on the GPUs it would get if no hold counted.
    fn held_for(&self, workload: &Workload, model: u32, regions: &[u32]) -> Option<Reason> {
        let view = View {
            binding: false,
            ..self.view(workload, self.now)
        };
        let demand = Demand {
            workload,
            model,
            regions: regions.to_vec(),
            view,
        };
        let offers = find(&self.state, &demand, self.policy, &self.shapes)?;
        let own = self.view(workload, self.now);
        offers
            .iter()
            .flat_map(|offer| {
                self.state
                    .node(offer.node)
                    .holds
                    .iter()
                    .filter(move |h| h.binding && h.mask & offer.mask != 0)
            })
            .filter(|h| h.overlaps(own.from, own.until))
            .min_by_key(|h| h.from)
            .map(|hold| Reason::HeldForReservation {
                holder: self.hold_name(hold.holder),
                from: hold.from,
                fits_with_shorter_estimate: hold.from > self.now,
            })
    }

    /// Why a workload blocked on capacity waits, as the cluster stands when
    /// it was considered: the holds in its way and the capacity numbers.
    pub(super) fn blocked_reasons(&mut self, p: u32, model: u32) -> Vec<Reason> {
        let key = ((self.prepared[p as usize].shape, model, ANY), self.epoch);
        if let Some(found) = self.reasons.get(&key) {
            return found.clone();
        }
        let workload = &self.snap.pending[p as usize];
        let regions = &self.prepared[p as usize].regions;
        let held = if self.state.binding_holds > 0 {
            self.held_for(workload, model, regions)
        } else {
            None
        };
        // When holds are all that is in the way, capacity is not.
        let found = match held {
            Some(held) => vec![held],
            None => vec![self.capacity_reason(workload, model, regions)],
        };
        self.reasons.insert(key, found.clone());
        found
    }

    pub(super) fn explain(&mut self) {
        let waits = std::mem::take(&mut self.waits);
        let mut ahead: FastMap<u32, u32> = FastMap::default();
        let mut releases: FastMap<(u32, u32), Option<NextRelease>> = FastMap::default();
        for mut wait in waits {
            if !self.policy.reasons {
                if let Some(estimate) = wait.estimate {
                    self.decisions.waiting.push(Waiting {
                        workload: wait.workload.id.clone(),
                        reasons: Vec::new(),
                        estimated_start: Some(estimate.at),
                        estimate_confidence: Some(estimate.confidence),
                        estimate_rests_on: estimate.rests_on,
                    });
                }
                continue;
            }
            let p = wait.p as usize;
            for reason in &mut wait.reasons {
                if let (
                    Reason::Capacity { next_release, .. }
                    | Reason::Fragmentation { next_release, .. },
                    Some(model),
                ) = (reason, wait.models.first().copied())
                {
                    *next_release = releases
                        .entry((self.prepared[p].size, model))
                        .or_insert_with(|| {
                            self.next_release(wait.workload, model, &self.prepared[p].regions)
                        })
                        .clone();
                }
            }
            let before = wait
                .models
                .iter()
                .filter_map(|m| ahead.get(m))
                .copied()
                .max()
                .unwrap_or(0);
            if before > 0 {
                wait.reasons
                    .push(Reason::BehindHigherRanked { ahead: before });
            }
            for model in &wait.models {
                *ahead.entry(*model).or_default() += 1;
            }
            let estimate = wait.estimate;
            self.decisions.waiting.push(Waiting {
                workload: wait.workload.id.clone(),
                reasons: wait.reasons,
                estimated_start: estimate.as_ref().map(|e| e.at),
                estimate_confidence: estimate.as_ref().map(|e| e.confidence),
                estimate_rests_on: estimate.map(|e| e.rests_on).unwrap_or_default(),
            });
        }
        self.decisions
            .rejections
            .sort_by(|a, b| a.workload.cmp(&b.workload));
    }
}
