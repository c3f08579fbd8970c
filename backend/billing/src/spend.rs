//! Spend so far: what an organization's metered usage costs, by day and by
//! order, rated exactly as its invoice will rate it (the same price
//! versions, off-peak multipliers and rounding per line), so the figure a
//! tenant watches is the figure it will be billed.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::State;
use chrono::{DateTime, Utc};
use sea_orm::{ColumnTrait, QueryFilter};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::invoices::{self, charges, metered_spans};
use super::rating::{self, Span};
use gantry_access::tenancy::access::{OrgAccess, need};
use gantry_core::error::{ApiResult, ProblemResponses};
use gantry_core::http::extract::ApiQuery;
use gantry_core::state::AppState;
use gantry_entities::usage_record;
use gantry_pricing::book::price_context;
use gantry_types::classes::PricingClass;

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SpendQuery {
    /// Start of the period (inclusive); the first of this month (UTC) when
    /// absent.
    pub from: Option<DateTime<Utc>>,
    /// End of the period (exclusive); now when absent. At most 400 days
    /// after `from`.
    pub to: Option<DateTime<Utc>>,
    /// Only this order's usage.
    pub order_id: Option<Uuid>,
}

/// One day's or one order's usage, rated.
#[derive(Debug, Serialize, ToSchema)]
pub struct SpendPart {
    /// The UTC day (`YYYY-MM-DD`) or the order's id.
    pub key: String,
    /// Rated usage, in micro-units of the currency, before any discount.
    pub amount_micros: i64,
    /// GPU-seconds billed for it.
    pub gpu_seconds: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Spend {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub currency: String,
    /// What the period comes to as its invoice will rate it: usage,
    /// corrections, the standing discount, reservations and cancellation
    /// fees, before credits. For one order: its rated usage. Metering
    /// records usage every few seconds, so the last moments may be missing.
    pub total_micros: i64,
    /// Rated usage per UTC day the usage started in, oldest first.
    pub days: Vec<SpendPart>,
    /// Rated usage per order, the most expensive first. Usage inside a
    /// reservation is paid by the reservation and is not in `days` or
    /// `orders`.
    pub orders: Vec<SpendPart>,
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(org_spend))
}

/// What the organization's usage costs so far, by day and by order.
#[utoipa::path(
    get,
    path = "/orgs/{org_id}/spend",
    tag = "billing",
    params(("org_id" = Uuid, Path, description = "Organization id"), SpendQuery),
    responses((status = 200, description = "Spend over the period", body = Spend), ProblemResponses),
    security(("bearer" = []))
)]
async fn org_spend(
    State(state): State<AppState>,
    access: OrgAccess<need::Billing>,
    ApiQuery(query): ApiQuery<SpendQuery>,
) -> ApiResult<Json<Spend>> {
    let (from, to) = gantry_metering::usage::period(query.from, query.to, state.clock.now())?;
    let mut records = access
        .scope
        .select::<usage_record::Entity>()
        .filter(usage_record::Column::PeriodStart.gte(from))
        .filter(usage_record::Column::PeriodStart.lt(to));
    if let Some(order) = query.order_id {
        records = records.filter(usage_record::Column::OrderId.eq(order));
    }
    // Read once: the days and orders rate the spans outside reservations,
    // the total rates them all as the invoice will.
    let all = metered_spans(&state.db, records).await?;
    let spans: Vec<(Uuid, Span)> = all
        .iter()
        .filter(|(_, span)| span.pricing_class != PricingClass::Reserved)
        .cloned()
        .collect();
    let (book, clocks) =
        price_context(&state.db, spans.iter().map(|(_, s)| s.instance_type_id)).await?;
    let rated = |group: BTreeMap<String, Vec<Span>>| -> Vec<SpendPart> {
        group
            .into_iter()
            .map(|(key, spans)| {
                let rated = rating::rate(&spans, &book, &clocks);
                SpendPart {
                    key,
                    amount_micros: charges(&rated),
                    gpu_seconds: rated.usage.values().map(rating::Tally::gpu_seconds).sum(),
                }
            })
            .collect()
    };
    let mut by_day: BTreeMap<String, Vec<Span>> = BTreeMap::new();
    let mut by_order: BTreeMap<String, Vec<Span>> = BTreeMap::new();
    for (order, span) in spans {
        let day = DateTime::from_timestamp(span.start, 0)
            .unwrap_or(from)
            .format("%Y-%m-%d")
            .to_string();
        by_day.entry(day).or_default().push(span);
        by_order.entry(order.to_string()).or_default().push(span);
    }
    let days = rated(by_day);
    let mut orders = rated(by_order);
    orders.sort_by_key(|o| std::cmp::Reverse(o.amount_micros));
    let total_micros = match query.order_id {
        Some(_) => orders.iter().map(|o| o.amount_micros).sum(),
        None => {
            let now = state.clock.now();
            invoices::spend_of(&state.db, access.scope.org_id, from, to, now, all).await?
        }
    };
    Ok(Json(Spend {
        from,
        to,
        currency: state.config.currency.clone(),
        total_micros,
        days,
        orders,
    }))
}
