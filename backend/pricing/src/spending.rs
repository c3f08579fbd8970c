//! Whether an organization may order more: a prepaid balance that ran out
//! refuses every new order, a hard-capped budget that is spent refuses all
//! but production ones.

use chrono::{DateTime, Datelike, TimeZone, Utc};
use gantry_core::error::{ApiError, ApiResult};
use gantry_entities::billing_account;
use gantry_types::classes::PriorityClass;

/// The first moment of the month `now` is in.
pub fn month_of(now: DateTime<Utc>) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(now.year(), now.month(), 1, 0, 0, 0)
        .single()
        .unwrap_or(now)
}

/// Refuses any new order of a prepaid organization whose balance ran out.
pub fn prepaid_admits(account: Option<&billing_account::Model>) -> ApiResult<()> {
    match account {
        Some(a) if a.prepaid && a.exhausted_at.is_some() => Err(ApiError::new(
            axum::http::StatusCode::PAYMENT_REQUIRED,
            "balance_exhausted",
            "the prepaid balance has run out; new orders are refused until it is topped up",
        )),
        _ => Ok(()),
    }
}

/// Refuses a non-production order of an organization whose hard-capped
/// budget is spent this month.
pub fn budget_admits(
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
                crate::book::micros_text(account.monthly_budget_micros.unwrap_or_default()),
                crate::book::micros_text(account.month_spend_micros)
            ),
        ));
    }
    Ok(())
}
