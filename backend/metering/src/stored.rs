//! Storage in the usage report: the GiB-seconds volumes held over the
//! period, sold size × time from creation to deletion (as invoiced), keyed
//! as the report's groups are. Storage belongs to no order, GPU model,
//! instance type or pricing class: grouped by those it counts in the
//! totals only.

use std::collections::BTreeMap;

use chrono::{DateTime, Duration, NaiveTime, Utc};
use sea_orm::ConnectionTrait;
use uuid::Uuid;

use gantry_core::error::ApiResult;

use crate::usage::GroupBy;

/// GiB-seconds held in `[from, to)` by organization `org_id`'s volumes (or
/// everyone's), per group key where `group_by` gives volumes one, and in
/// all.
pub async fn gib_seconds(
    db: &impl ConnectionTrait,
    org_id: Option<Uuid>,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    group_by: GroupBy,
) -> ApiResult<(BTreeMap<String, i64>, i64)> {
    let (spans, _) = gantry_volumes::held::spans(db, org_id, from, to).await?;
    // GiB-milliseconds, rounded down to GiB-seconds once per group.
    let mut groups: BTreeMap<String, i64> = BTreeMap::new();
    let mut total = 0;
    for span in spans {
        let held =
            |from: DateTime<Utc>, to: DateTime<Utc>| span.size_gib * (to - from).num_milliseconds();
        total += held(span.from, span.to);
        let key = match group_by {
            GroupBy::Day => {
                for (day, start, end) in days(span.from, span.to) {
                    *groups.entry(day).or_default() += held(start, end);
                }
                continue;
            }
            GroupBy::Project => span.project_id.map(|id| id.to_string()).unwrap_or_default(),
            GroupBy::Region => span.region_id.to_string(),
            GroupBy::Organization => span.org_id.to_string(),
            GroupBy::Order | GroupBy::GpuModel | GroupBy::InstanceType | GroupBy::PricingClass => {
                continue;
            }
        };
        *groups.entry(key).or_default() += held(span.from, span.to);
    }
    for held in groups.values_mut() {
        *held /= 1000;
    }
    Ok((groups, total / 1000))
}

/// `[from, to)` cut at each UTC midnight: the day (`YYYY-MM-DD`) and its
/// part.
fn days(from: DateTime<Utc>, to: DateTime<Utc>) -> Vec<(String, DateTime<Utc>, DateTime<Utc>)> {
    let mut parts = Vec::new();
    let mut at = from;
    while at < to {
        let midnight = (at.date_naive() + Duration::days(1))
            .and_time(NaiveTime::MIN)
            .and_utc();
        let end = midnight.min(to);
        parts.push((at.format("%Y-%m-%d").to_string(), at, end));
        at = end;
    }
    parts
}

#[cfg(test)]
mod tests {
    use chrono::{TimeZone, Utc};

    use super::days;

    #[test]
    fn a_span_is_cut_at_each_midnight() {
        let from = Utc
            .with_ymd_and_hms(2026, 1, 31, 22, 0, 0)
            .single()
            .expect("a time");
        let to = Utc
            .with_ymd_and_hms(2026, 2, 2, 1, 30, 0)
            .single()
            .expect("a time");
        let parts = days(from, to);
        let seconds: Vec<(&str, i64)> = parts
            .iter()
            .map(|(day, a, b)| (day.as_str(), (*b - *a).num_seconds()))
            .collect();
        assert_eq!(
            seconds,
            vec![
                ("2026-01-31", 7_200),
                ("2026-02-01", 86_400),
                ("2026-02-02", 5_400)
            ]
        );
    }
}
