//! Invoices: an organization's rated usage over a period, with its
//! discount and credits, from draft to finalized to paid or void.
//!
//! A draft is re-rated whenever it is touched (created, adjusted, rated on
//! request, finalized), keeping its adjustments. Finalizing rates it one
//! last time and freezes it: its lines are never rewritten, whatever prices
//! do later. A period is finalized only once all of its usage is metered.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Datelike, TimeDelta, TimeZone, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DatabaseConnection, DbErr, EntityTrait,
    QueryFilter, QueryOrder, QuerySelect, Set,
};
use uuid::Uuid;

use super::rating::{self, Span};
use gantry_core::error::{ApiError, ApiResult, Resource};
use gantry_entities::{billing_account, invoice, invoice_line, sla_credit, usage_record};
use gantry_pricing::book::micros_text;
use gantry_pricing::book::price_context;
use gantry_pricing::storage;
use gantry_types::classes::{InvoiceStatus, LineKind, PricingClass, UsageKind};

/// A line before it is stored.
struct Line {
    kind: LineKind,
    description: String,
    key: Option<rating::LineKey>,
    quantity_seconds: i64,
    gpu_seconds: i64,
    amount_micros: i64,
    /// For corrections: why, and which operator.
    reason: Option<String>,
    author: Option<Uuid>,
    /// For storage: the volume, and its region.
    volume: Option<(Uuid, Uuid)>,
}

/// How long after a moment its usage is certainly metered: faults are known
/// a heartbeat deadline later, and the span holding it closes a metering
/// interval later.
pub fn settle_time(heartbeat_deadline_seconds: u64, metering_interval_seconds: u64) -> TimeDelta {
    TimeDelta::seconds(
        i64::try_from(heartbeat_deadline_seconds + metering_interval_seconds).unwrap_or(i64::MAX),
    )
}

/// Creates a draft for `[start, end)`, rated now. Refused when another
/// invoice of the organization that is not void overlaps the period.
pub async fn create_draft(
    db: &DatabaseConnection,
    org_id: Uuid,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    currency: &str,
    now: DateTime<Utc>,
) -> ApiResult<invoice::Model> {
    let txn = gantry_core::db::write(db).await?;
    // Two drafts for one organization are made one after the other, so the
    // overlap check below holds on PostgreSQL too.
    gantry_access::tenancy::orgs::lock(&txn, org_id).await?;
    let overlapping = invoice::Entity::find()
        .filter(invoice::Column::OrgId.eq(org_id))
        .filter(invoice::Column::Status.ne(InvoiceStatus::Void))
        .filter(invoice::Column::PeriodStart.lt(end))
        .filter(invoice::Column::PeriodEnd.gt(start))
        .one(&txn)
        .await?;
    if let Some(other) = overlapping {
        return Err(ApiError::conflict(
            "invoice_period_taken",
            format!(
                "invoice {} ({}) already covers {} to {}; void it first",
                other.id,
                other.status.as_str(),
                other.period_start,
                other.period_end
            ),
        ));
    }
    let row = invoice::ActiveModel {
        id: Set(Uuid::now_v7()),
        org_id: Set(org_id),
        period_start: Set(start),
        period_end: Set(end),
        status: Set(InvoiceStatus::Draft),
        currency: Set(currency.to_owned()),
        subtotal_micros: Set(0),
        discount_micros: Set(0),
        credits_micros: Set(0),
        total_micros: Set(0),
        rated_at: Set(now),
        finalized_at: Set(None),
        paid_at: Set(None),
        voided_at: Set(None),
        created_at: Set(now),
    }
    .insert(&txn)
    .await?;
    let rated = rerate(&txn, row, now).await?;
    txn.commit().await?;
    Ok(rated)
}

/// The most an invoice's adjustments may add up to, either way: far above
/// any real invoice, far below what the arithmetic can hold.
pub const ADJUSTMENTS_MAX: i64 = 100_000_000_000_000_000;

/// A sum of amounts, refused rather than wrapped when it cannot be held.
fn checked_sum(amounts: impl IntoIterator<Item = i64>) -> ApiResult<i64> {
    amounts
        .into_iter()
        .try_fold(0_i64, i64::checked_add)
        .ok_or_else(|| {
            ApiError::unprocessable(
                "amount_too_large",
                "the invoice's amounts add up to more than can be represented",
            )
        })
}

/// Replaces a draft's rated lines with a fresh rating, keeps its
/// adjustments, and updates its totals.
pub async fn rerate(
    db: &impl ConnectionTrait,
    draft: invoice::Model,
    now: DateTime<Utc>,
) -> ApiResult<invoice::Model> {
    invoice_line::Entity::delete_many()
        .filter(invoice_line::Column::InvoiceId.eq(draft.id))
        .filter(invoice_line::Column::Kind.ne(LineKind::Adjustment))
        .exec(db)
        .await?;
    let lines = rate_period(db, draft.org_id, draft.period_start, draft.period_end, now).await?;
    let adjustments = invoice_line::Entity::find()
        .filter(invoice_line::Column::InvoiceId.eq(draft.id))
        .filter(invoice_line::Column::Kind.eq(LineKind::Adjustment))
        .order_by_asc(invoice_line::Column::Position)
        .all(db)
        .await?;
    let mut position = 0;
    for line in &lines {
        position += 1;
        invoice_line::ActiveModel {
            id: Set(Uuid::now_v7()),
            invoice_id: Set(draft.id),
            position: Set(position),
            kind: Set(line.kind),
            description: Set(line.description.clone()),
            instance_type_id: Set(line.key.map(|k| k.instance_type_id)),
            region_id: Set(line
                .key
                .map(|k| k.region_id)
                .or(line.volume.map(|(_, region)| region))),
            pricing_class: Set(line.key.map(|k| k.pricing_class)),
            hourly_micros: Set(line.key.and_then(|k| k.hourly_micros)),
            price_permille: Set(line
                .key
                .map(|k| i32::try_from(k.permille).unwrap_or(i32::MAX))),
            quantity_seconds: Set(line.quantity_seconds),
            gpu_seconds: Set(line.gpu_seconds),
            amount_micros: Set(line.amount_micros),
            reason: Set(line.reason.clone()),
            author: Set(line.author),
            volume_id: Set(line.volume.map(|(volume, _)| volume)),
        }
        .insert(db)
        .await?;
    }
    // Adjustments follow the rated lines, in the order they were made.
    for adjustment in &adjustments {
        position += 1;
        let mut row: invoice_line::ActiveModel = adjustment.clone().into();
        row.position = Set(position);
        row.update(db).await?;
    }
    let sum = |kinds: &[LineKind]| {
        checked_sum(
            lines
                .iter()
                .filter(|l| kinds.contains(&l.kind))
                .map(|l| l.amount_micros),
        )
    };
    let subtotal = sum(&[
        LineKind::Usage,
        LineKind::Storage,
        LineKind::Correction,
        LineKind::Reservation,
        LineKind::CancellationFee,
    ])?;
    let discount = sum(&[LineKind::Discount])?;
    let credits = checked_sum([
        sum(&[LineKind::SlaCredit, LineKind::Prepaid])?,
        checked_sum(adjustments.iter().map(|a| a.amount_micros))?,
    ])?;
    let total = checked_sum([subtotal, discount, credits])?;
    let mut row: invoice::ActiveModel = draft.into();
    row.subtotal_micros = Set(subtotal);
    row.discount_micros = Set(discount);
    row.credits_micros = Set(credits);
    row.total_micros = Set(total);
    row.rated_at = Set(now);
    Ok(row.update(db).await?)
}

/// What the organization's usage whose spans start in `[start, end)` comes
/// to, with its storage until `now`: usage less corrections and discount,
/// before any credit.
pub async fn spend(
    db: &impl ConnectionTrait,
    org_id: Uuid,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    now: DateTime<Utc>,
) -> ApiResult<i64> {
    let spans = metered_spans(db, in_period(org_id, start, end)).await?;
    spend_of(db, org_id, start, end, now, spans).await
}

/// [`spend`] of `spans`, the organization's metered spans in the period
/// already read by the caller.
pub async fn spend_of(
    db: &impl ConnectionTrait,
    org_id: Uuid,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    now: DateTime<Utc>,
    spans: Vec<(Uuid, Span)>,
) -> ApiResult<i64> {
    Ok(rate_spans(db, org_id, start, end, now, spans)
        .await?
        .iter()
        .filter(|l| {
            matches!(
                l.kind,
                LineKind::Usage
                    | LineKind::Storage
                    | LineKind::Correction
                    | LineKind::Discount
                    | LineKind::Reservation
                    | LineKind::CancellationFee
            )
        })
        .map(|l| l.amount_micros)
        .sum())
}

/// The organization's usage records whose spans start in `[start, end)`.
fn in_period(
    org_id: Uuid,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
) -> sea_orm::Select<usage_record::Entity> {
    usage_record::Entity::find()
        .filter(usage_record::Column::OrgId.eq(org_id))
        .filter(usage_record::Column::PeriodStart.gte(start))
        .filter(usage_record::Column::PeriodStart.lt(end))
}

/// The organization's usage whose spans start in `[start, end)`, and its
/// volumes' storage in the period until `now`, rated.
async fn rate_period(
    db: &impl ConnectionTrait,
    org_id: Uuid,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    now: DateTime<Utc>,
) -> ApiResult<Vec<Line>> {
    let spans = metered_spans(db, in_period(org_id, start, end)).await?;
    rate_spans(db, org_id, start, end, now, spans).await
}

/// [`rate_period`] of the metered spans the caller read.
async fn rate_spans(
    db: &impl ConnectionTrait,
    org_id: Uuid,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    now: DateTime<Utc>,
    spans: Vec<(Uuid, Span)>,
) -> ApiResult<Vec<Line>> {
    // Usage inside a reservation is paid by the reservation's own lines.
    let (reserved, spans): (Vec<_>, Vec<_>) = spans
        .into_iter()
        .partition(|(_, span)| span.pricing_class == PricingClass::Reserved);
    let reserved =
        gantry_workload::reservations::billing::charges(db, org_id, start, end, reserved).await?;
    let spans: Vec<Span> = spans
        .into_iter()
        .map(|(_, span)| span)
        .chain(reserved.outside)
        .collect();
    let corrections = in_period(org_id, start, end)
        .filter(usage_record::Column::Kind.eq(UsageKind::Correction))
        .all(db)
        .await?;
    let (book, clocks) = price_context(db, spans.iter().map(|s| s.instance_type_id)).await?;
    let rated = rating::rate(&spans, &book, &clocks);

    let type_names = gantry_catalog::instance_type_names(db).await?;
    let region_names = gantry_catalog::region_names(db).await?;
    let name = |names: &HashMap<Uuid, String>, id: Uuid| {
        names.get(&id).cloned().unwrap_or_else(|| id.to_string())
    };
    let mut usage: Vec<_> = rated.usage.into_iter().collect();
    usage.sort_by_key(|(k, _)| {
        (
            name(&type_names, k.instance_type_id),
            k.pricing_class.as_str(),
            name(&region_names, k.region_id),
            k.hourly_micros,
            k.permille,
        )
    });
    let mut lines: Vec<Line> = usage
        .into_iter()
        .map(|(key, tally)| {
            let what = format!(
                "{} {} in {}",
                name(&type_names, key.instance_type_id),
                key.pricing_class.as_str(),
                name(&region_names, key.region_id)
            );
            let description = match (key.hourly_micros, key.permille) {
                (None, _) => format!("{what}: no price was in force"),
                (Some(hourly), 1000) => format!("{what} at {}/h", micros_text(hourly)),
                (Some(hourly), permille) => format!(
                    "{what} at {}/h, off-peak {}%",
                    micros_text(hourly),
                    f64::from(permille) / 10.0
                ),
            };
            Line {
                kind: LineKind::Usage,
                description,
                key: Some(key),
                quantity_seconds: tally.seconds,
                gpu_seconds: tally.gpu_seconds(),
                amount_micros: key.hourly_micros.map_or(0, |hourly| {
                    rating::amount(tally.seconds, hourly, key.permille)
                }),
                reason: None,
                author: None,
                volume: None,
            }
        })
        .collect();
    let mut downtime: Vec<_> = rated.downtime.into_iter().collect();
    downtime
        .sort_by_key(|((t, r, c), _)| (name(&type_names, *t), c.as_str(), name(&region_names, *r)));
    for ((instance_type_id, region_id, pricing_class), tally) in downtime {
        lines.push(Line {
            kind: LineKind::Downtime,
            description: format!(
                "{} {} in {}: down through a provider fault, not charged",
                name(&type_names, instance_type_id),
                pricing_class.as_str(),
                name(&region_names, region_id)
            ),
            key: Some(rating::LineKey {
                instance_type_id,
                region_id,
                pricing_class,
                hourly_micros: None,
                permille: 0,
            }),
            quantity_seconds: tally.seconds,
            gpu_seconds: tally.gpu_seconds(),
            amount_micros: 0,
            reason: None,
            author: None,
            volume: None,
        });
    }
    lines.extend(storage_lines(db, org_id, start, end.min(now), &region_names).await?);
    for charge in &reserved.charges {
        lines.extend(reservation_lines(charge, &type_names, &region_names));
    }
    // Each correction takes its span back at the prices it was charged at.
    for c in &corrections {
        let span = Span {
            instance_type_id: c.instance_type_id,
            region_id: c.region_id,
            pricing_class: c.pricing_class,
            start: c.period_start.timestamp(),
            end: c.period_end.timestamp(),
            excluded: 0,
            gpus: i64::from(c.gpus),
            gpu_milli: i64::from(c.gpu_milli),
        };
        let taken = charges(&rating::rate(&[span], &book, &clocks));
        lines.push(Line {
            kind: LineKind::Correction,
            description: format!(
                "correction of {} {} in {}, {} to {}: {}",
                name(&type_names, c.instance_type_id),
                c.pricing_class.as_str(),
                name(&region_names, c.region_id),
                c.period_start.format("%Y-%m-%d %H:%M:%S"),
                c.period_end.format("%H:%M:%S UTC"),
                c.reason.as_deref().unwrap_or_default()
            ),
            key: None,
            quantity_seconds: -c.excluded_seconds,
            gpu_seconds: -c.excluded_seconds * i64::from(c.gpus) * i64::from(c.gpu_milli) / 1000,
            amount_micros: -taken,
            reason: c.reason.clone(),
            author: c.author,
            volume: None,
        });
    }
    let subtotal: i64 = lines.iter().map(|l| l.amount_micros).sum();
    let discount = billing_account::Entity::find_by_id(org_id)
        .one(db)
        .await?
        .map_or(0, |a| a.discount_permille);
    if discount > 0 && subtotal > 0 {
        lines.push(Line {
            kind: LineKind::Discount,
            description: format!("discount {}%", f64::from(discount) / 10.0),
            key: None,
            quantity_seconds: 0,
            gpu_seconds: 0,
            amount_micros: -rating::share(subtotal, discount),
            reason: None,
            author: None,
            volume: None,
        });
    }
    let credits = crate::sla::unapplied(db, org_id, start).await?;
    let promised = if credits.is_empty() {
        HashMap::new()
    } else {
        crate::sla::policies(db).await?
    };
    let prepaid = super::prepaid::drawn(db, org_id, start, end).await?;
    if prepaid != 0 {
        lines.push(Line {
            kind: LineKind::Prepaid,
            description: "paid from the prepaid balance as the usage was metered".into(),
            key: None,
            quantity_seconds: 0,
            gpu_seconds: 0,
            amount_micros: -prepaid,
            reason: None,
            author: None,
            volume: None,
        });
    }
    for credit in credits {
        lines.push(Line {
            kind: LineKind::SlaCredit,
            description: format!(
                "SLA credit for order {} in {}: availability {}% against {}% promised, {}% of {}",
                credit.order_id,
                credit.month_start.format("%Y-%m"),
                percent_text(credit.availability_permyriad),
                percent_text(
                    promised
                        .get(&credit.priority_class)
                        .map_or(10_000, |(p, _)| p.availability_target_permyriad)
                ),
                credit.credit_percent,
                micros_text(credit.charges_micros)
            ),
            key: None,
            quantity_seconds: credit.downtime_seconds,
            gpu_seconds: 0,
            amount_micros: -credit.credit_micros,
            reason: None,
            author: None,
            volume: None,
        });
    }
    Ok(lines)
}

/// One line per volume and storage price: the GiB-seconds it held in
/// `[start, end)` at that price.
async fn storage_lines(
    db: &impl ConnectionTrait,
    org_id: Uuid,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    region_names: &HashMap<Uuid, String>,
) -> ApiResult<Vec<Line>> {
    let held = gantry_volumes::held::held(db, org_id, start, end).await?;
    if held.is_empty() {
        return Ok(Vec::new());
    }
    let prices = gantry_volumes::held::prices(db).await?;
    let mut lines = Vec::new();
    for volume in held {
        let versions: Vec<storage::Version> = prices
            .iter()
            .filter(|p| p.kind == volume.kind)
            .map(|p| storage::Version {
                region_id: p.region_id,
                gib_month_micros: p.gib_month_micros,
                effective_from: p.effective_from,
            })
            .collect();
        let sizes: Vec<storage::Held> = volume
            .sizes
            .iter()
            .map(|(size_gib, from, to)| storage::Held {
                size_gib: *size_gib,
                from: *from,
                to: *to,
            })
            .collect();
        let region = region_names
            .get(&volume.region_id)
            .cloned()
            .unwrap_or_else(|| volume.region_id.to_string());
        for charge in storage::rate(volume.region_id, &sizes, &versions) {
            let what = format!(
                "volume {} ({}, {region}): {:.2} GiB-hours",
                volume.name,
                volume.kind.as_str(),
                charge.gib_seconds as f64 / 3600.0
            );
            lines.push(Line {
                kind: LineKind::Storage,
                description: match charge.gib_month_micros {
                    Some(price) => format!("{what} at {}/GiB-month", micros_text(price)),
                    None => format!("{what}: no price was in force"),
                },
                key: None,
                quantity_seconds: charge.gib_seconds,
                gpu_seconds: 0,
                amount_micros: charge.amount_micros,
                reason: None,
                author: None,
                volume: Some((volume.volume_id, volume.region_id)),
            });
        }
    }
    Ok(lines)
}

/// The lines of one reservation's charge: used and unused reserved time
/// at its price, time down through a provider fault (not charged), and a
/// late cancellation's fee.
fn reservation_lines(
    charge: &gantry_workload::reservations::billing::Charge,
    type_names: &HashMap<Uuid, String>,
    region_names: &HashMap<Uuid, String>,
) -> Vec<Line> {
    let r = &charge.reservation;
    let name = |names: &HashMap<Uuid, String>, id: Uuid| {
        names.get(&id).cloned().unwrap_or_else(|| id.to_string())
    };
    let what = format!(
        "reservation {} ({} × {} in {})",
        r.name,
        r.node_count,
        name(type_names, r.instance_type_id),
        name(region_names, r.region_id)
    );
    let key = Some(rating::LineKey {
        instance_type_id: r.instance_type_id,
        region_id: r.region_id,
        pricing_class: PricingClass::Reserved,
        hourly_micros: Some(r.hourly_micros),
        permille: 1000,
    });
    let line = |kind: LineKind, description: String, gpu_seconds: i64, amount_micros: i64| Line {
        kind,
        description,
        key,
        quantity_seconds: gpu_seconds / i64::from(r.gpus_per_node.max(1)),
        gpu_seconds,
        amount_micros,
        reason: None,
        author: None,
        volume: None,
    };
    let priced = |gpu_seconds: i64| {
        rating::amount_per_gpu(gpu_seconds, r.hourly_micros, r.gpus_per_node, 1000)
    };
    let price = micros_text(r.hourly_micros);
    let mut lines = Vec::new();
    for (gpu_seconds, how) in [
        (charge.used_gpu_seconds, "used"),
        (charge.unused_gpu_seconds, "reserved, not used"),
    ] {
        if gpu_seconds > 0 {
            lines.push(line(
                LineKind::Reservation,
                format!("{what}: {how}, at {price}/h per instance"),
                gpu_seconds,
                priced(gpu_seconds),
            ));
        }
    }
    if charge.down_gpu_seconds > 0 {
        lines.push(line(
            LineKind::Downtime,
            format!("{what}: down through a provider fault, not charged"),
            charge.down_gpu_seconds,
            0,
        ));
    }
    if charge.fee_micros != 0 {
        lines.push(Line {
            key: None,
            ..line(
                LineKind::CancellationFee,
                format!(
                    "{what}: cancelled {}, fee for the reserved time not yet begun",
                    r.cancelled_at
                        .map(|at| at.format("%Y-%m-%d %H:%M UTC").to_string())
                        .unwrap_or_default()
                ),
                0,
                charge.fee_micros,
            )
        });
    }
    lines
}

/// Hundredths of a percent as a percentage, such as `99.9`.
fn percent_text(permyriad: i32) -> String {
    let text = format!("{}.{:02}", permyriad / 100, permyriad % 100);
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// The metered records `records` selects, as rating sees them, with their
/// orders. Only the columns rating needs are read: a month can hold
/// millions of records.
pub async fn metered_spans(
    db: &impl ConnectionTrait,
    records: sea_orm::Select<usage_record::Entity>,
) -> Result<Vec<(Uuid, Span)>, DbErr> {
    use usage_record::Column as C;
    type Row = (
        Uuid,
        Uuid,
        Uuid,
        PricingClass,
        DateTime<Utc>,
        DateTime<Utc>,
        i64,
        i32,
        i32,
    );
    let rows: Vec<Row> = records
        .filter(C::Kind.eq(UsageKind::Metered))
        .select_only()
        .columns([
            C::OrderId,
            C::InstanceTypeId,
            C::RegionId,
            C::PricingClass,
            C::PeriodStart,
            C::PeriodEnd,
            C::ExcludedSeconds,
            C::Gpus,
            C::GpuMilli,
        ])
        .into_tuple()
        .all(db)
        .await?;
    Ok(rows
        .into_iter()
        .map(
            |(
                order_id,
                instance_type_id,
                region_id,
                pricing_class,
                start,
                end,
                excluded,
                gpus,
                gpu_milli,
            )| {
                (
                    order_id,
                    Span {
                        instance_type_id,
                        region_id,
                        pricing_class,
                        start: start.timestamp(),
                        end: end.timestamp(),
                        excluded,
                        gpus: i64::from(gpus),
                        gpu_milli: i64::from(gpu_milli),
                    },
                )
            },
        )
        .collect())
}

/// What rated usage charges, line by line rounded, before any discount.
pub fn charges(rated: &rating::Rated) -> i64 {
    rated
        .usage
        .iter()
        .filter_map(|(k, t)| {
            k.hourly_micros
                .map(|h| rating::amount(t.seconds, h, k.permille))
        })
        .sum()
}

/// Finalizes a draft: rated one last time and frozen. Refused while usage
/// of its period may still arrive.
pub async fn finalize(
    db: &DatabaseConnection,
    id: Uuid,
    now: DateTime<Utc>,
    settle: TimeDelta,
) -> ApiResult<invoice::Model> {
    let txn = gantry_core::db::write(db).await?;
    // Corrections take the organization's lock too: none slips in between
    // the last rating and the freeze.
    let org_id = invoice::Entity::find_by_id(id)
        .one(&txn)
        .await?
        .ok_or_else(|| ApiError::not_found(Resource::Invoice, id))?
        .org_id;
    gantry_access::tenancy::orgs::lock(&txn, org_id).await?;
    let draft = in_state(&txn, id, &[InvoiceStatus::Draft], "finalized").await?;
    let complete_at = draft.period_end + settle;
    if now < complete_at {
        return Err(ApiError::conflict(
            "usage_not_final",
            format!(
                "usage up to the end of its period is metered by {complete_at}; finalize after that"
            ),
        ));
    }
    let rated = rerate(&txn, draft, now).await?;
    // The credits it now shows are its own; no later invoice takes them.
    sla_credit::Entity::update_many()
        .col_expr(
            sla_credit::Column::AppliedInvoiceId,
            Expr::value(Some(rated.id)),
        )
        .filter(sla_credit::Column::OrgId.eq(rated.org_id))
        .filter(sla_credit::Column::AppliedInvoiceId.is_null())
        .filter(sla_credit::Column::MonthStart.lt(rated.period_start))
        .exec(&txn)
        .await?;
    let mut row: invoice::ActiveModel = rated.into();
    row.status = Set(InvoiceStatus::Finalized);
    row.finalized_at = Set(Some(now));
    let finalized = row.update(&txn).await?;
    gantry_webhooks::events::emit(
        &txn,
        finalized.org_id,
        "invoice.finalized",
        serde_json::json!({ "invoice": {
            "id": finalized.id,
            "period_start": finalized.period_start,
            "period_end": finalized.period_end,
            "currency": finalized.currency,
            "total_micros": finalized.total_micros,
        }}),
        now,
    )
    .await?;
    txn.commit().await?;
    Ok(finalized)
}

/// Moves an invoice on: `paid` from finalized, `void` from draft or
/// finalized.
pub async fn settle(
    db: &DatabaseConnection,
    id: Uuid,
    to: InvoiceStatus,
    now: DateTime<Utc>,
) -> ApiResult<invoice::Model> {
    let txn = gantry_core::db::write(db).await?;
    let (from, verb): (&[InvoiceStatus], _) = match to {
        InvoiceStatus::Paid => (&[InvoiceStatus::Finalized], "paid"),
        _ => (&[InvoiceStatus::Draft, InvoiceStatus::Finalized], "voided"),
    };
    let current = in_state(&txn, id, from, verb).await?;
    let mut row: invoice::ActiveModel = current.into();
    row.status = Set(to);
    match to {
        InvoiceStatus::Paid => row.paid_at = Set(Some(now)),
        _ => row.voided_at = Set(Some(now)),
    }
    let updated = row.update(&txn).await?;
    txn.commit().await?;
    Ok(updated)
}

/// Adds an operator's credit (negative) or charge (positive) to a draft.
pub async fn adjust(
    db: &DatabaseConnection,
    id: Uuid,
    amount_micros: i64,
    reason: &str,
    author: Uuid,
    now: DateTime<Utc>,
) -> ApiResult<invoice::Model> {
    let txn = gantry_core::db::write(db).await?;
    let draft = in_state(&txn, id, &[InvoiceStatus::Draft], "adjusted").await?;
    let adjusted: Vec<i64> = invoice_line::Entity::find()
        .filter(invoice_line::Column::InvoiceId.eq(id))
        .filter(invoice_line::Column::Kind.eq(LineKind::Adjustment))
        .all(&txn)
        .await?
        .into_iter()
        .map(|l| l.amount_micros)
        .collect();
    let after = checked_sum(adjusted.into_iter().chain([amount_micros]))?;
    if after.abs() > ADJUSTMENTS_MAX {
        return Err(ApiError::unprocessable(
            "adjustment_limit",
            format!(
                "the invoice's adjustments would come to {after} micro-units; they may add up to \
                 at most {ADJUSTMENTS_MAX} either way"
            ),
        ));
    }
    let last = invoice_line::Entity::find()
        .filter(invoice_line::Column::InvoiceId.eq(id))
        .select_only()
        .column_as(invoice_line::Column::Position.max(), "last")
        .into_tuple::<Option<i32>>()
        .one(&txn)
        .await?
        .flatten()
        .unwrap_or(0);
    invoice_line::ActiveModel {
        id: Set(Uuid::now_v7()),
        invoice_id: Set(id),
        position: Set(last + 1),
        kind: Set(LineKind::Adjustment),
        description: Set(if amount_micros < 0 {
            "credit".into()
        } else {
            "charge".into()
        }),
        instance_type_id: Set(None),
        region_id: Set(None),
        pricing_class: Set(None),
        hourly_micros: Set(None),
        price_permille: Set(None),
        quantity_seconds: Set(0),
        gpu_seconds: Set(0),
        amount_micros: Set(amount_micros),
        reason: Set(Some(reason.to_owned())),
        author: Set(Some(author)),
        volume_id: Set(None),
    }
    .insert(&txn)
    .await?;
    let rated = rerate(&txn, draft, now).await?;
    txn.commit().await?;
    Ok(rated)
}

/// Rates a draft again from the usage recorded so far.
pub async fn rate_draft(
    db: &DatabaseConnection,
    id: Uuid,
    now: DateTime<Utc>,
) -> ApiResult<invoice::Model> {
    let txn = gantry_core::db::write(db).await?;
    let draft = in_state(&txn, id, &[InvoiceStatus::Draft], "rated again").await?;
    let rated = rerate(&txn, draft, now).await?;
    txn.commit().await?;
    Ok(rated)
}

/// The invoice, if it is in one of `states`; a clear conflict otherwise.
/// Its row stays locked to the caller's transaction (a no-op update), so
/// two changes to one invoice never interleave.
async fn in_state(
    db: &impl ConnectionTrait,
    id: Uuid,
    states: &[InvoiceStatus],
    verb: &str,
) -> ApiResult<invoice::Model> {
    invoice::Entity::update_many()
        .col_expr(invoice::Column::Status, Expr::col(invoice::Column::Status))
        .filter(invoice::Column::Id.eq(id))
        .exec(db)
        .await?;
    let current = invoice::Entity::find_by_id(id)
        .one(db)
        .await?
        .ok_or_else(|| ApiError::not_found(Resource::Invoice, id))?;
    if !states.contains(&current.status) {
        return Err(ApiError::conflict(
            "invoice_state",
            format!(
                "invoice {id} is {}; only a {} invoice can be {verb}",
                current.status.as_str(),
                states
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(" or ")
            ),
        ));
    }
    Ok(current)
}

/// The calendar month (UTC) before the one `now` is in.
pub fn previous_month(now: DateTime<Utc>) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
    let this = Utc
        .with_ymd_and_hms(now.year(), now.month(), 1, 0, 0, 0)
        .single()?;
    let before = this - TimeDelta::days(1);
    let previous = Utc
        .with_ymd_and_hms(before.year(), before.month(), 1, 0, 0, 0)
        .single()?;
    Some((previous, this))
}

/// Invoices last month for every organization that used something in it
/// and has no invoice for it yet, once its usage is final. Answers how
/// many it finalized.
pub async fn close_month(
    db: &DatabaseConnection,
    currency: &str,
    now: DateTime<Utc>,
    settle: TimeDelta,
) -> Result<usize, DbErr> {
    let Some((start, end)) = previous_month(now) else {
        return Ok(0);
    };
    if now < end + settle {
        return Ok(0);
    }
    let mut used: Vec<Uuid> = usage_record::Entity::find()
        .filter(usage_record::Column::PeriodStart.gte(start))
        .filter(usage_record::Column::PeriodStart.lt(end))
        .select_only()
        .column(usage_record::Column::OrgId)
        .distinct()
        .into_tuple()
        .all(db)
        .await?;
    // The month's service credits go to the next invoice; earlier ones still
    // waiting for an invoice make one even without usage, and so does
    // storage held in the month.
    for org_id in &used {
        crate::sla::record_credits(db, *org_id, start, end, now).await?;
    }
    let owed: Vec<Uuid> = sla_credit::Entity::find()
        .filter(sla_credit::Column::AppliedInvoiceId.is_null())
        .filter(sla_credit::Column::MonthStart.lt(start))
        .select_only()
        .column(sla_credit::Column::OrgId)
        .distinct()
        .into_tuple()
        .all(db)
        .await?;
    used.extend(owed);
    used.extend(gantry_volumes::held::holders(db, start, end).await?);
    used.sort_unstable();
    used.dedup();
    let invoiced: HashSet<Uuid> = invoice::Entity::find()
        .filter(invoice::Column::OrgId.is_in(used.iter().copied()))
        .filter(invoice::Column::Status.ne(InvoiceStatus::Void))
        .filter(invoice::Column::PeriodStart.lt(end))
        .filter(invoice::Column::PeriodEnd.gt(start))
        .all(db)
        .await?
        .into_iter()
        .map(|i| i.org_id)
        .collect();
    let mut finalized = 0;
    for org_id in used.into_iter().filter(|o| !invoiced.contains(o)) {
        let made = async {
            let draft = create_draft(db, org_id, start, end, currency, now).await?;
            finalize(db, draft.id, now, settle).await
        };
        match made.await {
            Ok(_) => finalized += 1,
            Err(error) => tracing::warn!(%org_id, ?error, "could not invoice last month"),
        }
    }
    Ok(finalized)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_previous_month_crosses_years() {
        let jan = Utc
            .with_ymd_and_hms(2027, 1, 15, 8, 0, 0)
            .single()
            .expect("time");
        let (start, end) = previous_month(jan).expect("month");
        assert_eq!(
            start,
            Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0)
                .single()
                .expect("time")
        );
        assert_eq!(
            end,
            Utc.with_ymd_and_hms(2027, 1, 1, 0, 0, 0)
                .single()
                .expect("time")
        );
    }
}
