//! The prices in force: every version of some instance types' prices and
//! every region's clock, as rating reads them, and amounts as people read
//! them.

use std::collections::{HashMap, HashSet};

use gantry_entities::{price, region};
use sea_orm::{ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QueryOrder};
use uuid::Uuid;

use crate::rating::{PriceBook, PriceVersion, RegionClock};

/// Every price version of these instance types, and every region's clock.
pub async fn price_context(
    db: &impl ConnectionTrait,
    types: impl IntoIterator<Item = Uuid>,
) -> Result<(PriceBook, HashMap<Uuid, RegionClock>), DbErr> {
    let types: HashSet<Uuid> = types.into_iter().collect();
    let versions = price::Entity::find()
        .filter(price::Column::InstanceTypeId.is_in(types))
        .order_by_asc(price::Column::EffectiveFrom)
        .order_by_asc(price::Column::Id)
        .all(db)
        .await?;
    let book = PriceBook::new(versions.into_iter().map(|v| PriceVersion {
        instance_type_id: v.instance_type_id,
        pricing_class: v.pricing_class,
        region_id: v.region_id,
        effective_from: v.effective_from.timestamp(),
        hourly_micros: v.hourly_micros,
    }));
    let clocks = region::Entity::find()
        .all(db)
        .await?
        .into_iter()
        .map(|r| (r.id, region_clock(&r)))
        .collect();
    Ok((book, clocks))
}

fn region_clock(r: &region::Model) -> RegionClock {
    let hour = |h: Option<i16>| h.and_then(|h| u32::try_from(h).ok());
    let off_peak = match (
        hour(r.off_peak_start_hour),
        hour(r.off_peak_end_hour),
        r.off_peak_multiplier_permille
            .and_then(|p| u32::try_from(p).ok()),
    ) {
        (Some(start), Some(end), Some(permille)) => Some((start, end, permille)),
        _ => None,
    };
    RegionClock {
        time_zone: r.time_zone.parse().unwrap_or(chrono_tz::UTC),
        off_peak,
    }
}

/// Micro-units as a decimal amount, such as `2.5`.
pub fn micros_text(micros: i64) -> String {
    let sign = if micros < 0 { "-" } else { "" };
    let abs = micros.unsigned_abs();
    let whole = abs / 1_000_000;
    let fraction = abs % 1_000_000;
    if fraction == 0 {
        format!("{sign}{whole}")
    } else {
        let digits = format!("{fraction:06}");
        format!("{sign}{whole}.{}", digits.trim_end_matches('0'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_read_as_decimals() {
        assert_eq!(micros_text(2_500_000), "2.5");
        assert_eq!(micros_text(3), "0.000003");
        assert_eq!(micros_text(-1_000_000), "-1");
        assert_eq!(micros_text(0), "0");
    }
}
