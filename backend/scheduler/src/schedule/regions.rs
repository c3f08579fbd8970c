//! Time and place: which regions a workload tries, in which order, and
//! whether it waits for an off-peak window.

use super::{Cycle, NONE};
use crate::workload::Workload;

impl<'a> Cycle<'a> {
    /// The regions a workload may run in, resolved; `[]` for anywhere.
    pub(super) fn all_regions(&self, workload: &Workload) -> Vec<u32> {
        if workload.regions.is_empty() {
            return Vec::new();
        }
        let resolved: Vec<u32> = workload
            .regions
            .iter()
            .filter_map(|r| self.state.regions.get(r))
            .collect();
        if resolved.is_empty() {
            vec![NONE]
        } else {
            resolved
        }
    }

    /// The regions to try, one group at a time: deferrable work tries the
    /// cheapest region now first, other work its home region first.
    pub(super) fn region_groups(&self, workload: &Workload) -> Vec<Vec<u32>> {
        let regions = self.all_regions(workload);
        if regions.len() <= 1 {
            return vec![regions];
        }
        let mut groups: Vec<(u64, usize, u32)> = regions
            .iter()
            .enumerate()
            .map(|(position, region)| {
                let price = if self.policy.follow_the_sun && workload.class.is_deferrable() {
                    self.snap
                        .cluster
                        .region(self.state.regions.name(*region))
                        .and_then(|r| {
                            workload
                                .gpu_models
                                .iter()
                                .filter_map(|m| r.gpu_hour_price(m, self.now))
                                .min()
                        })
                        .unwrap_or(u64::MAX)
                } else {
                    0
                };
                (price, position, *region)
            })
            .collect();
        groups.sort_unstable();
        groups
            .into_iter()
            .map(|(_, _, region)| vec![region])
            .collect()
    }

    /// The off-peak window deferrable work waits for, when no region it may
    /// use is off-peak now and its deadline allows waiting.
    pub(super) fn deferral(&self, workload: &Workload) -> Option<(String, i64)> {
        if !self.policy.follow_the_sun || !workload.class.is_deferrable() {
            return None;
        }
        let (deadline, duration) = (workload.deadline?, workload.duration_estimate?);
        let windows: Vec<&crate::cluster::Region> = workload
            .regions
            .iter()
            .filter_map(|r| self.snap.cluster.region(r))
            .filter(|r| r.off_peak.is_some())
            .collect();
        if windows.is_empty() || windows.iter().any(|r| r.is_off_peak(self.now)) {
            return None;
        }
        let (region, at) = windows
            .iter()
            .filter_map(|r| r.next_off_peak(self.now).map(|at| (at, r.name.clone())))
            .min()
            .map(|(at, name)| (name, at))?;
        (at.saturating_sub(self.now) <= self.policy.max_deferral
            && at.saturating_add(duration) <= deadline)
            .then_some((region, at))
    }
}
