//! Rating storage: GiB-seconds a volume held, at the storage price in
//! force each second, per GiB-month of 730 hours. Each price's share is
//! rounded once, half up, so an invoice line is exact to the micro-unit.

use chrono::{DateTime, Utc};
use uuid::Uuid;

/// Seconds of the month storage is priced by: 730 hours, a year's twelfth
/// in whole hours.
pub const MONTH_SECONDS: i64 = 730 * 3600;

/// One version of a storage price for one kind of volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    /// `None`: everywhere a region has no price of its own.
    pub region_id: Option<Uuid>,
    pub gib_month_micros: i64,
    pub effective_from: DateTime<Utc>,
}

/// A size held from one moment to another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Held {
    pub size_gib: i64,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
}

/// What one price charged: GiB-seconds at it, and their amount. No price
/// (`None`) charges nothing and says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Charge {
    pub gib_month_micros: Option<i64>,
    pub gib_seconds: i64,
    pub amount_micros: i64,
}

/// The price in force in `region` at `at`: the region's latest version by
/// then, else the latest one for every region.
fn in_force(versions: &[Version], region: Uuid, at: DateTime<Utc>) -> Option<i64> {
    let latest = |wanted: Option<Uuid>| {
        versions
            .iter()
            .filter(|v| v.region_id == wanted && v.effective_from <= at)
            .max_by_key(|v| v.effective_from)
            .map(|v| v.gib_month_micros)
    };
    latest(Some(region)).or_else(|| latest(None))
}

/// Rates what a volume of `region` held, `versions` being the prices of
/// its kind: one charge per price met, in the order first met.
pub fn rate(region: Uuid, held: &[Held], versions: &[Version]) -> Vec<Charge> {
    let mut charges: Vec<Charge> = Vec::new();
    for piece in held {
        let mut cuts: Vec<DateTime<Utc>> = versions
            .iter()
            .filter(|v| v.region_id.is_none_or(|r| r == region))
            .map(|v| v.effective_from)
            .filter(|at| *at > piece.from && *at < piece.to)
            .collect();
        cuts.sort();
        cuts.dedup();
        let mut from = piece.from;
        for to in cuts.into_iter().chain([piece.to]) {
            let seconds = (to - from).num_seconds();
            let price = in_force(versions, region, from);
            let gib_seconds = piece.size_gib.saturating_mul(seconds);
            match charges.iter_mut().find(|c| c.gib_month_micros == price) {
                Some(charge) => charge.gib_seconds += gib_seconds,
                None => charges.push(Charge {
                    gib_month_micros: price,
                    gib_seconds,
                    amount_micros: 0,
                }),
            }
            from = to;
        }
    }
    for charge in &mut charges {
        charge.amount_micros = charge
            .gib_month_micros
            .map_or(0, |price| amount(charge.gib_seconds, price));
    }
    charges
}

/// GiB-seconds at a price per GiB-month, rounded half up.
pub fn amount(gib_seconds: i64, gib_month_micros: i64) -> i64 {
    let exact = i128::from(gib_seconds) * i128::from(gib_month_micros);
    let month = i128::from(MONTH_SECONDS);
    i64::try_from((exact + month / 2).div_euclid(month)).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn at(day: u32, hour: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 3, day, hour, 0, 0)
            .single()
            .expect("time")
    }

    #[test]
    fn a_month_of_a_gib_costs_its_price() {
        let region = Uuid::now_v7();
        let versions = [Version {
            region_id: None,
            gib_month_micros: 100_000,
            effective_from: at(1, 0),
        }];
        let held = [Held {
            size_gib: 10,
            from: at(1, 0),
            to: at(1, 0) + chrono::TimeDelta::seconds(MONTH_SECONDS),
        }];
        assert_eq!(
            rate(region, &held, &versions),
            vec![Charge {
                gib_month_micros: Some(100_000),
                gib_seconds: 10 * MONTH_SECONDS,
                amount_micros: 1_000_000,
            }]
        );
    }

    #[test]
    fn a_price_change_and_a_regions_own_price_split_the_seconds() {
        let (here, elsewhere) = (Uuid::now_v7(), Uuid::now_v7());
        let versions = [
            Version {
                region_id: None,
                gib_month_micros: 70_000,
                effective_from: at(1, 0),
            },
            Version {
                region_id: Some(here),
                gib_month_micros: 90_000,
                effective_from: at(10, 12),
            },
            Version {
                region_id: Some(elsewhere),
                gib_month_micros: 1,
                effective_from: at(5, 0),
            },
        ];
        // Grown from 4 to 6 GiB on the 8th; the region's own price from the
        // 10th at noon.
        let held = [
            Held {
                size_gib: 4,
                from: at(2, 0),
                to: at(8, 0),
            },
            Held {
                size_gib: 6,
                from: at(8, 0),
                to: at(12, 0),
            },
        ];
        let charges = rate(here, &held, &versions);
        let before = 4 * 6 * 86_400 + 6 * (2 * 86_400 + 12 * 3600);
        let after = 6 * (36 * 3600);
        assert_eq!(
            charges,
            vec![
                Charge {
                    gib_month_micros: Some(70_000),
                    gib_seconds: before,
                    amount_micros: amount(before, 70_000),
                },
                Charge {
                    gib_month_micros: Some(90_000),
                    gib_seconds: after,
                    amount_micros: amount(after, 90_000),
                },
            ]
        );
        // 3,369,600 GiB-seconds × 70,000 / 2,628,000 = 89,753.42… → 89,753.
        assert_eq!(amount(before, 70_000), 89_753);
    }

    #[test]
    fn time_before_any_price_is_shown_and_not_charged() {
        let region = Uuid::now_v7();
        let held = [Held {
            size_gib: 1,
            from: at(1, 0),
            to: at(1, 1),
        }];
        assert_eq!(
            rate(region, &held, &[]),
            vec![Charge {
                gib_month_micros: None,
                gib_seconds: 3600,
                amount_micros: 0,
            }]
        );
    }

    #[test]
    fn halves_round_up() {
        assert_eq!(amount(MONTH_SECONDS / 2, 1), 1);
        assert_eq!(amount(MONTH_SECONDS / 2 - 1, 1), 0);
    }
}
