//! Corrections: usage is an append-only ledger, so an operator takes billed
//! time back with a compensating record (with a reason and an author) that
//! excludes part of a metered record's billable span from billing. Measured
//! time stays as it was; billable = measured − excluded still holds, and the
//! invoice shows the correction as its own line.

use axum::Json;
use axum::extract::{RawPathParams, State};
use axum::http::StatusCode;
use chrono::{DateTime, TimeDelta, Utc};
use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, Set};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use gantry_core::audit::{self, Change};
use gantry_core::auth::principal::{Actor, Operator};
use gantry_core::error::{ApiError, ApiResult, ProblemResponses, Resource};
use gantry_core::http::extract::{ApiJson, ApiQuery, path_uuid};
use gantry_core::http::pagination::{Page, PageQuery};
use gantry_core::state::AppState;
use gantry_core::validate::Fields;
use gantry_entities::{invoice, usage_record};
use gantry_types::classes::{InvoiceStatus, PricingClass, UsageKind};

#[derive(Debug, Serialize, ToSchema)]
pub struct UsageRecord {
    pub id: Uuid,
    pub org_id: Uuid,
    pub order_id: Uuid,
    pub allocation_id: Uuid,
    pub kind: UsageKind,
    /// 0 for the metered record of a span, 1, 2, … for its corrections.
    pub seq: i32,
    pub period_start: DateTime<Utc>,
    pub period_end: DateTime<Utc>,
    pub pricing_class: PricingClass,
    pub gpus: i32,
    /// Seconds measured (0 for a correction).
    pub seconds: i64,
    /// Seconds excluded from billing: a provider fault, or a correction.
    pub excluded_seconds: i64,
    pub reason: Option<String>,
    pub author: Option<Uuid>,
    pub created_at: DateTime<Utc>,
}

impl From<usage_record::Model> for UsageRecord {
    fn from(r: usage_record::Model) -> Self {
        Self {
            id: r.id,
            org_id: r.org_id,
            order_id: r.order_id,
            allocation_id: r.allocation_id,
            kind: r.kind,
            seq: r.seq,
            period_start: r.period_start,
            period_end: r.period_end,
            pricing_class: r.pricing_class,
            gpus: r.gpus,
            seconds: r.seconds,
            excluded_seconds: r.excluded_seconds,
            reason: r.reason,
            author: r.author,
            created_at: r.created_at,
        }
    }
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RecordFilter {
    pub org_id: Option<Uuid>,
    pub order_id: Option<Uuid>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Correction {
    /// Billable seconds of the record to take back (from its end).
    #[schema(minimum = 1, maximum = 3600)]
    pub seconds: i64,
    #[schema(min_length = 1, max_length = 500)]
    pub reason: String,
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_records))
        .routes(routes!(correct_record))
}

/// Usage records, oldest first, for operators.
#[utoipa::path(
    get,
    path = "/admin/usage-records",
    tag = "admin",
    params(PageQuery, RecordFilter),
    responses((status = 200, description = "A page of usage records", body = Page<UsageRecord>), ProblemResponses),
    security(("bearer" = []))
)]
async fn list_records(
    State(state): State<AppState>,
    _operator: Operator,
    ApiQuery(query): ApiQuery<PageQuery>,
    ApiQuery(filter): ApiQuery<RecordFilter>,
) -> ApiResult<Json<Page<UsageRecord>>> {
    let request = query.validate()?;
    let mut select = usage_record::Entity::find();
    if let Some(org_id) = filter.org_id {
        select = select.filter(usage_record::Column::OrgId.eq(org_id));
    }
    if let Some(order_id) = filter.order_id {
        select = select.filter(usage_record::Column::OrderId.eq(order_id));
    }
    let rows = request
        .ascending(select, usage_record::Column::Id)
        .all(&state.db)
        .await?;
    Ok(Json(Page::from_rows(
        rows,
        request,
        |r| r.id,
        UsageRecord::from,
    )))
}

/// Takes billable seconds of a metered record back with a compensating
/// record. Refused once a finalized invoice holds the record.
#[utoipa::path(
    post,
    path = "/admin/usage-records/{record_id}/corrections",
    tag = "admin",
    params(("record_id" = Uuid, Path, description = "Usage record id")),
    request_body = Correction,
    responses((status = 201, description = "The compensating record", body = UsageRecord), ProblemResponses),
    security(("bearer" = []))
)]
async fn correct_record(
    State(state): State<AppState>,
    operator: Operator,
    actor: Actor,
    params: RawPathParams,
    ApiJson(request): ApiJson<Correction>,
) -> ApiResult<(StatusCode, Json<UsageRecord>)> {
    let mut fields = Fields::default();
    fields.range("seconds", request.seconds, 1, 3600);
    let reason = fields.reason("reason", &request.reason);
    fields.finish()?;
    let id = path_uuid(&params, "record_id", Resource::UsageRecord)?;
    let txn = gantry_core::db::write(&state.db).await?;
    let original = usage_record::Entity::find_by_id(id)
        .one(&txn)
        .await?
        .ok_or_else(|| ApiError::not_found(Resource::UsageRecord, id))?;
    // Finalizing takes this lock too: a correction lands before an invoice
    // freezes or is refused after.
    gantry_access::tenancy::orgs::lock(&txn, original.org_id).await?;
    if original.kind != UsageKind::Metered {
        return Err(ApiError::unprocessable(
            "not_metered",
            "only a metered record can be corrected; correct the record it compensates",
        ));
    }
    let invoiced = invoice::Entity::find()
        .filter(invoice::Column::OrgId.eq(original.org_id))
        .filter(invoice::Column::Status.is_in([InvoiceStatus::Finalized, InvoiceStatus::Paid]))
        .filter(invoice::Column::PeriodStart.lte(original.period_start))
        .filter(invoice::Column::PeriodEnd.gt(original.period_start))
        .one(&txn)
        .await?;
    if let Some(invoice) = invoiced {
        return Err(ApiError::conflict(
            "already_invoiced",
            format!(
                "finalized invoice {} holds this record; credit it with an adjustment on a draft",
                invoice.id
            ),
        ));
    }
    let earlier = usage_record::Entity::find()
        .filter(usage_record::Column::AllocationId.eq(original.allocation_id))
        .filter(usage_record::Column::Kind.eq(UsageKind::Correction))
        .filter(usage_record::Column::PeriodStart.gte(original.period_start))
        .filter(usage_record::Column::PeriodStart.lt(original.period_end))
        .all(&txn)
        .await?;
    let taken: i64 = earlier.iter().map(|c| c.excluded_seconds).sum();
    let billable = original.seconds - original.excluded_seconds - taken;
    if request.seconds > billable {
        return Err(ApiError::unprocessable(
            "beyond_billable",
            format!("the record has {billable} billable seconds left to take back"),
        ));
    }
    // Billable time is the front of the span; corrections take it back
    // from its end, one after the other.
    let end = original.period_end - TimeDelta::seconds(original.excluded_seconds + taken);
    let start = end - TimeDelta::seconds(request.seconds);
    let now = state.clock.now();
    let row = usage_record::ActiveModel {
        id: Set(Uuid::now_v7()),
        org_id: Set(original.org_id),
        project_id: Set(original.project_id),
        order_id: Set(original.order_id),
        allocation_id: Set(original.allocation_id),
        node_id: Set(original.node_id),
        region_id: Set(original.region_id),
        gpu_model_id: Set(original.gpu_model_id),
        instance_type_id: Set(original.instance_type_id),
        pricing_class: Set(original.pricing_class),
        usage_day: Set(original.usage_day.clone()),
        period_start: Set(start),
        period_end: Set(end),
        gpus: Set(original.gpus),
        gpu_milli: Set(original.gpu_milli),
        seconds: Set(0),
        excluded_seconds: Set(request.seconds),
        kind: Set(UsageKind::Correction),
        seq: Set(i32::try_from(earlier.len()).unwrap_or(i32::MAX - 1) + 1),
        reason: Set(Some(reason.clone())),
        author: Set(Some(operator.user.id)),
        created_at: Set(now),
    }
    .insert(&txn)
    .await?;
    audit::record(
        &txn,
        Change {
            org_id: Some(original.org_id),
            action: "usage.correct",
            target_type: "usage_record",
            target_id: Some(original.id.to_string()),
            details: serde_json::json!({ "seconds": request.seconds, "reason": reason, "correction": row.id }),
            actor: &actor,
        },
    )
    .await?;
    txn.commit().await?;
    Ok((StatusCode::CREATED, Json(row.into())))
}
