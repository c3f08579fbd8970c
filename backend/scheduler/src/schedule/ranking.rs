//! Ranking: within a queue, each class's work by deadline urgency and
//! then shortest estimated duration first (with a bounded delay), classes
//! merged by class points, aging and urgency; weighted fair share between
//! queues, merged in one heap of queue heads.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

use super::Cycle;
use crate::workload::{PriorityClass, Workload};

/// The head of one queue in the cross-queue heap.
struct Head<'a> {
    /// Work within its queue's guarantee goes before work that would
    /// borrow, whatever their classes: otherwise a borrower could take back
    /// the GPUs a reclaim just freed, again and again.
    within: bool,
    key: f64,
    submitted: i64,
    id: &'a str,
    slot: usize,
    position: usize,
}

impl PartialEq for Head<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Head<'_> {}

impl PartialOrd for Head<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Head<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.within
            .cmp(&other.within)
            .then(self.key.total_cmp(&other.key))
            .then(other.submitted.cmp(&self.submitted))
            .then(other.id.cmp(self.id))
    }
}

/// Rank points of a priority class: one class is worth 1,000.
fn class_points(class: PriorityClass) -> f64 {
    f64::from(class as u8) * 1_000.0
}

impl<'a> Cycle<'a> {
    pub(super) fn score(&self, workload: &Workload) -> f64 {
        let waited_hours = self
            .now
            .saturating_sub(workload.submitted_at)
            .saturating_sub(self.policy.aging_after)
            .max(0) as f64
            / 3_600.0;
        let aging = (self.policy.aging_per_hour * waited_hours).min(self.policy.aging_cap);
        class_points(workload.priority) + aging + self.urgency(workload)
    }

    /// Points of deadline urgency: none while the slack exceeds the window.
    fn urgency(&self, workload: &Workload) -> f64 {
        workload.deadline.map_or(0.0, |deadline| {
            let slack = deadline
                .saturating_sub(self.now)
                .saturating_sub(workload.duration_estimate.unwrap_or(0));
            let window = self.policy.deadline_window.max(1);
            if slack >= window {
                0.0
            } else {
                self.policy.deadline_boost * (1.0 - slack.max(0) as f64 / window as f64)
            }
        })
    }

    /// The time a workload ranks as if it had arrived within its class:
    /// its arrival plus a multiple of its estimated duration, at most the
    /// policy's horizon, which work that states no duration gets whole.
    pub(super) fn virtual_arrival(&self, workload: &Workload) -> f64 {
        let horizon = self.policy.shorter_first_horizon.max(0) as f64;
        let delay = workload.duration_estimate.map_or(horizon, |seconds| {
            (self.policy.shorter_first_factor * seconds.max(0) as f64).min(horizon)
        });
        workload.submitted_at as f64 + delay
    }

    /// One queue's admitted work, `(index, score)`, in the order it is
    /// taken: each class by urgency and then virtual arrival, the classes
    /// merged by their heads' scores. Aging and class then decide between
    /// classes without undoing the shortest-first order within one.
    pub(super) fn order(&self, mut list: Vec<(u32, f64)>) -> Vec<(u32, f64)> {
        let pending = self.snap.pending;
        let keyed: Vec<(f64, f64)> = list
            .iter()
            .map(|(p, _)| {
                let workload = &pending[*p as usize];
                (self.urgency(workload), self.virtual_arrival(workload))
            })
            .collect();
        let mut by_position: Vec<usize> = (0..list.len()).collect();
        by_position.sort_by(|a, b| {
            let (wa, wb) = (&pending[list[*a].0 as usize], &pending[list[*b].0 as usize]);
            wb.priority
                .cmp(&wa.priority)
                .then(keyed[*b].0.total_cmp(&keyed[*a].0))
                .then(keyed[*a].1.total_cmp(&keyed[*b].1))
                .then(wa.submitted_at.cmp(&wb.submitted_at))
                .then_with(|| wa.id.cmp(&wb.id))
        });
        let mut classes: Vec<VecDeque<(u32, f64)>> = Vec::new();
        let mut last = None;
        for position in by_position {
            let entry = list[position];
            let class = pending[entry.0 as usize].priority;
            if last != Some(class) {
                classes.push(VecDeque::new());
                last = Some(class);
            }
            if let Some(group) = classes.last_mut() {
                group.push_back(entry);
            }
        }
        list.clear();
        loop {
            let best = classes
                .iter()
                .enumerate()
                .filter_map(|(index, group)| group.front().map(|head| (index, head)))
                .max_by(|(_, a), (_, b)| {
                    let (wa, wb) = (&pending[a.0 as usize], &pending[b.0 as usize]);
                    a.1.total_cmp(&b.1)
                        .then(wb.submitted_at.cmp(&wa.submitted_at))
                        .then_with(|| wb.id.cmp(&wa.id))
                })
                .map(|(index, _)| index);
            let Some(entry) = best.and_then(|index| classes[index].pop_front()) else {
                break;
            };
            list.push(entry);
        }
        list
    }

    /// A queue's weighted dominant share: its largest share of any GPU
    /// model, from decayed past usage and what it holds now, over its
    /// weight.
    fn share(&self, slot: usize) -> f64 {
        let half_life = self.snap.usage.half_life() as f64;
        let mut dominant: f64 = 0.0;
        for (model, capacity) in &self.state.capacity_milli {
            let capacity = *capacity as f64;
            if capacity <= 0.0 {
                continue;
            }
            let past = self.history.get(&(slot, *model)).copied().unwrap_or(0.0)
                * 1000.0
                * std::f64::consts::LN_2
                / half_life;
            let now = self.used.get(&(slot, *model)).copied().unwrap_or(0) as f64;
            dominant = dominant.max((past + now) / capacity);
        }
        dominant / self.slots[slot].weight
    }

    fn fairness(&self, slot: usize) -> f64 {
        self.fair.get(slot).copied().unwrap_or(0.0)
    }

    /// Recomputes a slot's fair-share penalty: up to half a class, growing
    /// with its weighted dominant share.
    pub(super) fn refresh_fairness(&mut self, slot: usize) {
        if self.fair.len() < self.slots.len() {
            self.fair.resize(self.slots.len(), 0.0);
        }
        if self.policy.fair_share {
            let share = self.share(slot);
            self.fair[slot] = 500.0 * share / (1.0 + share);
        }
    }

    fn head(&self, slot: usize, position: usize, ranked: &[Vec<(u32, f64)>]) -> Option<Head<'a>> {
        let pending = self.snap.pending;
        let (p, score) = ranked[slot].get(position)?;
        let workload = &pending[*p as usize];
        let within = self.prepared[*p as usize]
            .models
            .iter()
            .any(|model| self.quota(slot, workload, *model) == Ok(true));
        Some(Head {
            within,
            key: score - self.fairness(slot),
            submitted: workload.submitted_at,
            id: &workload.id,
            slot,
            position,
        })
    }

    pub(super) fn run(&mut self, ranked: Vec<Vec<(u32, f64)>>) {
        for slot in 0..self.slots.len() {
            self.refresh_fairness(slot);
        }
        let mut heap: BinaryHeap<Head<'a>> = (0..ranked.len())
            .filter_map(|slot| self.head(slot, 0, &ranked))
            .collect();
        while let Some(head) = heap.pop() {
            // Behind a strict block nothing starts; with no reasons to give
            // and no estimates left to plan, the rest need no look.
            if self.closed && !self.policy.reasons && self.planned >= self.policy.planning_depth {
                break;
            }
            let (p, _) = ranked[head.slot][head.position];
            self.process(p, head.slot);
            if let Some(next) = self.head(head.slot, head.position + 1, &ranked) {
                heap.push(next);
            }
        }
    }
}
