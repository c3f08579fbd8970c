//! What an organization's reservations charge in a period: the reserved
//! GPU time of the period at each reservation's price, split into the time
//! its orders used and the time they did not, and the fees of late
//! cancellations. Usage inside a reservation is covered by it and is not
//! rated again.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sea_orm::{ColumnTrait, Condition, ConnectionTrait, DbErr, EntityTrait, QueryFilter};
use uuid::Uuid;

use gantry_entities::{order, reservation};
use gantry_pricing::rating::Span;

/// One reservation's share of a period.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Charge {
    pub reservation: reservation::Model,
    /// GPU-seconds its orders ran (billable).
    pub used_gpu_seconds: i64,
    /// GPU-seconds of the period's reserved time nobody used.
    pub unused_gpu_seconds: i64,
    /// GPU-seconds its orders were down through a provider fault: neither
    /// used nor charged.
    pub down_gpu_seconds: i64,
    /// Its cancellation fee, when it was cancelled in the period.
    pub fee_micros: i64,
}

/// What the reserved usage of a period comes to.
pub struct Reserved {
    /// The reservations that charge anything in the period.
    pub charges: Vec<Charge>,
    /// Reserved usage outside its reservation's charged window (work that
    /// ran on for the moment it took to stop it): rated as usage at the
    /// reserved price, since no reservation pays for it.
    pub outside: Vec<Span>,
}

/// The reservations of `org_id` that charge anything in `[start, end)`,
/// given the metered spans of its reserved orders in that period. Spans
/// never cross a metering step, and windows are whole hours, so a span is
/// either inside its reservation's window or outside it.
pub async fn charges(
    db: &impl ConnectionTrait,
    org_id: Uuid,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    spans: Vec<(Uuid, Span)>,
) -> Result<Reserved, DbErr> {
    let rows = reservation::Entity::find()
        .filter(reservation::Column::OrgId.eq(org_id))
        .filter(
            Condition::any()
                .add(
                    Condition::all()
                        .add(reservation::Column::StartsAt.lt(end))
                        .add(reservation::Column::BilledUntil.gt(start)),
                )
                .add(
                    Condition::all()
                        .add(reservation::Column::CancelledAt.gte(start))
                        .add(reservation::Column::CancelledAt.lt(end))
                        .add(reservation::Column::CancellationFeeMicros.ne(0)),
                ),
        )
        .all(db)
        .await?;
    let in_reservation =
        super::reservation_of(db, order::Column::Id.is_in(spans.iter().map(|(id, _)| *id))).await?;
    let windows: HashMap<Uuid, (i64, i64)> = rows
        .iter()
        .map(|r| (r.id, (r.starts_at.timestamp(), r.billed_until.timestamp())))
        .collect();
    let mut by_reservation: HashMap<Uuid, Vec<Span>> = HashMap::new();
    let mut outside = Vec::new();
    for (order_id, span) in spans {
        let covering = in_reservation.get(&order_id).filter(|r| {
            windows
                .get(r)
                .is_some_and(|(from, until)| span.start >= *from && span.end <= *until)
        });
        match covering {
            Some(r) => by_reservation.entry(*r).or_default().push(span),
            None => outside.push(span),
        }
    }
    let mut charges: Vec<Charge> = rows
        .into_iter()
        .map(|r| {
            let spans = by_reservation.remove(&r.id).unwrap_or_default();
            charge(r, &spans, start, end)
        })
        .collect();
    charges.sort_by_key(|c| (c.reservation.starts_at, c.reservation.id));
    Ok(Reserved { charges, outside })
}

/// One reservation's charge in `[start, end)` from its orders' spans there.
fn charge(
    row: reservation::Model,
    spans: &[Span],
    start: DateTime<Utc>,
    end: DateTime<Utc>,
) -> Charge {
    let reserved = super::reserved_gpu_seconds(&row, start, end);
    let (mut used, mut down) = (0_i64, 0_i64);
    for span in spans {
        let seconds = span.end - span.start;
        used += (seconds - span.excluded) * span.gpus;
        down += span.excluded * span.gpus;
    }
    let used = used.min(reserved);
    let down = down.min(reserved - used);
    let fee_micros = match row.cancelled_at {
        Some(at) if at >= start && at < end => row.cancellation_fee_micros,
        _ => 0,
    };
    Charge {
        unused_gpu_seconds: reserved - used - down,
        used_gpu_seconds: used,
        down_gpu_seconds: down,
        fee_micros,
        reservation: row,
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;
    use gantry_types::classes::{PricingClass, ReservationStatus};

    fn at(hour: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2027, 1, 4, hour, 0, 0).unwrap()
    }

    fn reservation(from: u32, to: u32) -> reservation::Model {
        reservation::Model {
            id: Uuid::nil(),
            org_id: Uuid::nil(),
            project_id: None,
            name: "r".into(),
            instance_type_id: Uuid::nil(),
            gpu_model_id: Uuid::nil(),
            region_id: Uuid::nil(),
            node_count: 2,
            gpus_per_node: 8,
            starts_at: at(from),
            ends_at: at(to),
            hourly_micros: 16_000_000,
            status: ReservationStatus::Confirmed,
            billed_until: at(to),
            cancelled_at: None,
            cancellation_fee_micros: 0,
            created_by_kind: "user".into(),
            created_by: None,
            created_at: at(0),
            updated_at: at(0),
        }
    }

    fn span(from: u32, seconds: i64, excluded: i64, gpus: i64) -> Span {
        Span {
            instance_type_id: Uuid::nil(),
            region_id: Uuid::nil(),
            pricing_class: PricingClass::Reserved,
            start: at(from).timestamp(),
            end: at(from).timestamp() + seconds,
            excluded,
            gpus,
            gpu_milli: 1000,
        }
    }

    #[test]
    fn reserved_time_splits_into_used_unused_and_down() {
        // 16 GPUs from 10:00 to 14:00; the period covers 12:00 to 18:00.
        let row = reservation(10, 14);
        let spans = [span(12, 3_600, 0, 8), span(13, 1_800, 600, 8)];
        let charge = charge(row, &spans, at(12), at(18));
        assert_eq!(charge.used_gpu_seconds, 8 * 3_600 + 8 * 1_200);
        assert_eq!(charge.down_gpu_seconds, 8 * 600);
        assert_eq!(
            charge.used_gpu_seconds + charge.unused_gpu_seconds + charge.down_gpu_seconds,
            16 * 2 * 3_600
        );
        assert_eq!(charge.fee_micros, 0);
    }

    #[test]
    fn a_cancellation_ends_the_charged_window_and_its_fee_falls_in_its_period() {
        let mut row = reservation(10, 14);
        row.status = ReservationStatus::Cancelled;
        row.billed_until = at(11);
        row.cancelled_at = Some(at(10) + chrono::TimeDelta::minutes(20));
        row.cancellation_fee_micros = 48_000_000;
        let inside = charge(row.clone(), &[], at(0), at(12));
        assert_eq!(inside.unused_gpu_seconds, 16 * 3_600);
        assert_eq!(inside.fee_micros, 48_000_000);
        let later = charge(row, &[], at(12), at(18));
        assert_eq!(later.unused_gpu_seconds, 0);
        assert_eq!(later.fee_micros, 0);
    }
}
