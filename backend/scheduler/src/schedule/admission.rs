//! Admission: what can never run is rejected with a reason; quotas decide
//! what may run now.

use std::rc::Rc;

use super::{Cycle, NONE, Prepared, ShapeKey};
use crate::decision::{QuotaLimit, Reason, RejectReason, Rejection};
use crate::placement::{ShapeTally, shapes_of};
use crate::state::{FastMap, FastSet};
use crate::workload::{GpuRequest, PriorityClass, Workload};

/// A workload's GPU models and regions as ids, shared by the work that
/// names the same ones.
type Resolved = (Rc<[u32]>, Rc<[u32]>);

impl<'a> Cycle<'a> {
    /// Why `workload` can never be admitted, if it cannot.
    fn refusal(
        &self,
        p: u32,
        could: &mut FastMap<(ShapeKey<'a>, u32), u32>,
    ) -> Option<RejectReason> {
        let workload: &'a Workload = &self.snap.pending[p as usize];
        let prepared = &self.prepared[p as usize];
        let invalid = |message: &str| Some(RejectReason::Invalid(message.to_owned()));
        match workload.gpus {
            GpuRequest::Whole(k) if k as usize > crate::cluster::MAX_GPUS_PER_NODE => {
                return invalid("more GPUs per node than any node has");
            }
            GpuRequest::Milli(m) if m == 0 || m >= 1000 => {
                return invalid("a GPU fraction is 1 to 999 thousandths");
            }
            GpuRequest::Mig(0) => return invalid("a MIG request needs at least one slice"),
            GpuRequest::Milli(_) | GpuRequest::Mig(_) if workload.node_count > 1 => {
                return invalid("a GPU fraction runs on one node");
            }
            _ => {}
        }
        if workload.node_count == 0 {
            return invalid("node count must be at least 1");
        }
        if workload.gpus != GpuRequest::Whole(0) && workload.gpu_models.is_empty() {
            return invalid("no GPU model given");
        }
        if self.policy.quotas
            && !self.snap.queues.is_empty()
            && self
                .slot_ids
                .get(workload.queue.as_str())
                .is_none_or(|s| self.slots[*s].config.is_none())
        {
            return Some(RejectReason::UnknownQueue(workload.queue.clone()));
        }
        if let Some(id) = &workload.reservation {
            let fits = self.reservations.get(id.as_str()).is_some_and(|r| {
                let reservation = &self.snap.reservations[*r as usize];
                reservation.queue == workload.queue && reservation.end > self.now
            });
            if !fits {
                return Some(RejectReason::UnknownReservation(id.clone()));
            }
        }
        // What a node must have to host one node's share: the same for
        // every node count.
        let host = ShapeKey {
            gpus: workload.gpus,
            nodes: 0,
            cpu: workload.cpu_milli_per_node,
            mem: workload.memory_mib_per_node,
            labels: &workload.required_labels,
            regions: &workload.regions,
        };
        let best = prepared
            .models
            .iter()
            .map(|model| {
                *could
                    .entry((host.clone(), *model))
                    .or_insert_with(|| self.nodes_that_could(workload, *model, &prepared.regions))
            })
            .max()
            .unwrap_or(0);
        if best < workload.node_count {
            return Some(RejectReason::NeverFits {
                nodes_needed: workload.node_count,
                nodes_that_could: best,
            });
        }
        self.over_max(workload)
    }

    fn nodes_that_could(&self, workload: &Workload, model: u32, regions: &[u32]) -> u32 {
        let count = self
            .state
            .nodes_in(regions)
            .into_iter()
            .filter(|id| {
                let node = self.state.node(*id);
                let gpus = node.gpus.iter().filter(|g| g.model == model);
                workload.required_labels.is_subset(&node.node.labels)
                    && node.node.cpu_milli >= workload.cpu_milli_per_node
                    && node.node.memory_mib >= workload.memory_mib_per_node
                    && match workload.gpus {
                        GpuRequest::Whole(0) => true,
                        GpuRequest::Whole(k) => {
                            gpus.filter(|g| g.mig_slices.is_none()).count() >= k as usize
                        }
                        GpuRequest::Milli(_) => gpus.clone().any(|g| g.mig_slices.is_none()),
                        GpuRequest::Mig(s) => gpus.clone().any(|g| {
                            g.mig_slices.is_some_and(|t| t >= s)
                                && g.mig_instance_slices.is_none_or(|size| size == s)
                        }),
                    }
            })
            .count();
        u32::try_from(count).unwrap_or(NONE)
    }

    fn over_max(&self, workload: &Workload) -> Option<RejectReason> {
        if !self.policy.quotas || workload.gpus == GpuRequest::Whole(0) {
            return None;
        }
        let config = self
            .slot_ids
            .get(workload.queue.as_str())
            .and_then(|s| self.slots[*s].config)?;
        let needed = workload.total_milli();
        let mut ceilings = Vec::new();
        for model in &workload.gpu_models {
            match config.quota(model).max {
                Some(max) if u64::from(max) * 1000 < needed => ceilings.push((max, model)),
                _ => return None,
            }
        }
        ceilings.sort();
        ceilings.last().map(|(max, model)| RejectReason::OverQuota {
            model: (*model).clone(),
            needed_milli: needed,
            max_milli: u64::from(*max) * 1000,
        })
    }

    /// Resolves every pending workload's models, regions and shape once.
    fn prepare(&mut self) {
        let pending = self.snap.pending;
        let mut ids: FastMap<(u32, Option<i64>, Option<u32>), u32> =
            FastMap::with_capacity_and_hasher(pending.len(), Default::default());
        let mut sizes: FastMap<ShapeKey<'a>, u32> =
            FastMap::with_capacity_and_hasher(pending.len(), Default::default());
        // Work of one kind tends to share its models and regions: resolve
        // them once for a run of equal lists.
        let mut last: Option<(&Workload, Resolved)> = None;
        let prepared = pending
            .iter()
            .map(|workload| {
                let (models, regions) = match &last {
                    Some((seen, (models, regions)))
                        if seen.gpu_models == workload.gpu_models
                            && seen.regions == workload.regions
                            && (seen.gpus == GpuRequest::Whole(0))
                                == (workload.gpus == GpuRequest::Whole(0)) =>
                    {
                        (models.clone(), regions.clone())
                    }
                    _ => {
                        let models: Rc<[u32]> = self.models_of(workload).into();
                        let regions: Rc<[u32]> = self.all_regions(workload).into();
                        last = Some((workload, (models.clone(), regions.clone())));
                        (models, regions)
                    }
                };
                let size = ShapeKey {
                    gpus: workload.gpus,
                    nodes: workload.node_count,
                    cpu: workload.cpu_milli_per_node,
                    mem: workload.memory_mib_per_node,
                    labels: &workload.required_labels,
                    regions: &workload.regions,
                };
                let next_size = u32::try_from(sizes.len()).unwrap_or(NONE);
                let size = *sizes.entry(size).or_insert(next_size);
                let next = u32::try_from(ids.len()).unwrap_or(NONE);
                let key = (
                    size,
                    workload.duration_estimate,
                    self.reservation_of(workload),
                );
                Prepared {
                    size,
                    shape: *ids.entry(key).or_insert(next),
                    models,
                    regions,
                }
            })
            .collect();
        self.prepared = prepared;
    }

    /// Rejects what can never run and ranks the rest, per queue.
    pub(super) fn admit(&mut self) -> Vec<Vec<(u32, f64)>> {
        self.prepare();
        let mut could = FastMap::default();
        let mut seen: FastSet<&str> =
            FastSet::with_capacity_and_hasher(self.snap.pending.len(), Default::default());
        let mut lists: Vec<Vec<(u32, f64)>> = Vec::new();
        let mut shapes = ShapeTally::default();
        for (index, workload) in self.snap.pending.iter().enumerate() {
            let p = u32::try_from(index).unwrap_or(NONE);
            let refusal = if seen.insert(&workload.id) {
                self.refusal(p, &mut could)
            } else {
                Some(RejectReason::Invalid("duplicate workload id".to_owned()))
            };
            if let Some(reason) = refusal {
                self.decisions.rejections.push(Rejection {
                    workload: workload.id.clone(),
                    reason,
                });
                continue;
            }
            let slot = self.slot(&workload.queue);
            if lists.len() < self.slots.len() {
                lists.resize_with(self.slots.len(), Vec::new);
            }
            lists[slot].push((p, self.score(workload)));
            shapes.add(self.prepared[index].models.iter().copied(), workload);
        }
        self.shapes = shapes_of(shapes);
        let pending = self.snap.pending;
        for (slot, list) in lists.iter_mut().enumerate() {
            let limit = self.slots[slot]
                .config
                .and_then(|q| q.max_pending)
                .filter(|_| self.policy.quotas);
            if let Some(limit) = limit
                && list.len() > limit as usize
            {
                list.sort_by(|a, b| {
                    let (wa, wb) = (&pending[a.0 as usize], &pending[b.0 as usize]);
                    wa.submitted_at
                        .cmp(&wb.submitted_at)
                        .then_with(|| wa.id.cmp(&wb.id))
                });
                for (p, _) in list.drain(limit as usize..) {
                    self.decisions.rejections.push(Rejection {
                        workload: pending[p as usize].id.clone(),
                        reason: RejectReason::QueueFull { limit },
                    });
                }
            }
            *list = self.order(std::mem::take(list));
        }
        lists
    }

    /// Whether `workload` may use `model` under its queue's quota: `Ok`
    /// with whether it stays within the guarantee, or the quota reason.
    pub(super) fn quota(
        &self,
        slot: usize,
        workload: &Workload,
        model: u32,
    ) -> Result<bool, Reason> {
        let config = match self.slots[slot].config {
            Some(config) if self.policy.quotas && model != NONE => config,
            _ => return Ok(false),
        };
        let name = self.state.models.name(model);
        let quota = self.quotas.get(&(slot, model)).copied().unwrap_or_default();
        let used = self.used.get(&(slot, model)).copied().unwrap_or(0);
        let needed = workload.total_milli();
        let after = used + needed;
        let reason = |limit_milli: u64, limit: QuotaLimit| Reason::Quota {
            queue: config.name.clone(),
            model: name.to_owned(),
            used_milli: used,
            limit_milli,
            needed_milli: needed,
            limit,
        };
        if let Some(max) = quota.max
            && after > u64::from(max) * 1000
        {
            return Err(reason(u64::from(max) * 1000, QuotaLimit::Max));
        }
        let guaranteed = u64::from(quota.guaranteed) * 1000;
        if after <= guaranteed {
            return Ok(true);
        }
        if workload.priority == PriorityClass::Preemptible {
            return Ok(false);
        }
        match quota.borrow_limit {
            Some(limit) if after > guaranteed + u64::from(limit) * 1000 => Err(reason(
                guaranteed + u64::from(limit) * 1000,
                QuotaLimit::Borrowing,
            )),
            _ => Ok(false),
        }
    }
}
