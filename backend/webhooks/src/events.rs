//! The events an organization can subscribe to, how code writes one into
//! the outbox, and how an outbox row becomes the event sent.

use chrono::{DateTime, SecondsFormat, Utc};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, Iterable, QueryFilter, Set,
};
use serde_json::{Value, json};
use uuid::Uuid;

use gantry_entities::{allocation, order, webhook_event};
use gantry_types::classes::OrderStatus;

/// Every event type an endpoint may subscribe to.
pub const TYPES: [&str; 13] = [
    "order.queued",
    "order.started",
    "order.preemption_scheduled",
    "order.preempted",
    "order.completed",
    "order.failed",
    "order.timed_out",
    "order.cancelled",
    "job.attempt_failed",
    "budget.threshold_crossed",
    "balance.exhausted",
    "invoice.finalized",
    "sla.credit_granted",
];

/// The type of the event "send test event" sends; no filter holds it back.
pub const TEST: &str = "webhook.test";

/// An event's time as the envelope and the outbox write it.
pub fn timestamp(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Micros, true)
}

/// Writes an event into the outbox, in the caller's transaction: it is
/// sent only if that transaction commits.
pub async fn emit(
    db: &impl ConnectionTrait,
    org_id: Uuid,
    event_type: &'static str,
    data: Value,
    at: DateTime<Utc>,
) -> Result<(), DbErr> {
    webhook_event::ActiveModel {
        org_id: Set(org_id),
        event_type: Set(Some(event_type.to_owned())),
        detail: Set(Some(data.to_string())),
        occurred_at: Set(timestamp(at)),
        dispatched: Set(false),
        ..Default::default()
    }
    .insert(db)
    .await
    .map(drop)
}

/// The type and data of the event an outbox row stands for; `None` for a
/// change nobody subscribes to (an order being scheduled, say).
pub async fn describe(
    db: &impl ConnectionTrait,
    row: &webhook_event::Model,
) -> Result<Option<(String, Value)>, DbErr> {
    if let Some(event_type) = &row.event_type {
        let data = row
            .detail
            .as_deref()
            .and_then(|d| serde_json::from_str(d).ok())
            .unwrap_or(Value::Null);
        return Ok(Some((event_type.clone(), data)));
    }
    let Some(order_id) = row.order_id else {
        return Ok(None);
    };
    let Some(event_type) = order_event(row) else {
        return Ok(None);
    };
    let Some(order) = order::Entity::find_by_id(order_id).one(db).await? else {
        return Ok(None);
    };
    let mut data = json!({
        "order": {
            "id": order.id,
            "org_id": order.org_id,
            "name": order.name,
            "kind": order.kind,
            "status": row.to_status,
        },
    });
    if let Some(reason) = &row.detail {
        data["reason"] = json!(reason);
    }
    match event_type {
        "order.completed" | "order.failed" | "order.timed_out" | "job.attempt_failed" => {
            data["exit_code"] = json!(order.exit_code);
        }
        "order.preemption_scheduled" => {
            // The workload must save its work by then: its grace period
            // ends when its allocations are stopped (the latest stop asked
            // of any of its attempts is this one's).
            let deadline = allocation::Entity::find()
                .filter(allocation::Column::OrderId.eq(order.id))
                .filter(allocation::Column::StopAt.is_not_null())
                .all(db)
                .await?
                .into_iter()
                .filter_map(|a| a.stop_at)
                .max();
            data["deadline"] = json!(deadline.map(timestamp));
        }
        _ => {}
    }
    Ok(Some((event_type.to_owned(), data)))
}

/// The event an order's status change is, from the statuses and reason
/// the trigger kept.
fn order_event(row: &webhook_event::Model) -> Option<&'static str> {
    let status = |stored: &Option<String>| {
        let stored = stored.as_deref()?;
        OrderStatus::iter().find(|s| s.as_str() == stored)
    };
    let retry = row
        .detail
        .as_deref()
        .is_some_and(|d| d.starts_with(gantry_types::job_spec::RETRY_REASON_PREFIX));
    Some(match (status(&row.from_status), status(&row.to_status)?) {
        (None, OrderStatus::Queued) => "order.queued",
        (Some(OrderStatus::Preempted), OrderStatus::Queued) if !retry => "order.preempted",
        (_, OrderStatus::Running) => "order.started",
        (_, OrderStatus::Preempted) if retry => "job.attempt_failed",
        (_, OrderStatus::Preempted) => "order.preemption_scheduled",
        (_, OrderStatus::Completed) => "order.completed",
        (_, OrderStatus::Failed) => "order.failed",
        (_, OrderStatus::TimedOut) => "order.timed_out",
        (_, OrderStatus::Cancelled) => "order.cancelled",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(from: Option<&str>, to: &str, detail: Option<&str>) -> Option<&'static str> {
        order_event(&webhook_event::Model {
            seq: 1,
            org_id: Uuid::nil(),
            event_type: None,
            order_id: Some(Uuid::nil()),
            from_status: from.map(str::to_owned),
            to_status: Some(to.to_owned()),
            detail: detail.map(str::to_owned),
            occurred_at: String::new(),
            dispatched: false,
        })
    }

    #[test]
    fn status_changes_name_their_events() {
        assert_eq!(change(None, "queued", None), Some("order.queued"));
        assert_eq!(change(Some("queued"), "scheduled", None), None);
        assert_eq!(
            change(Some("provisioning"), "running", None),
            Some("order.started")
        );
        assert_eq!(
            change(Some("running"), "preempted", Some("preempted by x")),
            Some("order.preemption_scheduled")
        );
        assert_eq!(
            change(Some("preempted"), "queued", Some("preempted by x")),
            Some("order.preempted")
        );
        assert_eq!(
            change(Some("running"), "completed", None),
            Some("order.completed")
        );
        assert_eq!(
            change(Some("running"), "timed_out", None),
            Some("order.timed_out")
        );
        assert_eq!(
            change(Some("queued"), "cancelled", None),
            Some("order.cancelled")
        );
        assert_eq!(
            change(Some("running"), "failed", Some("boom")),
            Some("order.failed")
        );
    }

    #[test]
    fn a_retried_attempt_is_one_event_not_a_preemption() {
        let reason = "attempt 1 exited with code 3; retry 1 of 2";
        assert_eq!(
            change(Some("running"), "preempted", Some(reason)),
            Some("job.attempt_failed")
        );
        assert_eq!(change(Some("preempted"), "queued", Some(reason)), None);
    }
}
