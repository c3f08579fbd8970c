//! The cluster model: regions with their clocks and prices, nodes in racks,
//! GPUs in NVLink domains.

use std::collections::{BTreeMap, BTreeSet};

/// Seconds in a day, for region-local clocks.
const DAY: i64 = 86_400;

/// One GPU of a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu {
    /// Index of the GPU on its node, as the node's driver numbers it.
    pub index: u32,
    /// The GPU model, such as `H100-SXM-80GB`.
    pub model: String,
    /// GPUs sharing an NVLink domain talk at NVLink speed; a multi-GPU job
    /// prefers to stay inside one.
    pub nvlink_domain: u32,
    /// Unhealthy GPUs are never allocated.
    pub healthy: bool,
    /// `Some(slices)` when the GPU runs in MIG mode, split into that many
    /// compute slices (7 on an H100); such a GPU serves only MIG requests.
    pub mig_slices: Option<u8>,
    /// The slices of each of its MIG instances when the node was set up
    /// with instances of one size (as NVIDIA's MIG profiles make them): a
    /// MIG request then fits only when it asks for exactly that size.
    /// `None` lets any request into the free slices.
    pub mig_instance_slices: Option<u8>,
}

/// One GPU server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Unique node name.
    pub name: String,
    /// Region, such as `eu-west-1`.
    pub region: String,
    /// Rack or block: nodes in one rack share a fast fabric.
    pub rack: String,
    /// Labels such as compliance tags (`eu-gdpr`).
    pub labels: BTreeSet<String>,
    /// CPU in thousandths of a core.
    pub cpu_milli: u64,
    /// Memory in MiB.
    pub memory_mib: u64,
    /// Cordoned or draining nodes take no new work.
    pub schedulable: bool,
    /// The node's GPUs; at most [`MAX_GPUS_PER_NODE`].
    pub gpus: Vec<Gpu>,
}

/// The most GPUs one node may have: free GPUs are tracked as bits of a
/// 64-bit word, which keeps every placement check a few instructions.
pub const MAX_GPUS_PER_NODE: usize = 64;

/// A local daily window in which a region's GPUs are cheaper.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffPeak {
    /// Start, in minutes after local midnight.
    pub start_minute: u32,
    /// End, in minutes after local midnight; before `start_minute` when the
    /// window crosses midnight.
    pub end_minute: u32,
    /// Price during the window, in thousandths of the normal price.
    pub price_permille: u32,
}

/// A region's clock and prices, for work that may choose where and when it
/// runs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Region {
    /// Region name, as nodes name it.
    pub name: String,
    /// Offset of local time from UTC, in minutes.
    pub utc_offset_minutes: i32,
    /// The off-peak window, if the region has one.
    pub off_peak: Option<OffPeak>,
    /// Price of one GPU-hour per GPU model, in micro-units of the currency.
    pub gpu_hour_micros: BTreeMap<String, u64>,
}

impl Region {
    fn local_second_of_day(&self, now: i64) -> i64 {
        now.saturating_add(i64::from(self.utc_offset_minutes) * 60)
            .rem_euclid(DAY)
    }

    /// Whether `now` (seconds since the epoch) falls in the off-peak window.
    pub fn is_off_peak(&self, now: i64) -> bool {
        let Some(window) = self.off_peak else {
            return false;
        };
        let minute = self.local_second_of_day(now) / 60;
        let (start, end) = (i64::from(window.start_minute), i64::from(window.end_minute));
        if start <= end {
            (start..end).contains(&minute)
        } else {
            minute >= start || minute < end
        }
    }

    /// The first moment at or after `now` inside the off-peak window.
    pub fn next_off_peak(&self, now: i64) -> Option<i64> {
        let window = self.off_peak?;
        if self.is_off_peak(now) {
            return Some(now);
        }
        let start = i64::from(window.start_minute) * 60;
        Some(now.saturating_add((start - self.local_second_of_day(now)).rem_euclid(DAY)))
    }

    /// The price of one GPU-hour of `model` at `now`, off-peak discount
    /// applied.
    pub fn gpu_hour_price(&self, model: &str, now: i64) -> Option<u64> {
        let base = *self.gpu_hour_micros.get(model)?;
        Some(match self.off_peak {
            Some(window) if self.is_off_peak(now) => {
                base.saturating_mul(u64::from(window.price_permille)) / 1000
            }
            _ => base,
        })
    }
}

/// Every node the engine may place work on, and the regions they are in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cluster {
    /// The nodes, in any order; the engine orders them by name itself.
    pub nodes: Vec<Node>,
    /// Region clocks and prices; a region without an entry has neither.
    pub regions: Vec<Region>,
}

impl Cluster {
    /// The region entry named `name`.
    pub fn region(&self, name: &str) -> Option<&Region> {
        self.regions.iter().find(|r| r.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(offset_hours: i32, start: u32, end: u32) -> Region {
        Region {
            name: "r".into(),
            utc_offset_minutes: offset_hours * 60,
            off_peak: Some(OffPeak {
                start_minute: start * 60,
                end_minute: end * 60,
                price_permille: 600,
            }),
            gpu_hour_micros: [("H100".to_owned(), 2_000_000)].into(),
        }
    }

    #[test]
    fn off_peak_windows_follow_local_time_and_may_cross_midnight() {
        // 2026-12-02 12:00 UTC.
        let noon = 1_796_212_800;
        let night = region(0, 22, 6);
        assert!(!night.is_off_peak(noon));
        assert_eq!(night.next_off_peak(noon), Some(noon + 10 * 3_600));
        assert!(night.is_off_peak(noon + 11 * 3_600));
        assert!(night.is_off_peak(noon + 17 * 3_600));
        assert!(!night.is_off_peak(noon + 18 * 3_600));
        // Twelve hours ahead, noon UTC is midnight local.
        assert!(region(12, 22, 6).is_off_peak(noon));
        assert!(region(0, 9, 17).is_off_peak(noon));
    }

    #[test]
    fn prices_drop_off_peak() {
        let noon = 1_796_212_800;
        let night = region(0, 22, 6);
        assert_eq!(night.gpu_hour_price("H100", noon), Some(2_000_000));
        assert_eq!(
            night.gpu_hour_price("H100", noon + 12 * 3_600),
            Some(1_200_000)
        );
        assert_eq!(night.gpu_hour_price("A100", noon), None);
    }
}
