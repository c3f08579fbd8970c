//! SLA: availability measured per order from its allocations and the node
//! events that hit it, queue waits against their targets, and service
//! credits by tier, applied to the next invoice with their evidence.
//!
//! An order is expected to run from the moment it first came up until it
//! ended (or the month did); every moment in that window when it did not
//! have all of its nodes running is downtime: a node fault, maintenance
//! that moved it, and the time it took to come back. That is why targets
//! belong on classes that are never preempted for priority (production by
//! default): a class that yields to others would count its own yielding.

pub mod api;
pub mod coverage;

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::OnConflict;
use sea_orm::{ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QueryOrder, Set};
use serde::Serialize;
use utoipa::ToSchema;
use uuid::Uuid;

use self::coverage::CreditTier;
use crate::{invoices, rating};
use gantry_entities::{allocation, node, node_event, order, sla_credit, sla_policy, usage_record};
use gantry_types::classes::PriorityClass;

/// A node event that hit an order: the evidence behind its downtime.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Evidence {
    pub kind: String,
    pub node: String,
    pub at: DateTime<Utc>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct OrderSla {
    pub order_id: Uuid,
    pub priority_class: PriorityClass,
    /// Seconds it was expected to run in the month.
    pub expected_seconds: i64,
    pub downtime_seconds: i64,
    /// Hundredths of a percent.
    pub availability_permyriad: i32,
    /// From creation to first start, when it started (or is still waiting)
    /// in the month.
    pub queue_wait_seconds: Option<i64>,
    pub credit_percent: i32,
    /// What its usage in the month was charged, before any discount.
    pub charges_micros: i64,
    pub credit_micros: i64,
    pub evidence: Vec<Evidence>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ClassSla {
    pub priority_class: PriorityClass,
    pub availability_target_permyriad: i32,
    pub queue_wait_target_seconds: Option<i64>,
    pub orders: usize,
    /// Over all of the class's orders: up time over expected time.
    pub availability_permyriad: i32,
    pub downtime_seconds: i64,
    /// Orders that started within the queue-wait target, of those measured.
    pub waits_met: usize,
    pub waits_measured: usize,
    pub credits_micros: i64,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SlaReport {
    pub org_id: Uuid,
    pub month_start: DateTime<Utc>,
    pub month_end: DateTime<Utc>,
    /// When the month is not over, the report runs to here.
    pub measured_until: DateTime<Utc>,
    pub classes: Vec<ClassSla>,
    /// Orders of classes with a target that ran or waited in the month.
    pub orders: Vec<OrderSla>,
    pub credits_micros: i64,
}

/// The policies, by class.
pub async fn policies(
    db: &impl ConnectionTrait,
) -> Result<HashMap<PriorityClass, (sla_policy::Model, Vec<CreditTier>)>, DbErr> {
    Ok(sla_policy::Entity::find()
        .all(db)
        .await?
        .into_iter()
        .map(|p| {
            let tiers = serde_json::from_str(&p.credit_tiers).unwrap_or_default();
            (p.priority_class, (p, tiers))
        })
        .collect())
}

/// The organization's SLA over `[start, end)`, measured up to `now`.
pub async fn measure(
    db: &impl ConnectionTrait,
    org_id: Uuid,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<SlaReport, DbErr> {
    let until = end.min(now);
    let policies = policies(db).await?;
    let classes: Vec<PriorityClass> = policies.keys().copied().collect();
    // Orders of classes with a target that were alive at some point of the
    // month: created before its end and not ended before its start.
    let orders = order::Entity::find()
        .filter(order::Column::OrgId.eq(org_id))
        .filter(order::Column::PriorityClass.is_in(classes))
        .filter(order::Column::CreatedAt.lt(until))
        .filter(
            sea_orm::Condition::any()
                .add(order::Column::EndedAt.is_null())
                .add(order::Column::EndedAt.gt(start)),
        )
        .order_by_asc(order::Column::Id)
        .all(db)
        .await?;
    let ids: Vec<Uuid> = orders.iter().map(|o| o.id).collect();
    let mut allocations: HashMap<Uuid, Vec<allocation::Model>> = HashMap::new();
    for a in allocation::Entity::find()
        .filter(allocation::Column::OrderId.is_in(ids.iter().copied()))
        .filter(allocation::Column::RunningSince.is_not_null())
        .all(db)
        .await?
    {
        allocations.entry(a.order_id).or_default().push(a);
    }
    let node_names: HashMap<Uuid, String> = node::Entity::find()
        .all(db)
        .await?
        .into_iter()
        .map(|n| (n.id, n.name))
        .collect();
    let mut evidence: HashMap<Uuid, Vec<Evidence>> = HashMap::new();
    for e in node_event::Entity::find()
        .filter(node_event::Column::OrderId.is_in(ids.iter().copied()))
        .filter(node_event::Column::At.gte(start))
        .filter(node_event::Column::At.lt(end))
        .order_by_asc(node_event::Column::At)
        .all(db)
        .await?
    {
        if let Some(order_id) = e.order_id {
            evidence.entry(order_id).or_default().push(Evidence {
                kind: e.kind,
                node: node_names
                    .get(&e.node_id)
                    .cloned()
                    .unwrap_or_else(|| e.node_id.to_string()),
                at: e.at,
            });
        }
    }
    let spans = invoices::metered_spans(
        db,
        usage_record::Entity::find()
            .filter(usage_record::Column::OrderId.is_in(ids.iter().copied()))
            .filter(usage_record::Column::PeriodStart.gte(start))
            .filter(usage_record::Column::PeriodStart.lt(end)),
    )
    .await?;
    let (book, clocks) =
        gantry_pricing::book::price_context(db, spans.iter().map(|(_, s)| s.instance_type_id))
            .await?;
    let mut by_order: HashMap<Uuid, Vec<rating::Span>> = HashMap::new();
    for (order_id, span) in spans {
        by_order.entry(order_id).or_default().push(span);
    }

    let (from, to) = (start.timestamp(), until.timestamp());
    let mut rows = Vec::new();
    for o in &orders {
        let Some((policy, tiers)) = policies.get(&o.priority_class) else {
            continue;
        };
        let ran = allocations
            .get(&o.id)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let first_run = ran.iter().filter_map(|a| a.running_since).min();
        let queue_wait_seconds = match first_run {
            Some(first) if first >= start && first < until => {
                Some((first - o.created_at).num_seconds())
            }
            None if o.ended_at.is_none() && o.created_at >= start => {
                Some((until - o.created_at).num_seconds())
            }
            _ => None,
        };
        let (expected, downtime) = match first_run {
            Some(first) => {
                let window = (
                    first.timestamp().max(from),
                    o.ended_at.map_or(to, |e| e.timestamp().min(to)),
                );
                let up: Vec<(i64, i64)> = ran
                    .iter()
                    .filter_map(|a| {
                        let began = a.running_since?.timestamp();
                        let ended = match (a.down_from, a.released_at) {
                            (Some(down), _) => down.timestamp(),
                            (None, Some(released)) => released.timestamp(),
                            (None, None) => to,
                        };
                        Some((began, ended))
                    })
                    .collect();
                let expected = (window.1 - window.0).max(0);
                let needed = usize::try_from(o.node_count).unwrap_or(1);
                (
                    expected,
                    expected - coverage::covered(&up, needed, window.0, window.1),
                )
            }
            None => (0, 0),
        };
        if expected == 0 && queue_wait_seconds.is_none() {
            continue;
        }
        let availability = coverage::availability_permyriad(expected, downtime);
        let below_target = availability < policy.availability_target_permyriad;
        let credit_percent = if below_target {
            coverage::credit_percent(availability, tiers)
        } else {
            0
        };
        let spans = by_order.get(&o.id).map(Vec::as_slice).unwrap_or_default();
        let charges = invoices::charges(&rating::rate(spans, &book, &clocks));
        rows.push(OrderSla {
            order_id: o.id,
            priority_class: o.priority_class,
            expected_seconds: expected,
            downtime_seconds: downtime,
            availability_permyriad: availability,
            queue_wait_seconds,
            credit_percent,
            charges_micros: charges,
            credit_micros: rating::share(charges, credit_percent * 10),
            evidence: evidence.remove(&o.id).unwrap_or_default(),
        });
    }

    let mut classes: Vec<ClassSla> = Vec::new();
    let mut sorted: Vec<_> = policies.iter().collect();
    sorted.sort_by_key(|(class, _)| class.as_str());
    for (class, (policy, _)) in sorted {
        let mine: Vec<&OrderSla> = rows.iter().filter(|r| r.priority_class == *class).collect();
        let expected: i64 = mine.iter().map(|r| r.expected_seconds).sum();
        let downtime: i64 = mine.iter().map(|r| r.downtime_seconds).sum();
        let waits: Vec<i64> = mine.iter().filter_map(|r| r.queue_wait_seconds).collect();
        classes.push(ClassSla {
            priority_class: *class,
            availability_target_permyriad: policy.availability_target_permyriad,
            queue_wait_target_seconds: policy.queue_wait_target_seconds,
            orders: mine.len(),
            availability_permyriad: coverage::availability_permyriad(expected, downtime),
            downtime_seconds: downtime,
            waits_met: policy
                .queue_wait_target_seconds
                .map_or(0, |target| waits.iter().filter(|w| **w <= target).count()),
            waits_measured: if policy.queue_wait_target_seconds.is_some() {
                waits.len()
            } else {
                0
            },
            credits_micros: mine.iter().map(|r| r.credit_micros).sum(),
        });
    }
    Ok(SlaReport {
        org_id,
        month_start: start,
        month_end: end,
        measured_until: until,
        credits_micros: rows.iter().map(|r| r.credit_micros).sum(),
        classes,
        orders: rows,
    })
}

/// Measures a finished month and keeps the credits it grants, once per
/// order and month; answers how many it kept.
pub async fn record_credits(
    db: &impl ConnectionTrait,
    org_id: Uuid,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<usize, DbErr> {
    let report = measure(db, org_id, start, end, now).await?;
    let kept_before: std::collections::HashSet<Uuid> = sla_credit::Entity::find()
        .filter(sla_credit::Column::OrgId.eq(org_id))
        .filter(sla_credit::Column::MonthStart.eq(start))
        .all(db)
        .await?
        .into_iter()
        .map(|c| c.order_id)
        .collect();
    let granted: Vec<_> = report
        .orders
        .iter()
        .filter(|o| o.credit_micros > 0 && !kept_before.contains(&o.order_id))
        .collect();
    for o in &granted {
        gantry_webhooks::events::emit(
            db,
            org_id,
            "sla.credit_granted",
            serde_json::json!({
                "order_id": o.order_id,
                "month_start": start,
                "availability_permyriad": o.availability_permyriad,
                "credit_percent": o.credit_percent,
                "credit_micros": o.credit_micros,
            }),
            now,
        )
        .await?;
    }
    let credits: Vec<sla_credit::ActiveModel> = granted
        .into_iter()
        .map(|o| sla_credit::ActiveModel {
            id: Set(Uuid::now_v7()),
            org_id: Set(org_id),
            month_start: Set(start),
            order_id: Set(o.order_id),
            priority_class: Set(o.priority_class),
            availability_permyriad: Set(o.availability_permyriad),
            downtime_seconds: Set(o.downtime_seconds),
            credit_percent: Set(o.credit_percent),
            charges_micros: Set(o.charges_micros),
            credit_micros: Set(o.credit_micros),
            evidence: Set(serde_json::to_string(&o.evidence).unwrap_or_else(|_| "[]".into())),
            applied_invoice_id: Set(None),
            created_at: Set(now),
        })
        .collect();
    let kept = credits.len();
    if kept > 0 {
        sla_credit::Entity::insert_many(credits)
            .on_conflict(
                OnConflict::columns([
                    sla_credit::Column::OrgId,
                    sla_credit::Column::MonthStart,
                    sla_credit::Column::OrderId,
                ])
                .do_nothing()
                .to_owned(),
            )
            .exec_without_returning(db)
            .await?;
    }
    Ok(kept)
}

/// Credits of months before `before` that no invoice has taken yet.
pub async fn unapplied(
    db: &impl ConnectionTrait,
    org_id: Uuid,
    before: DateTime<Utc>,
) -> Result<Vec<sla_credit::Model>, DbErr> {
    sla_credit::Entity::find()
        .filter(sla_credit::Column::OrgId.eq(org_id))
        .filter(sla_credit::Column::AppliedInvoiceId.is_null())
        .filter(sla_credit::Column::MonthStart.lt(before))
        .order_by_asc(sla_credit::Column::MonthStart)
        .order_by_asc(sla_credit::Column::OrderId)
        .all(db)
        .await
}
