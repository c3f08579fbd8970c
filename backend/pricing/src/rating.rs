//! Rating: usage spans priced second by second against the price that was
//! in force each second (prices are versioned, never edited), the region's
//! off-peak multiplier at that local time, and the pricing class.
//!
//! Rounding: a line accumulates exact instance-seconds at one price and one
//! multiplier; its amount, seconds × hourly price × multiplier ÷ 3,600,000,
//! is rounded once, half up, to a micro-unit. A discount is rounded once the
//! same way. Totals are sums of lines, so they reconcile to the micro-unit.

use std::collections::HashMap;

use chrono::{Offset, TimeZone, Timelike};
use uuid::Uuid;

use gantry_types::classes::PricingClass;

/// One version of a price, as rows of the `prices` table give it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PriceVersion {
    pub instance_type_id: Uuid,
    pub pricing_class: PricingClass,
    /// `None`: everywhere a region has no price of its own in force.
    pub region_id: Option<Uuid>,
    /// Unix seconds.
    pub effective_from: i64,
    pub hourly_micros: i64,
}

/// Every price version, by instance type and pricing class.
#[derive(Debug, Default)]
pub struct PriceBook {
    versions: HashMap<(Uuid, PricingClass), Vec<PriceVersion>>,
}

impl PriceBook {
    /// `versions` in the order they were made: of two versions taking
    /// effect at the same second, the later one wins.
    pub fn new(versions: impl IntoIterator<Item = PriceVersion>) -> Self {
        let mut book = Self::default();
        for v in versions {
            book.versions
                .entry((v.instance_type_id, v.pricing_class))
                .or_default()
                .push(v);
        }
        for list in book.versions.values_mut() {
            list.sort_by_key(|v| v.effective_from);
        }
        book
    }

    fn applicable(
        &self,
        instance_type: Uuid,
        class: PricingClass,
        region: Uuid,
    ) -> impl Iterator<Item = &PriceVersion> {
        self.versions
            .get(&(instance_type, class))
            .into_iter()
            .flatten()
            .filter(move |v| v.region_id.is_none_or(|r| r == region))
    }

    /// The hourly price at `t`: the region's own latest version in force,
    /// else the latest version for everywhere.
    pub fn at(
        &self,
        instance_type: Uuid,
        class: PricingClass,
        region: Uuid,
        t: i64,
    ) -> Option<i64> {
        let in_force = |own: bool| {
            self.applicable(instance_type, class, region)
                .filter(|v| v.region_id.is_some() == own && v.effective_from <= t)
                .last()
                .map(|v| v.hourly_micros)
        };
        in_force(true).or_else(|| in_force(false))
    }

    /// The first moment after `t` at which a version for this instance
    /// type, class and region takes effect.
    fn next_change(
        &self,
        instance_type: Uuid,
        class: PricingClass,
        region: Uuid,
        t: i64,
    ) -> Option<i64> {
        self.applicable(instance_type, class, region)
            .map(|v| v.effective_from)
            .find(|from| *from > t)
    }
}

/// A region's local clock and off-peak window.
#[derive(Debug, Clone, Copy)]
pub struct RegionClock {
    pub time_zone: chrono_tz::Tz,
    /// Local start hour, end hour (may wrap past midnight) and the share
    /// of the price charged inside, in thousandths.
    pub off_peak: Option<(u32, u32, u32)>,
}

impl RegionClock {
    fn local(&self, t: i64) -> Option<chrono::DateTime<chrono_tz::Tz>> {
        chrono::DateTime::from_timestamp(t, 0).map(|utc| utc.with_timezone(&self.time_zone))
    }

    /// The share of the price charged at `t`, in thousandths.
    pub fn permille_at(&self, t: i64) -> u32 {
        let (Some((start, end, permille)), Some(local)) = (self.off_peak, self.local(t)) else {
            return 1000;
        };
        let hour = local.hour();
        let inside = if start <= end {
            (start..end).contains(&hour)
        } else {
            hour >= start || hour < end
        };
        if inside { permille } else { 1000 }
    }

    /// The next local hour boundary after `t`: the multiplier can change
    /// only there.
    fn next_hour(&self, t: i64) -> i64 {
        let offset = self.local(t).map_or(0, |local| {
            i64::from(
                self.time_zone
                    .offset_from_utc_datetime(&local.naive_utc())
                    .fix()
                    .local_minus_utc(),
            )
        });
        t + 3600 - (t + offset).rem_euclid(3600)
    }
}

/// A usage record as rating sees it.
#[derive(Debug, Clone, Copy)]
pub struct Span {
    pub instance_type_id: Uuid,
    pub region_id: Uuid,
    pub pricing_class: PricingClass,
    pub start: i64,
    pub end: i64,
    /// The last seconds of the span, down through a provider fault.
    pub excluded: i64,
    pub gpus: i64,
    /// The share of each GPU, in thousandths (1000 for whole GPUs).
    pub gpu_milli: i64,
}

/// What one invoice line gathers: one instance type, region, pricing class,
/// hourly price and multiplier.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LineKey {
    pub instance_type_id: Uuid,
    pub region_id: Uuid,
    pub pricing_class: PricingClass,
    /// `None`: no price was in force (charged nothing, and shown).
    pub hourly_micros: Option<i64>,
    pub permille: u32,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Instance-seconds.
    pub seconds: i64,
    /// GPU-seconds weighted by the share of each GPU, in thousandths:
    /// kept exact, rounded once per line.
    pub gpu_milli_seconds: i64,
}

impl Tally {
    fn add(&mut self, seconds: i64, span: &Span) {
        self.seconds += seconds;
        self.gpu_milli_seconds += seconds * span.gpus * span.gpu_milli;
    }

    /// GPU-seconds × share, rounded down to a second.
    pub fn gpu_seconds(&self) -> i64 {
        self.gpu_milli_seconds / 1000
    }
}

#[derive(Debug, Default)]
pub struct Rated {
    pub usage: HashMap<LineKey, Tally>,
    /// Excluded time by instance type, region and pricing class.
    pub downtime: HashMap<(Uuid, Uuid, PricingClass), Tally>,
}

/// Rates `spans`; a region without a clock is charged at full price in UTC.
pub fn rate<'a>(
    spans: impl IntoIterator<Item = &'a Span>,
    book: &PriceBook,
    clocks: &HashMap<Uuid, RegionClock>,
) -> Rated {
    let utc = RegionClock {
        time_zone: chrono_tz::UTC,
        off_peak: None,
    };
    let mut rated = Rated::default();
    for s in spans {
        let clock = clocks.get(&s.region_id).unwrap_or(&utc);
        let billable_end = s.end - s.excluded.clamp(0, s.end - s.start);
        if billable_end < s.end {
            rated
                .downtime
                .entry((s.instance_type_id, s.region_id, s.pricing_class))
                .or_default()
                .add(s.end - billable_end, s);
        }
        let mut t = s.start;
        while t < billable_end {
            let mut next = billable_end.min(clock.next_hour(t));
            if let Some(change) =
                book.next_change(s.instance_type_id, s.pricing_class, s.region_id, t)
            {
                next = next.min(change);
            }
            let key = LineKey {
                instance_type_id: s.instance_type_id,
                region_id: s.region_id,
                pricing_class: s.pricing_class,
                hourly_micros: book.at(s.instance_type_id, s.pricing_class, s.region_id, t),
                permille: clock.permille_at(t),
            };
            rated.usage.entry(key).or_default().add(next - t, s);
            t = next;
        }
    }
    rated
}

/// Divides, rounding half up; `denominator` is positive.
fn round_half_up(numerator: i128, denominator: i128) -> i64 {
    let rounded = (2 * numerator + denominator).div_euclid(2 * denominator);
    i64::try_from(rounded).unwrap_or(if rounded < 0 { i64::MIN } else { i64::MAX })
}

/// The charge for `seconds` at `hourly_micros` per hour and `permille` of it.
pub fn amount(seconds: i64, hourly_micros: i64, permille: u32) -> i64 {
    round_half_up(
        i128::from(seconds) * i128::from(hourly_micros) * i128::from(permille),
        3_600_000,
    )
}

/// The charge for `gpu_seconds` at `hourly_micros` per hour of an instance
/// of `gpus_per_instance` GPUs, and `permille` of it: a reservation's time
/// is counted in GPU-seconds, since the orders in it may be smaller than
/// its instances.
pub fn amount_per_gpu(
    gpu_seconds: i64,
    hourly_micros: i64,
    gpus_per_instance: i32,
    permille: u32,
) -> i64 {
    round_half_up(
        i128::from(gpu_seconds) * i128::from(hourly_micros) * i128::from(permille),
        3_600_000 * i128::from(gpus_per_instance.max(1)),
    )
}

/// `permille` thousandths of `micros`, rounded half up.
pub fn share(micros: i64, permille: i32) -> i64 {
    round_half_up(i128::from(micros) * i128::from(permille), 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TYPE: Uuid = Uuid::from_u128(1);
    const REGION: Uuid = Uuid::from_u128(2);
    const OTHER: Uuid = Uuid::from_u128(3);
    /// 2026-12-01T00:00:00Z.
    const DEC_1: i64 = 1_796_083_200;

    fn version(region: Option<Uuid>, from: i64, hourly: i64) -> PriceVersion {
        PriceVersion {
            instance_type_id: TYPE,
            pricing_class: PricingClass::OnDemand,
            region_id: region,
            effective_from: from,
            hourly_micros: hourly,
        }
    }

    fn span(start: i64, end: i64, excluded: i64) -> Span {
        Span {
            instance_type_id: TYPE,
            region_id: REGION,
            pricing_class: PricingClass::OnDemand,
            start,
            end,
            excluded,
            gpus: 8,
            gpu_milli: 1000,
        }
    }

    fn lines(rated: &Rated) -> Vec<(Option<i64>, u32, i64)> {
        let mut lines: Vec<_> = rated
            .usage
            .iter()
            .map(|(k, t)| (k.hourly_micros, k.permille, t.seconds))
            .collect();
        lines.sort_unstable();
        lines
    }

    #[test]
    fn gpu_seconds_are_priced_as_their_share_of_an_instance() {
        // One hour of one GPU of an 8-GPU instance at 16.00/h is 2.00.
        assert_eq!(amount_per_gpu(3_600, 16_000_000, 8, 1000), 2_000_000);
        // 1 s of one GPU at 7.00/h for 8 GPUs is 243.055… micro-units.
        assert_eq!(amount_per_gpu(1, 7_000_000, 8, 1000), 243);
        assert_eq!(amount_per_gpu(8 * 3_600, 7_000_000, 8, 500), 3_500_000);
        assert_eq!(amount_per_gpu(3_600, 1_000_000, 0, 1000), 1_000_000);
    }

    #[test]
    fn amounts_round_once_half_up() {
        // 1 s at 10.00/h is 2,777.78 micro-units: 2,778.
        assert_eq!(amount(1, 10_000_000, 1000), 2_778);
        // 18 s at 1/h exactly 5 micro-units; 1 s at 1.8/h 0.5 → 1.
        assert_eq!(amount(18, 1_000_000, 1000), 5_000);
        assert_eq!(amount(1, 1_800, 1000), 1);
        assert_eq!(amount(1, 1_799, 1000), 0);
        assert_eq!(amount(3_600, 2_500_000, 600), 1_500_000);
        assert_eq!(share(1_000_005, 100), 100_001);
        assert_eq!(share(5, 100), 1);
    }

    #[test]
    fn a_price_change_mid_span_splits_it_at_the_second() {
        let book = PriceBook::new([
            version(None, 0, 3_600_000),
            version(None, DEC_1 + 1_000, 7_200_000),
        ]);
        let rated = rate(
            &[span(DEC_1 + 600, DEC_1 + 1_600, 0)],
            &book,
            &HashMap::new(),
        );
        assert_eq!(
            lines(&rated),
            vec![(Some(3_600_000), 1000, 400), (Some(7_200_000), 1000, 600)]
        );
    }

    #[test]
    fn a_regions_own_price_wins_once_in_force_and_other_regions_keep_the_general_one() {
        let book = PriceBook::new([
            version(None, 0, 3_600_000),
            version(Some(REGION), DEC_1 + 100, 1_800_000),
            version(Some(OTHER), 0, 9_000_000),
        ]);
        assert_eq!(
            book.at(TYPE, PricingClass::OnDemand, REGION, DEC_1),
            Some(3_600_000)
        );
        assert_eq!(
            book.at(TYPE, PricingClass::OnDemand, REGION, DEC_1 + 100),
            Some(1_800_000)
        );
        assert_eq!(book.at(TYPE, PricingClass::Spot, REGION, DEC_1), None);
        let rated = rate(&[span(DEC_1, DEC_1 + 300, 0)], &book, &HashMap::new());
        assert_eq!(
            lines(&rated),
            vec![(Some(1_800_000), 1000, 200), (Some(3_600_000), 1000, 100)]
        );
    }

    #[test]
    fn off_peak_follows_local_time_and_downtime_is_not_charged() {
        // Seoul is UTC+9: 22:00 local is 13:00 UTC. Off-peak 22–06 at 60 %.
        let clocks = HashMap::from([(
            REGION,
            RegionClock {
                time_zone: chrono_tz::Asia::Seoul,
                off_peak: Some((22, 6, 600)),
            },
        )]);
        let book = PriceBook::new([version(None, 0, 3_600_000)]);
        // 12:30–13:30 UTC, the last 600 s down.
        let start = DEC_1 + 12 * 3600 + 1800;
        let rated = rate(&[span(start, start + 3600, 600)], &book, &clocks);
        assert_eq!(
            lines(&rated),
            vec![
                (Some(3_600_000), 600, 1_200),
                (Some(3_600_000), 1000, 1_800)
            ]
        );
        let down = rated.downtime[&(TYPE, REGION, PricingClass::OnDemand)];
        assert_eq!(
            down,
            Tally {
                seconds: 600,
                gpu_milli_seconds: 4_800_000
            }
        );
        assert_eq!(
            rated.usage.values().map(Tally::gpu_seconds).sum::<i64>(),
            8 * 3_000
        );
    }

    #[test]
    fn half_hour_time_zones_change_price_on_their_own_hours() {
        // India is UTC+5:30: 22:00 local is 16:30 UTC.
        let clock = RegionClock {
            time_zone: chrono_tz::Asia::Kolkata,
            off_peak: Some((22, 6, 500)),
        };
        let at_1630 = DEC_1 + 16 * 3600 + 1800;
        assert_eq!(clock.permille_at(at_1630 - 1), 1000);
        assert_eq!(clock.permille_at(at_1630), 500);
        assert_eq!(clock.next_hour(DEC_1 + 16 * 3600), at_1630);
    }
}
