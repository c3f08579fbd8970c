//! The SLA API: a tenant's monthly report (billing, admin or owner), the
//! operators' view across organizations, and the policies operators set.

use axum::Json;
use axum::extract::State;
use chrono::{DateTime, Datelike, NaiveDate, TimeZone, Utc};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QuerySelect, Set};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::coverage::CreditTier;
use super::{SlaReport, measure};
use gantry_access::tenancy::access::{OrgAccess, need};
use gantry_core::audit;
use gantry_core::auth::principal::{Actor, Operator};
use gantry_core::error::{ApiError, ApiResult, ProblemResponses};
use gantry_core::http::extract::{ApiJson, ApiQuery};
use gantry_core::state::AppState;
use gantry_core::validate::Fields;
use gantry_entities::{order, sla_policy};
use gantry_types::classes::PriorityClass;

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct MonthQuery {
    /// `YYYY-MM` (UTC); this month when absent.
    #[param(pattern = "^[0-9]{4}-[0-9]{2}$")]
    pub month: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SlaPolicy {
    pub priority_class: PriorityClass,
    /// In hundredths of a percent: 9990 is 99.90 %.
    #[schema(minimum = 1, maximum = 10000)]
    pub availability_target_permyriad: i32,
    /// For guaranteed classes: the longest wait to start, in seconds.
    #[schema(minimum = 1, maximum = 31622400)]
    pub queue_wait_target_seconds: Option<i64>,
    /// Credits by how far availability fell; at most 10.
    pub credit_tiers: Vec<CreditTier>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetPolicies {
    /// Every class with a promise; classes left out have none.
    pub policies: Vec<SlaPolicy>,
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(org_report))
        .routes(routes!(all_reports))
        .routes(routes!(get_policies, set_policies))
}

/// The month asked for: `[start, end)`.
fn month(query: &MonthQuery, now: DateTime<Utc>) -> ApiResult<(DateTime<Utc>, DateTime<Utc>)> {
    let first = match query.month.as_deref() {
        None => NaiveDate::from_ymd_opt(now.year(), now.month(), 1),
        Some(text) => NaiveDate::parse_from_str(&format!("{text}-01"), "%Y-%m-%d").ok(),
    }
    .ok_or_else(|| {
        ApiError::unprocessable("invalid_month", "month must be YYYY-MM, such as 2026-12")
    })?;
    let next = first
        .checked_add_months(chrono::Months::new(1))
        .ok_or_else(|| ApiError::unprocessable("invalid_month", "month is out of range"))?;
    let at = |d: NaiveDate| d.and_hms_opt(0, 0, 0).map(|t| Utc.from_utc_datetime(&t));
    match (at(first), at(next)) {
        (Some(start), Some(end)) => Ok((start, end)),
        _ => Err(ApiError::unprocessable(
            "invalid_month",
            "month is out of range",
        )),
    }
}

/// The organization's SLA report for a month: availability per order and
/// class, queue waits, credits and the events behind them.
#[utoipa::path(
    get,
    path = "/orgs/{org_id}/sla",
    tag = "sla",
    params(("org_id" = Uuid, Path, description = "Organization id"), MonthQuery),
    responses((status = 200, description = "The report", body = SlaReport), ProblemResponses),
    security(("bearer" = []))
)]
async fn org_report(
    State(state): State<AppState>,
    access: OrgAccess<need::Billing>,
    ApiQuery(query): ApiQuery<MonthQuery>,
) -> ApiResult<Json<SlaReport>> {
    let now = state.clock.now();
    let (start, end) = month(&query, now)?;
    Ok(Json(
        measure(&state.db, access.scope.org_id, start, end, now).await?,
    ))
}

/// Every organization's SLA report for a month, for operators.
#[utoipa::path(
    get,
    path = "/admin/sla",
    tag = "admin",
    params(MonthQuery),
    responses((status = 200, description = "One report per organization with work under a promise", body = Vec<SlaReport>), ProblemResponses),
    security(("bearer" = []))
)]
async fn all_reports(
    State(state): State<AppState>,
    _operator: Operator,
    ApiQuery(query): ApiQuery<MonthQuery>,
) -> ApiResult<Json<Vec<SlaReport>>> {
    let now = state.clock.now();
    let (start, end) = month(&query, now)?;
    let classes: Vec<PriorityClass> = super::policies(&state.db).await?.into_keys().collect();
    let orgs: Vec<Uuid> = order::Entity::find()
        .filter(order::Column::PriorityClass.is_in(classes))
        .filter(order::Column::CreatedAt.lt(end))
        .filter(
            sea_orm::Condition::any()
                .add(order::Column::EndedAt.is_null())
                .add(order::Column::EndedAt.gt(start)),
        )
        .select_only()
        .column(order::Column::OrgId)
        .distinct()
        .into_tuple()
        .all(&state.db)
        .await?;
    let mut reports = Vec::new();
    for org_id in orgs {
        reports.push(measure(&state.db, org_id, start, end, now).await?);
    }
    reports.sort_by_key(|r| r.org_id);
    Ok(Json(reports))
}

/// What each priority class is promised.
#[utoipa::path(
    get,
    path = "/admin/sla/policies",
    tag = "admin",
    responses((status = 200, description = "The policies", body = Vec<SlaPolicy>), ProblemResponses),
    security(("bearer" = []))
)]
async fn get_policies(
    State(state): State<AppState>,
    _operator: Operator,
) -> ApiResult<Json<Vec<SlaPolicy>>> {
    let mut policies: Vec<SlaPolicy> = super::policies(&state.db)
        .await?
        .into_values()
        .map(|(p, tiers)| SlaPolicy {
            priority_class: p.priority_class,
            availability_target_permyriad: p.availability_target_permyriad,
            queue_wait_target_seconds: p.queue_wait_target_seconds,
            credit_tiers: tiers,
        })
        .collect();
    policies.sort_by_key(|p| p.priority_class.as_str());
    Ok(Json(policies))
}

/// Replaces the policies as a whole. Months already measured keep the
/// credits they granted.
#[utoipa::path(
    put,
    path = "/admin/sla/policies",
    tag = "admin",
    request_body = SetPolicies,
    responses((status = 200, description = "The policies", body = Vec<SlaPolicy>), ProblemResponses),
    security(("bearer" = []))
)]
async fn set_policies(
    State(state): State<AppState>,
    _operator: Operator,
    actor: Actor,
    ApiJson(request): ApiJson<SetPolicies>,
) -> ApiResult<Json<Vec<SlaPolicy>>> {
    let mut fields = Fields::default();
    let mut seen = std::collections::HashSet::new();
    for (i, p) in request.policies.iter().enumerate() {
        let at = |field: &str| format!("policies[{i}].{field}");
        if !seen.insert(p.priority_class) {
            fields.push(&at("priority_class"), "listed twice");
        }
        fields.range(
            &at("availability_target_permyriad"),
            p.availability_target_permyriad,
            1,
            10_000,
        );
        if let Some(wait) = p.queue_wait_target_seconds {
            fields.range(&at("queue_wait_target_seconds"), wait, 1, 31_622_400);
        }
        if p.credit_tiers.len() > 10 {
            fields.push(&at("credit_tiers"), "at most 10 tiers");
        }
        for (j, tier) in p.credit_tiers.iter().enumerate() {
            fields.range(
                &at(&format!("credit_tiers[{j}].below_permyriad")),
                tier.below_permyriad,
                1,
                10_000,
            );
            fields.range(
                &at(&format!("credit_tiers[{j}].credit_percent")),
                tier.credit_percent,
                1,
                100,
            );
        }
    }
    fields.finish()?;
    let now = state.clock.now();
    let txn = gantry_core::db::write(&state.db).await?;
    sla_policy::Entity::delete_many().exec(&txn).await?;
    for p in &request.policies {
        sla_policy::Entity::insert(sla_policy::ActiveModel {
            priority_class: Set(p.priority_class),
            availability_target_permyriad: Set(p.availability_target_permyriad),
            queue_wait_target_seconds: Set(p.queue_wait_target_seconds),
            credit_tiers: Set(
                serde_json::to_string(&p.credit_tiers).unwrap_or_else(|_| "[]".into())
            ),
            updated_at: Set(now),
        })
        .exec(&txn)
        .await?;
    }
    audit::platform(
        &txn,
        &actor,
        "sla.policies.set",
        "sla_policy",
        "all",
        serde_json::json!({ "classes": request.policies.iter().map(|p| p.priority_class.as_str()).collect::<Vec<_>>() }),
    )
    .await?;
    txn.commit().await?;
    let mut answer = request.policies;
    answer.sort_by_key(|p| p.priority_class.as_str());
    Ok(Json(answer))
}
