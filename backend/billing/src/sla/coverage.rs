//! Availability arithmetic: how long an order had all of its nodes up, and
//! which credit tier a measured availability falls in.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A credit tier: below this availability, this share of the charges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreditTier {
    /// In hundredths of a percent: 9990 is 99.90 %.
    #[schema(minimum = 1, maximum = 10000)]
    pub below_permyriad: i32,
    #[schema(minimum = 1, maximum = 100)]
    pub credit_percent: i32,
}

/// Seconds of `[from, to)` during which at least `needed` of the `up`
/// intervals (`[start, end)`, Unix seconds) overlap.
pub fn covered(up: &[(i64, i64)], needed: usize, from: i64, to: i64) -> i64 {
    let mut edges: Vec<(i64, i32)> = up
        .iter()
        .map(|&(s, e)| (s.max(from), e.min(to)))
        .filter(|(s, e)| s < e)
        .flat_map(|(s, e)| [(s, 1), (e, -1)])
        .collect();
    // Ends before starts at the same second: touching intervals do not
    // count as overlapping.
    edges.sort_unstable();
    let (mut level, mut since, mut total) = (0_usize, from, 0);
    for (at, step) in edges {
        if level >= needed.max(1) {
            total += at - since;
        }
        level = if step > 0 {
            level + 1
        } else {
            level.saturating_sub(1)
        };
        since = at;
    }
    total
}

/// Availability in hundredths of a percent; full when nothing was expected.
pub fn availability_permyriad(expected: i64, downtime: i64) -> i32 {
    if expected <= 0 {
        return 10_000;
    }
    let up = (expected - downtime.clamp(0, expected)) * 10_000 / expected;
    i32::try_from(up).unwrap_or(10_000)
}

/// The largest credit among the tiers the availability falls below.
pub fn credit_percent(availability_permyriad: i32, tiers: &[CreditTier]) -> i32 {
    tiers
        .iter()
        .filter(|t| availability_permyriad < t.below_permyriad)
        .map(|t| t.credit_percent)
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gang_is_up_only_while_all_its_nodes_are() {
        // Two nodes: one up 0–100, the other 20–60 and again 70–100.
        let up = [(0, 100), (20, 60), (70, 100)];
        assert_eq!(covered(&up, 2, 0, 100), 40 + 30);
        assert_eq!(covered(&up, 1, 0, 100), 100);
        // Clipped to the window asked for.
        assert_eq!(covered(&up, 2, 50, 80), 10 + 10);
        // Back-to-back intervals of one node do not make two.
        assert_eq!(covered(&[(0, 10), (10, 20)], 2, 0, 20), 0);
    }

    #[test]
    fn tiers_pick_the_deepest_one_reached() {
        let tiers = [
            CreditTier {
                below_permyriad: 9990,
                credit_percent: 10,
            },
            CreditTier {
                below_permyriad: 9900,
                credit_percent: 25,
            },
            CreditTier {
                below_permyriad: 9500,
                credit_percent: 100,
            },
        ];
        assert_eq!(credit_percent(10_000, &tiers), 0);
        assert_eq!(credit_percent(9990, &tiers), 0);
        assert_eq!(credit_percent(9989, &tiers), 10);
        assert_eq!(credit_percent(9899, &tiers), 25);
        assert_eq!(credit_percent(2500, &tiers), 100);
        // 43 minutes down in a 30-day month is 99.90 %: no credit.
        let month = 30 * 86_400;
        assert_eq!(availability_permyriad(month, 43 * 60), 9990);
        assert_eq!(availability_permyriad(month, 44 * 60), 9989);
        assert_eq!(availability_permyriad(0, 0), 10_000);
    }
}
