//! Budgets: the scheduling leader keeps each budgeted organization's spend
//! this month on its account, records an alert in its audit log as the spend
//! crosses 50, 80 and 100 % of the budget, and admission refuses new
//! non-production orders of an organization with a hard cap once the budget
//! is spent.

use chrono::{DateTime, Datelike, TimeZone, Utc};
use sea_orm::{ActiveModelTrait, ColumnTrait, DatabaseConnection, EntityTrait, QueryFilter, Set};

use crate::audit::{self, Change};
use crate::auth::principal::Actor;
use crate::classes::PriorityClass;
use crate::entities::billing_account;
use crate::error::{ApiError, ApiResult};

/// Shares of the budget that raise an alert, in percent.
const THRESHOLDS: [i32; 3] = [50, 80, 100];

/// The first moment of the month `now` is in.
pub fn month_of(now: DateTime<Utc>) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(now.year(), now.month(), 1, 0, 0, 0)
        .single()
        .unwrap_or(now)
}

/// The highest threshold `spend` has reached of `budget`.
fn reached(spend: i64, budget: i64) -> i32 {
    let percent = i128::from(spend) * 100 / i128::from(budget.max(1));
    THRESHOLDS
        .into_iter()
        .filter(|t| i128::from(*t) <= percent)
        .max()
        .unwrap_or(0)
}

/// Brings every budgeted account's spend up to date; answers how many
/// alerts it raised.
pub async fn refresh(db: &DatabaseConnection, now: DateTime<Utc>) -> ApiResult<usize> {
    let month = month_of(now);
    let actor = Actor::system();
    let mut alerts = 0;
    for account in billing_account::Entity::find()
        .filter(billing_account::Column::MonthlyBudgetMicros.is_not_null())
        .all(db)
        .await?
    {
        let Some(budget) = account.monthly_budget_micros else {
            continue;
        };
        let spend = super::invoices::spend(db, account.org_id, month, now).await?;
        let already = if account.spend_month == Some(month) {
            account.alerted_percent
        } else {
            0
        };
        let level = reached(spend, budget);
        let txn = crate::db::write(db).await?;
        if level > already {
            alerts += 1;
            audit::record(
                &txn,
                Change {
                    org_id: Some(account.org_id),
                    action: "budget.alert",
                    target_type: "organization",
                    target_id: Some(account.org_id.to_string()),
                    details: serde_json::json!({
                        "percent": level, "spend_micros": spend, "budget_micros": budget,
                        "hard_cap": account.hard_cap,
                    }),
                    actor: &actor,
                },
            )
            .await?;
            crate::webhooks::events::emit(
                &txn,
                account.org_id,
                "budget.threshold_crossed",
                serde_json::json!({
                    "percent": level, "spend_micros": spend, "budget_micros": budget,
                    "hard_cap": account.hard_cap,
                }),
                now,
            )
            .await?;
            tracing::info!(org = %account.org_id, level, spend, budget, "budget alert");
        }
        let mut row: billing_account::ActiveModel = account.into();
        row.spend_month = Set(Some(month));
        row.month_spend_micros = Set(spend);
        row.alerted_percent = Set(level.max(already));
        row.update(&txn).await?;
        txn.commit().await?;
    }
    Ok(alerts)
}

/// Refuses a non-production order of an organization whose hard-capped
/// budget is spent this month.
pub fn admits(
    account: Option<&billing_account::Model>,
    priority: PriorityClass,
    now: DateTime<Utc>,
) -> ApiResult<()> {
    let Some(account) = account else {
        return Ok(());
    };
    let spent = account.hard_cap
        && account.spend_month == Some(month_of(now))
        && account
            .monthly_budget_micros
            .is_some_and(|budget| account.month_spend_micros >= budget);
    if spent && priority != PriorityClass::Production {
        return Err(ApiError::new(
            axum::http::StatusCode::PAYMENT_REQUIRED,
            "budget_exhausted",
            format!(
                "this month's budget of {} is spent ({} so far) and capped: only production orders are admitted until an operator raises it",
                super::invoices::micros_text(account.monthly_budget_micros.unwrap_or_default()),
                super::invoices::micros_text(account.month_spend_micros)
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_are_reached_in_whole_percent() {
        assert_eq!(reached(0, 1_000), 0);
        assert_eq!(reached(499, 1_000), 0);
        assert_eq!(reached(500, 1_000), 50);
        assert_eq!(reached(999, 1_000), 80);
        assert_eq!(reached(5_000, 1_000), 100);
    }
}
