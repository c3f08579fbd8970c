//! Prepaid balances, as prepaid GPU clouds keep them: operators top an
//! organization up; the scheduling leader draws rated usage from the
//! balance as soon as it is metered for good; a balance at or below zero
//! refuses new orders and, after `prepaid_grace_seconds`, stops the
//! organization's running non-production work. Draws are rated like an
//! invoice and rounded per draw, so the ledger and a month's invoice can
//! differ by rounding (a micro-unit per line and draw).

use chrono::{DateTime, TimeDelta, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, Set,
};
use uuid::Uuid;

use gantry_core::audit::{self, Change};
use gantry_core::auth::principal::Actor;
use gantry_core::error::ApiResult;
use gantry_core::state::AppState;
use gantry_entities::{balance_entry, billing_account, order};
use gantry_types::classes::{BalanceKind, OrderStatus, PriorityClass, StopCause};
use gantry_workload::orders::lifecycle;

/// The highest a balance may be topped up to: far above any real balance,
/// far below what the ledger's sums can hold.
pub const BALANCE_MAX: i64 = 100_000_000_000_000_000;

/// The sum of the entries `entries` selects.
async fn total(
    db: &impl ConnectionTrait,
    entries: sea_orm::Select<balance_entry::Entity>,
) -> Result<i64, DbErr> {
    let sum: Option<i64> = entries
        .select_only()
        .column_as(Expr::cust("CAST(SUM(amount_micros) AS BIGINT)"), "sum")
        .into_tuple::<Option<i64>>()
        .one(db)
        .await?
        .flatten();
    Ok(sum.unwrap_or(0))
}

/// The balance: every top-up less every draw.
pub async fn balance(db: &impl ConnectionTrait, org_id: Uuid) -> Result<i64, DbErr> {
    total(
        db,
        balance_entry::Entity::find().filter(balance_entry::Column::OrgId.eq(org_id)),
    )
    .await
}

/// What was drawn for usage whose spans start in `[start, end)` (a
/// positive amount).
pub async fn drawn(
    db: &impl ConnectionTrait,
    org_id: Uuid,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
) -> Result<i64, DbErr> {
    let drawn = balance_entry::Entity::find()
        .filter(balance_entry::Column::OrgId.eq(org_id))
        .filter(balance_entry::Column::Kind.eq(BalanceKind::Usage))
        .filter(balance_entry::Column::PeriodStart.gte(start))
        .filter(balance_entry::Column::PeriodStart.lt(end));
    Ok(-total(db, drawn).await?)
}

/// The latest movements, newest first.
pub async fn entries(
    db: &impl ConnectionTrait,
    org_id: Uuid,
) -> Result<Vec<balance_entry::Model>, DbErr> {
    balance_entry::Entity::find()
        .filter(balance_entry::Column::OrgId.eq(org_id))
        .order_by_desc(balance_entry::Column::CreatedAt)
        .order_by_desc(balance_entry::Column::Id)
        .limit(50)
        .all(db)
        .await
}

/// Draws metered usage from every prepaid balance, marks balances that ran
/// out, and stops the non-production work of those out for longer than the
/// grace period.
pub async fn draw(state: &AppState, now: DateTime<Utc>) -> ApiResult<()> {
    let settle = super::invoices::settle_time(
        state.config.agent_heartbeat_deadline_seconds,
        state.config.metering_interval_seconds,
    );
    let grace =
        TimeDelta::seconds(i64::try_from(state.config.prepaid_grace_seconds).unwrap_or(3600));
    let Some(until) = DateTime::from_timestamp((now - settle).timestamp(), 0) else {
        return Ok(());
    };
    for account in billing_account::Entity::find()
        .filter(billing_account::Column::Prepaid.eq(true))
        .all(&state.db)
        .await?
    {
        let org_id = account.org_id;
        let from = account.drawn_until.unwrap_or(until);
        // A draw never crosses a month, so each month's invoice nets exactly
        // the draws of its own usage.
        let until = match gantry_pricing::spending::month_of(from)
            .checked_add_months(chrono::Months::new(1))
        {
            Some(next_month) => until.min(next_month),
            None => until,
        };
        let txn = gantry_core::db::write(&state.db).await?;
        if until > from {
            let spend = super::invoices::spend(&txn, org_id, from, until, now).await?;
            if spend != 0 {
                balance_entry::ActiveModel {
                    id: Set(Uuid::now_v7()),
                    org_id: Set(org_id),
                    kind: Set(BalanceKind::Usage),
                    amount_micros: Set(-spend),
                    period_start: Set(Some(from)),
                    period_end: Set(Some(until)),
                    reason: Set(None),
                    author: Set(None),
                    created_at: Set(now),
                }
                .insert(&txn)
                .await?;
            }
        }
        let left = balance(&txn, org_id).await?;
        let exhausted_at = match (account.exhausted_at, left <= 0) {
            (None, true) => {
                audit::record(
                    &txn,
                    Change {
                        org_id: Some(org_id),
                        action: "prepaid.exhausted",
                        target_type: "organization",
                        target_id: Some(org_id.to_string()),
                        details: serde_json::json!({ "balance_micros": left, "stops_at": now + grace }),
                        actor: &Actor::system(),
                    },
                )
                .await?;
                gantry_webhooks::events::emit(
                    &txn,
                    org_id,
                    "balance.exhausted",
                    serde_json::json!({ "balance_micros": left, "stops_at": now + grace }),
                    now,
                )
                .await?;
                Some(now)
            }
            (_, false) => None,
            (since, true) => since,
        };
        let mut row: billing_account::ActiveModel = account.into();
        row.drawn_until = Set(Some(until.max(from)));
        row.exhausted_at = Set(exhausted_at);
        row.update(&txn).await?;
        if exhausted_at.is_some_and(|since| since + grace <= now) {
            stop_unpaid(&txn, org_id, now).await?;
        }
        txn.commit().await?;
    }
    state.scheduler.wake();
    Ok(())
}

/// Stops (as cancelled) the organization's live non-production orders.
async fn stop_unpaid(
    db: &impl ConnectionTrait,
    org_id: Uuid,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    let live = order::Entity::find()
        .filter(order::Column::OrgId.eq(org_id))
        .filter(order::Column::PriorityClass.ne(PriorityClass::Production))
        .filter(order::Column::Status.is_in([
            OrderStatus::Queued,
            OrderStatus::Scheduled,
            OrderStatus::Provisioning,
            OrderStatus::Running,
            OrderStatus::Preempted,
        ]))
        .lock_exclusive()
        .all(db)
        .await?;
    for o in live {
        let holding = lifecycle::stop(db, o.id, now, StopCause::OutOfBalance).await?;
        let id = o.id;
        let mut row: order::ActiveModel = o.into();
        row.status = Set(OrderStatus::Cancelled);
        row.failure_reason = Set(Some(
            "stopped: the prepaid balance ran out and was not topped up in time".into(),
        ));
        row.pending_reason = Set(None);
        row.updated_at = Set(now);
        if holding == 0 {
            row.ended_at = Set(Some(now));
        }
        row.update(db).await?;
        audit::record(
            db,
            Change {
                org_id: Some(org_id),
                action: "order.stop_unpaid",
                target_type: "order",
                target_id: Some(id.to_string()),
                details: serde_json::json!({}),
                actor: &Actor::system(),
            },
        )
        .await?;
    }
    Ok(())
}
