//! Budgets: the scheduling leader keeps each budgeted organization's spend
//! this month on its account, records an alert in its audit log as the spend
//! crosses 50, 80 and 100 % of the budget, and admission refuses new
//! non-production orders of an organization with a hard cap once the budget
//! is spent.

use chrono::{DateTime, Utc};
use sea_orm::{ActiveModelTrait, ColumnTrait, DatabaseConnection, EntityTrait, QueryFilter, Set};

use gantry_core::audit::{self, Change};
use gantry_core::auth::principal::Actor;
use gantry_core::error::ApiResult;
use gantry_entities::billing_account;

use gantry_pricing::spending::month_of;

/// Shares of the budget that raise an alert, in percent.
const THRESHOLDS: [i32; 3] = [50, 80, 100];

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
        let spend = super::invoices::spend(db, account.org_id, month, now, now).await?;
        let already = if account.spend_month == Some(month) {
            account.alerted_percent
        } else {
            0
        };
        let level = reached(spend, budget);
        let txn = gantry_core::db::write(db).await?;
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
            gantry_webhooks::events::emit(
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
