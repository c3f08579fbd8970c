//! The invoice API: tenants (billing, admin or owner) read their invoices
//! as JSON, CSV or a printable page; operators make drafts for any period,
//! adjust, re-rate, finalize, mark paid or void them, and set discounts.

use axum::Json;
use axum::extract::{RawPathParams, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use chrono::{DateTime, TimeDelta, Utc};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder, Set,
};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::invoices;
use super::prepaid;
use gantry_access::tenancy::access::{OrgAccess, OrgScope, need};
use gantry_core::audit::{self, Change};
use gantry_core::auth::principal::{Actor, Operator};
use gantry_core::error::{ApiError, ApiResult, ProblemResponses, Resource};
use gantry_core::http::csv::{Format, Table};
use gantry_core::http::extract::{ApiJson, ApiQuery, path_uuid};
use gantry_core::http::pagination::{Page, PageQuery};
use gantry_core::state::AppState;
use gantry_core::validate::Fields;
use gantry_entities::{balance_entry, billing_account, invoice, invoice_line};
use gantry_pricing::book::micros_text;
use gantry_types::classes::{BalanceKind, InvoiceStatus, LineKind, PricingClass};

/// The longest period one invoice may cover.
const PERIOD_MAX_DAYS: i64 = 366;
/// The largest adjustment, in micro-units (a billion of the currency).
const ADJUSTMENT_MAX: i64 = 1_000_000_000_000_000;

#[derive(Debug, Serialize, ToSchema)]
pub struct InvoiceSummary {
    pub id: Uuid,
    pub org_id: Uuid,
    /// Start of the period (inclusive).
    pub period_start: DateTime<Utc>,
    /// End of the period (exclusive).
    pub period_end: DateTime<Utc>,
    pub status: InvoiceStatus,
    pub currency: String,
    /// Usage charges, in micro-units of `currency`.
    pub subtotal_micros: i64,
    /// The standing discount (zero or negative).
    pub discount_micros: i64,
    /// Operators' credits (negative) and charges (positive).
    pub credits_micros: i64,
    /// `subtotal + discount + credits`; negative when owed to the tenant.
    pub total_micros: i64,
    /// When its usage lines were last rated.
    pub rated_at: DateTime<Utc>,
    pub finalized_at: Option<DateTime<Utc>>,
    pub paid_at: Option<DateTime<Utc>>,
    pub voided_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

impl From<invoice::Model> for InvoiceSummary {
    fn from(row: invoice::Model) -> Self {
        Self {
            id: row.id,
            org_id: row.org_id,
            period_start: row.period_start,
            period_end: row.period_end,
            status: row.status,
            currency: row.currency,
            subtotal_micros: row.subtotal_micros,
            discount_micros: row.discount_micros,
            credits_micros: row.credits_micros,
            total_micros: row.total_micros,
            rated_at: row.rated_at,
            finalized_at: row.finalized_at,
            paid_at: row.paid_at,
            voided_at: row.voided_at,
            created_at: row.created_at,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct InvoiceLine {
    pub position: i32,
    pub kind: LineKind,
    pub description: String,
    pub instance_type: Option<String>,
    pub region: Option<String>,
    pub pricing_class: Option<PricingClass>,
    /// The price per instance-hour in force, in micro-units.
    pub hourly_micros: Option<i64>,
    /// The share of it charged, in thousandths (off-peak multipliers).
    pub price_permille: Option<i32>,
    /// Instance-seconds.
    pub quantity_seconds: i64,
    pub gpu_seconds: i64,
    pub amount_micros: i64,
    /// Why an operator adjusted the invoice.
    pub reason: Option<String>,
    /// The operator who did.
    pub author: Option<Uuid>,
    /// The volume a storage line charges for; its `quantity_seconds` are
    /// GiB-seconds.
    pub volume_id: Option<Uuid>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Invoice {
    #[serde(flatten)]
    pub summary: InvoiceSummary,
    pub lines: Vec<InvoiceLine>,
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct InvoiceFormat {
    /// `json` when absent; `csv` answers `text/csv`.
    pub format: Option<Format>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateInvoice {
    /// Start of the period (inclusive).
    pub period_start: DateTime<Utc>,
    /// End of the period (exclusive); at most 366 days after the start.
    pub period_end: DateTime<Utc>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Adjustment {
    /// Negative for a credit, positive for a charge, in micro-units; not 0.
    #[schema(minimum = -1000000000000000_i64, maximum = 1000000000000000_i64)]
    pub amount_micros: i64,
    /// Why, for the tenant and the audit log.
    #[schema(min_length = 1, max_length = 500)]
    pub reason: String,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BillingTerms {
    /// A standing discount on usage, in thousandths (0 to 1000).
    #[schema(minimum = 0, maximum = 1000)]
    pub discount_permille: i32,
    /// A monthly budget in micro-units; alerts at 50, 80 and 100 % of it.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 1000000000000000_i64)]
    pub monthly_budget_micros: Option<i64>,
    /// Once the budget is spent, refuse new orders but production ones.
    #[serde(default)]
    pub hard_cap: bool,
    /// Draw usage from a prepaid balance as it is metered.
    #[serde(default)]
    pub prepaid: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct BalanceEntry {
    pub id: Uuid,
    pub kind: BalanceKind,
    /// Positive for a top-up, negative for usage drawn.
    pub amount_micros: i64,
    pub period_start: Option<DateTime<Utc>>,
    pub period_end: Option<DateTime<Utc>>,
    pub reason: Option<String>,
    pub author: Option<Uuid>,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Balance {
    pub prepaid: bool,
    pub balance_micros: i64,
    /// When it ran out; new orders are refused until a top-up.
    pub exhausted_at: Option<DateTime<Utc>>,
    /// Usage whose spans start before this has been drawn.
    pub drawn_until: Option<DateTime<Utc>>,
    /// The latest 50 movements, newest first.
    pub entries: Vec<BalanceEntry>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TopUp {
    #[schema(minimum = 1, maximum = 1000000000000000_i64)]
    pub amount_micros: i64,
    #[schema(min_length = 1, max_length = 500)]
    pub reason: String,
}

/// The terms, with this month's spend as the scheduling leader last rated
/// it (about once a minute).
#[derive(Debug, Serialize, ToSchema)]
pub struct BillingStatus {
    pub terms: BillingTerms,
    pub month_spend_micros: i64,
    /// The month `month_spend_micros` is of.
    pub spend_month: Option<DateTime<Utc>>,
    /// The highest budget threshold alerted this month, in percent.
    pub alerted_percent: i32,
}

impl BillingStatus {
    fn of(account: Option<billing_account::Model>) -> Self {
        match account {
            Some(a) => Self {
                terms: BillingTerms {
                    discount_permille: a.discount_permille,
                    monthly_budget_micros: a.monthly_budget_micros,
                    hard_cap: a.hard_cap,
                    prepaid: a.prepaid,
                },
                month_spend_micros: a.month_spend_micros,
                spend_month: a.spend_month,
                alerted_percent: a.alerted_percent,
            },
            None => Self {
                terms: BillingTerms {
                    discount_permille: 0,
                    monthly_budget_micros: None,
                    hard_cap: false,
                    prepaid: false,
                },
                month_spend_micros: 0,
                spend_month: None,
                alerted_percent: 0,
            },
        }
    }
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_invoices))
        .routes(routes!(get_invoice))
        .routes(routes!(print_invoice))
        .routes(routes!(create_invoice))
        .routes(routes!(rate_invoice))
        .routes(routes!(finalize_invoice))
        .routes(routes!(pay_invoice))
        .routes(routes!(void_invoice))
        .routes(routes!(adjust_invoice))
        .routes(routes!(get_terms, set_terms))
        .routes(routes!(org_billing))
        .routes(routes!(org_balance))
        .routes(routes!(top_up))
}

async fn view(db: &impl ConnectionTrait, row: invoice::Model) -> ApiResult<Invoice> {
    let types = gantry_catalog::instance_type_names(db).await?;
    let regions = gantry_catalog::region_names(db).await?;
    let lines = invoice_line::Entity::find()
        .filter(invoice_line::Column::InvoiceId.eq(row.id))
        .order_by_asc(invoice_line::Column::Position)
        .all(db)
        .await?
        .into_iter()
        .map(|l| InvoiceLine {
            position: l.position,
            kind: l.kind,
            description: l.description,
            instance_type: l.instance_type_id.and_then(|id| types.get(&id).cloned()),
            region: l.region_id.and_then(|id| regions.get(&id).cloned()),
            pricing_class: l.pricing_class,
            hourly_micros: l.hourly_micros,
            price_permille: l.price_permille,
            quantity_seconds: l.quantity_seconds,
            gpu_seconds: l.gpu_seconds,
            amount_micros: l.amount_micros,
            reason: l.reason,
            author: l.author,
            volume_id: l.volume_id,
        })
        .collect();
    Ok(Invoice {
        summary: row.into(),
        lines,
    })
}

/// One of the organization's invoices.
async fn scoped(
    db: &impl ConnectionTrait,
    scope: &OrgScope,
    params: &RawPathParams,
) -> ApiResult<invoice::Model> {
    let id = path_uuid(params, "invoice_id", Resource::Invoice)?;
    scope
        .select::<invoice::Entity>()
        .filter(invoice::Column::Id.eq(id))
        .one(db)
        .await?
        .ok_or_else(|| ApiError::not_found(Resource::Invoice, id))
}

/// The organization's invoices, newest first.
#[utoipa::path(
    get,
    path = "/orgs/{org_id}/invoices",
    tag = "billing",
    params(("org_id" = Uuid, Path, description = "Organization id"), PageQuery),
    responses((status = 200, description = "A page of invoices", body = Page<InvoiceSummary>), ProblemResponses),
    security(("bearer" = []))
)]
async fn list_invoices(
    State(state): State<AppState>,
    access: OrgAccess<need::Billing>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Json<Page<InvoiceSummary>>> {
    let request = query.validate()?;
    let rows = request
        .descending(
            access.scope.select::<invoice::Entity>(),
            invoice::Column::Id,
        )
        .all(&state.db)
        .await?;
    Ok(Json(Page::from_rows(
        rows,
        request,
        |i| i.id,
        InvoiceSummary::from,
    )))
}

/// One invoice with its lines, as JSON or CSV.
#[utoipa::path(
    get,
    path = "/orgs/{org_id}/invoices/{invoice_id}",
    tag = "billing",
    params(
        ("org_id" = Uuid, Path, description = "Organization id"),
        ("invoice_id" = Uuid, Path, description = "Invoice id"),
        InvoiceFormat,
    ),
    responses(
        (status = 200, description = "The invoice, as JSON or (`format=csv`) CSV",
         content((Invoice = "application/json"), (String = "text/csv"))),
        ProblemResponses,
    ),
    security(("bearer" = []))
)]
async fn get_invoice(
    State(state): State<AppState>,
    access: OrgAccess<need::Billing>,
    params: RawPathParams,
    ApiQuery(query): ApiQuery<InvoiceFormat>,
) -> ApiResult<Response> {
    let row = scoped(&state.db, &access.scope, &params).await?;
    let invoice = view(&state.db, row).await?;
    Ok(match query.format.unwrap_or_default() {
        Format::Json => Json(invoice).into_response(),
        Format::Csv => to_csv(&invoice).download("invoice.csv"),
    })
}

/// One invoice as a printable HTML page.
#[utoipa::path(
    get,
    path = "/orgs/{org_id}/invoices/{invoice_id}/print",
    tag = "billing",
    params(
        ("org_id" = Uuid, Path, description = "Organization id"),
        ("invoice_id" = Uuid, Path, description = "Invoice id"),
    ),
    responses(
        (status = 200, description = "The invoice as a printable page", content((String = "text/html"))),
        ProblemResponses,
    ),
    security(("bearer" = []))
)]
async fn print_invoice(
    State(state): State<AppState>,
    access: OrgAccess<need::Billing>,
    params: RawPathParams,
) -> ApiResult<Html<String>> {
    let row = scoped(&state.db, &access.scope, &params).await?;
    let org = gantry_access::tenancy::orgs::by_id(&state.db, row.org_id).await?;
    let invoice = view(&state.db, row).await?;
    Ok(Html(to_html(&invoice, &org.name)))
}

/// Makes a draft invoice for any period of an organization, rated now.
#[utoipa::path(
    post,
    path = "/admin/orgs/{org_id}/invoices",
    tag = "admin",
    params(("org_id" = Uuid, Path, description = "Organization id")),
    request_body = CreateInvoice,
    responses((status = 201, description = "The draft", body = Invoice), ProblemResponses),
    security(("bearer" = []))
)]
async fn create_invoice(
    State(state): State<AppState>,
    _operator: Operator,
    actor: Actor,
    params: RawPathParams,
    ApiJson(request): ApiJson<CreateInvoice>,
) -> ApiResult<(StatusCode, Json<Invoice>)> {
    let org = gantry_access::tenancy::orgs::from_path(&state.db, &params).await?;
    let (start, end) = (request.period_start, request.period_end);
    let mut fields = Fields::default();
    if start >= end {
        fields.push("period_end", "must be after period_start");
    } else if end - start > TimeDelta::days(PERIOD_MAX_DAYS) {
        fields.push(
            "period_end",
            format!("a period may cover at most {PERIOD_MAX_DAYS} days"),
        );
    }
    fields.finish()?;
    let now = state.clock.now();
    let draft =
        invoices::create_draft(&state.db, org.id, start, end, &state.config.currency, now).await?;
    audit::record(
        &state.db,
        Change {
            org_id: Some(org.id),
            action: "invoice.create",
            target_type: "invoice",
            target_id: Some(draft.id.to_string()),
            details: serde_json::json!({ "period_start": start, "period_end": end }),
            actor: &actor,
        },
    )
    .await?;
    Ok((StatusCode::CREATED, Json(view(&state.db, draft).await?)))
}

async fn invoice_of(state: &AppState, params: &RawPathParams) -> ApiResult<invoice::Model> {
    let id = path_uuid(params, "invoice_id", Resource::Invoice)?;
    invoice::Entity::find_by_id(id)
        .one(&state.db)
        .await?
        .ok_or_else(|| ApiError::not_found(Resource::Invoice, id))
}

/// Records an operator's change to an invoice and answers it.
async fn changed(
    state: &AppState,
    actor: &Actor,
    action: &'static str,
    row: invoice::Model,
    details: serde_json::Value,
) -> ApiResult<Json<Invoice>> {
    audit::record(
        &state.db,
        Change {
            org_id: Some(row.org_id),
            action,
            target_type: "invoice",
            target_id: Some(row.id.to_string()),
            details,
            actor,
        },
    )
    .await?;
    Ok(Json(view(&state.db, row).await?))
}

/// Rates a draft again from the usage recorded so far.
#[utoipa::path(
    post,
    path = "/admin/invoices/{invoice_id}/rate",
    tag = "admin",
    params(("invoice_id" = Uuid, Path, description = "Invoice id")),
    responses((status = 200, description = "The re-rated draft", body = Invoice), ProblemResponses),
    security(("bearer" = []))
)]
async fn rate_invoice(
    State(state): State<AppState>,
    _operator: Operator,
    params: RawPathParams,
) -> ApiResult<Json<Invoice>> {
    let id = invoice_of(&state, &params).await?.id;
    let rated = invoices::rate_draft(&state.db, id, state.clock.now()).await?;
    Ok(Json(view(&state.db, rated).await?))
}

/// Rates a draft one last time and freezes it; refused while usage of its
/// period may still be metered.
#[utoipa::path(
    post,
    path = "/admin/invoices/{invoice_id}/finalize",
    tag = "admin",
    params(("invoice_id" = Uuid, Path, description = "Invoice id")),
    responses((status = 200, description = "The finalized invoice", body = Invoice), ProblemResponses),
    security(("bearer" = []))
)]
async fn finalize_invoice(
    State(state): State<AppState>,
    _operator: Operator,
    actor: Actor,
    params: RawPathParams,
) -> ApiResult<Json<Invoice>> {
    let id = invoice_of(&state, &params).await?.id;
    let settle = invoices::settle_time(
        state.config.agent_heartbeat_deadline_seconds,
        state.config.metering_interval_seconds,
    );
    let row = invoices::finalize(&state.db, id, state.clock.now(), settle).await?;
    let total = row.total_micros;
    changed(
        &state,
        &actor,
        "invoice.finalize",
        row,
        serde_json::json!({ "total_micros": total }),
    )
    .await
}

/// Marks a finalized invoice paid.
#[utoipa::path(
    post,
    path = "/admin/invoices/{invoice_id}/pay",
    tag = "admin",
    params(("invoice_id" = Uuid, Path, description = "Invoice id")),
    responses((status = 200, description = "The paid invoice", body = Invoice), ProblemResponses),
    security(("bearer" = []))
)]
async fn pay_invoice(
    State(state): State<AppState>,
    _operator: Operator,
    actor: Actor,
    params: RawPathParams,
) -> ApiResult<Json<Invoice>> {
    let id = invoice_of(&state, &params).await?.id;
    let row = invoices::settle(&state.db, id, InvoiceStatus::Paid, state.clock.now()).await?;
    changed(&state, &actor, "invoice.pay", row, serde_json::json!({})).await
}

/// Voids a draft or finalized invoice; its period can then be invoiced
/// again.
#[utoipa::path(
    post,
    path = "/admin/invoices/{invoice_id}/void",
    tag = "admin",
    params(("invoice_id" = Uuid, Path, description = "Invoice id")),
    responses((status = 200, description = "The voided invoice", body = Invoice), ProblemResponses),
    security(("bearer" = []))
)]
async fn void_invoice(
    State(state): State<AppState>,
    _operator: Operator,
    actor: Actor,
    params: RawPathParams,
) -> ApiResult<Json<Invoice>> {
    let id = invoice_of(&state, &params).await?.id;
    let row = invoices::settle(&state.db, id, InvoiceStatus::Void, state.clock.now()).await?;
    changed(&state, &actor, "invoice.void", row, serde_json::json!({})).await
}

/// Adds a credit or a charge to a draft, with its reason.
#[utoipa::path(
    post,
    path = "/admin/invoices/{invoice_id}/adjustments",
    tag = "admin",
    params(("invoice_id" = Uuid, Path, description = "Invoice id")),
    request_body = Adjustment,
    responses((status = 200, description = "The adjusted draft", body = Invoice), ProblemResponses),
    security(("bearer" = []))
)]
async fn adjust_invoice(
    State(state): State<AppState>,
    operator: Operator,
    actor: Actor,
    params: RawPathParams,
    ApiJson(request): ApiJson<Adjustment>,
) -> ApiResult<Json<Invoice>> {
    let mut fields = Fields::default();
    if request.amount_micros == 0 {
        fields.push("amount_micros", "must not be 0");
    }
    fields.range(
        "amount_micros",
        request.amount_micros,
        -ADJUSTMENT_MAX,
        ADJUSTMENT_MAX,
    );
    let reason = fields.reason("reason", &request.reason);
    fields.finish()?;
    let id = invoice_of(&state, &params).await?.id;
    let row = invoices::adjust(
        &state.db,
        id,
        request.amount_micros,
        &reason,
        operator.user.id,
        state.clock.now(),
    )
    .await?;
    changed(
        &state,
        &actor,
        "invoice.adjust",
        row,
        serde_json::json!({ "amount_micros": request.amount_micros, "reason": reason }),
    )
    .await
}

/// An organization's billing terms.
#[utoipa::path(
    get,
    path = "/admin/orgs/{org_id}/billing",
    tag = "admin",
    params(("org_id" = Uuid, Path, description = "Organization id")),
    responses((status = 200, description = "Terms and spend", body = BillingStatus), ProblemResponses),
    security(("bearer" = []))
)]
async fn get_terms(
    State(state): State<AppState>,
    _operator: Operator,
    params: RawPathParams,
) -> ApiResult<Json<BillingStatus>> {
    let org = gantry_access::tenancy::orgs::from_path(&state.db, &params).await?;
    let account = billing_account::Entity::find_by_id(org.id)
        .one(&state.db)
        .await?;
    Ok(Json(BillingStatus::of(account)))
}

/// The organization's billing terms, budget and spend this month.
#[utoipa::path(
    get,
    path = "/orgs/{org_id}/billing",
    tag = "billing",
    params(("org_id" = Uuid, Path, description = "Organization id")),
    responses((status = 200, description = "Terms and spend", body = BillingStatus), ProblemResponses),
    security(("bearer" = []))
)]
async fn org_billing(
    State(state): State<AppState>,
    access: OrgAccess<need::Billing>,
) -> ApiResult<Json<BillingStatus>> {
    let account = billing_account::Entity::find_by_id(access.scope.org_id)
        .one(&state.db)
        .await?;
    Ok(Json(BillingStatus::of(account)))
}

/// Sets an organization's billing terms; drafts pick them up when next
/// rated, finalized invoices never.
#[utoipa::path(
    put,
    path = "/admin/orgs/{org_id}/billing",
    tag = "admin",
    params(("org_id" = Uuid, Path, description = "Organization id")),
    request_body = BillingTerms,
    responses((status = 200, description = "The terms", body = BillingTerms), ProblemResponses),
    security(("bearer" = []))
)]
async fn set_terms(
    State(state): State<AppState>,
    _operator: Operator,
    actor: Actor,
    params: RawPathParams,
    ApiJson(request): ApiJson<BillingTerms>,
) -> ApiResult<Json<BillingTerms>> {
    let mut fields = Fields::default();
    fields.range("discount_permille", request.discount_permille, 0, 1000);
    if let Some(budget) = request.monthly_budget_micros {
        fields.range("monthly_budget_micros", budget, 1, ADJUSTMENT_MAX);
    }
    if request.hard_cap && request.monthly_budget_micros.is_none() {
        fields.push("hard_cap", "needs a monthly_budget_micros to cap at");
    }
    fields.finish()?;
    let txn = gantry_core::db::write(&state.db).await?;
    let org = gantry_access::tenancy::orgs::from_path(&txn, &params).await?;
    let now = state.clock.now();
    let existing = billing_account::Entity::find_by_id(org.id)
        .one(&txn)
        .await?;
    let is_new = existing.is_none();
    let mut row = match existing {
        Some(account) => account.into(),
        None => billing_account::ActiveModel {
            org_id: Set(org.id),
            spend_month: Set(None),
            month_spend_micros: Set(0),
            alerted_percent: Set(0),
            ..Default::default()
        },
    };
    row.discount_permille = Set(request.discount_permille);
    row.monthly_budget_micros = Set(request.monthly_budget_micros);
    row.hard_cap = Set(request.hard_cap);
    // A balance draws usage from the moment the account turns prepaid.
    if request.prepaid && !matches!(row.prepaid, sea_orm::ActiveValue::Unchanged(true)) {
        row.drawn_until = Set(DateTime::from_timestamp(now.timestamp(), 0));
    }
    row.prepaid = Set(request.prepaid);
    row.updated_at = Set(now);
    if is_new {
        row.insert(&txn).await?;
    } else {
        row.update(&txn).await?;
    }
    audit::record(
        &txn,
        Change {
            org_id: Some(org.id),
            action: "billing.set",
            target_type: "organization",
            target_id: Some(org.id.to_string()),
            details: serde_json::json!({
                "discount_permille": request.discount_permille,
                "monthly_budget_micros": request.monthly_budget_micros,
                "hard_cap": request.hard_cap,
            }),
            actor: &actor,
        },
    )
    .await?;
    txn.commit().await?;
    Ok(Json(request))
}

async fn balance_of(state: &AppState, org_id: Uuid) -> ApiResult<Balance> {
    let account = billing_account::Entity::find_by_id(org_id)
        .one(&state.db)
        .await?;
    Ok(Balance {
        prepaid: account.as_ref().is_some_and(|a| a.prepaid),
        balance_micros: prepaid::balance(&state.db, org_id).await?,
        exhausted_at: account.as_ref().and_then(|a| a.exhausted_at),
        drawn_until: account.as_ref().and_then(|a| a.drawn_until),
        entries: prepaid::entries(&state.db, org_id)
            .await?
            .into_iter()
            .map(|e| BalanceEntry {
                id: e.id,
                kind: e.kind,
                amount_micros: e.amount_micros,
                period_start: e.period_start,
                period_end: e.period_end,
                reason: e.reason,
                author: e.author,
                created_at: e.created_at,
            })
            .collect(),
    })
}

/// The organization's prepaid balance and its latest movements.
#[utoipa::path(
    get,
    path = "/orgs/{org_id}/balance",
    tag = "billing",
    params(("org_id" = Uuid, Path, description = "Organization id")),
    responses((status = 200, description = "The balance", body = Balance), ProblemResponses),
    security(("bearer" = []))
)]
async fn org_balance(
    State(state): State<AppState>,
    access: OrgAccess<need::Billing>,
) -> ApiResult<Json<Balance>> {
    Ok(Json(balance_of(&state, access.scope.org_id).await?))
}

/// Adds money to an organization's prepaid balance; a balance back above
/// zero admits orders again.
#[utoipa::path(
    post,
    path = "/admin/orgs/{org_id}/balance/top-ups",
    tag = "admin",
    params(("org_id" = Uuid, Path, description = "Organization id")),
    request_body = TopUp,
    responses((status = 201, description = "The balance", body = Balance), ProblemResponses),
    security(("bearer" = []))
)]
async fn top_up(
    State(state): State<AppState>,
    operator: Operator,
    actor: Actor,
    params: RawPathParams,
    ApiJson(request): ApiJson<TopUp>,
) -> ApiResult<(StatusCode, Json<Balance>)> {
    let mut fields = Fields::default();
    fields.range("amount_micros", request.amount_micros, 1, ADJUSTMENT_MAX);
    let reason = fields.reason("reason", &request.reason);
    fields.finish()?;
    let txn = gantry_core::db::write(&state.db).await?;
    let org = gantry_access::tenancy::orgs::from_path(&txn, &params).await?;
    let account = billing_account::Entity::find_by_id(org.id)
        .one(&txn)
        .await?
        .filter(|a| a.prepaid)
        .ok_or_else(|| {
            ApiError::conflict(
                "not_prepaid",
                "the organization is not prepaid; set `prepaid` in its billing terms first",
            )
        })?;
    let after = prepaid::balance(&txn, org.id)
        .await?
        .checked_add(request.amount_micros)
        .filter(|after| *after <= prepaid::BALANCE_MAX)
        .ok_or_else(|| {
            ApiError::unprocessable(
                "balance_limit",
                format!(
                    "the balance may not exceed {} micro-units; top up less",
                    prepaid::BALANCE_MAX
                ),
            )
        })?;
    let now = state.clock.now();
    balance_entry::ActiveModel {
        id: Set(Uuid::now_v7()),
        org_id: Set(org.id),
        kind: Set(BalanceKind::TopUp),
        amount_micros: Set(request.amount_micros),
        period_start: Set(None),
        period_end: Set(None),
        reason: Set(Some(reason.clone())),
        author: Set(Some(operator.user.id)),
        created_at: Set(now),
    }
    .insert(&txn)
    .await?;
    if after > 0 {
        let mut row: billing_account::ActiveModel = account.into();
        row.exhausted_at = Set(None);
        row.update(&txn).await?;
    }
    audit::record(
        &txn,
        Change {
            org_id: Some(org.id),
            action: "prepaid.top_up",
            target_type: "organization",
            target_id: Some(org.id.to_string()),
            details: serde_json::json!({ "amount_micros": request.amount_micros, "reason": reason }),
            actor: &actor,
        },
    )
    .await?;
    txn.commit().await?;
    Ok((StatusCode::CREATED, Json(balance_of(&state, org.id).await?)))
}

/// The lines, then the totals, as CSV; amounts as decimals of the currency.
fn to_csv(invoice: &Invoice) -> Table {
    let mut table = Table::new(&[
        "position",
        "kind",
        "description",
        "instance_type",
        "region",
        "pricing_class",
        "hourly_price",
        "price_permille",
        "quantity_seconds",
        "gpu_seconds",
        "amount",
        "reason",
    ]);
    for l in &invoice.lines {
        let cells = [
            l.position.to_string(),
            l.kind.as_str().to_owned(),
            l.description.clone(),
            l.instance_type.clone().unwrap_or_default(),
            l.region.clone().unwrap_or_default(),
            l.pricing_class.map_or("", PricingClass::as_str).to_owned(),
            l.hourly_micros.map(micros_text).unwrap_or_default(),
            l.price_permille.map(|p| p.to_string()).unwrap_or_default(),
            l.quantity_seconds.to_string(),
            l.gpu_seconds.to_string(),
            micros_text(l.amount_micros),
            l.reason.clone().unwrap_or_default(),
        ];
        table.row(cells.iter().map(String::as_str));
    }
    let s = &invoice.summary;
    for (label, micros) in [
        ("subtotal", s.subtotal_micros),
        ("discount", s.discount_micros),
        ("credits", s.credits_micros),
        ("total", s.total_micros),
    ] {
        let amount = micros_text(micros);
        table.row(["", label, "", "", "", "", "", "", "", "", &amount, ""]);
    }
    table
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A self-contained page (no scripts, no outside resources) that prints on
/// one sheet per screenful of lines.
fn to_html(invoice: &Invoice, org_name: &str) -> String {
    let s = &invoice.summary;
    let money = |micros: i64| format!("{} {}", micros_text(micros), escape(&s.currency));
    let mut rows = String::new();
    for l in &invoice.lines {
        rows.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td class=n>{}</td><td class=n>{}</td><td class=n>{}</td></tr>\n",
            escape(&l.description),
            escape(l.reason.as_deref().unwrap_or_default()),
            l.quantity_seconds,
            l.gpu_seconds,
            money(l.amount_micros),
        ));
    }
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Invoice {id}</title>
<style>
body {{ font: 14px/1.4 system-ui, sans-serif; margin: 2rem; color: #111; }}
table {{ border-collapse: collapse; width: 100%; }}
th, td {{ border-bottom: 1px solid #ccc; padding: .35rem .5rem; text-align: left; }}
td.n, th.n {{ text-align: right; font-variant-numeric: tabular-nums; }}
tfoot td {{ border: 0; font-weight: 600; }}
@media print {{ body {{ margin: 0; }} }}
</style></head><body>
<h1>Invoice</h1>
<p>{org}<br>Invoice {id} · {status}<br>Period {start} to {end} (UTC, end exclusive)</p>
<table>
<thead><tr><th>Item</th><th>Reason</th><th class=n>Instance-seconds</th><th class=n>GPU-seconds</th><th class=n>Amount</th></tr></thead>
<tbody>
{rows}</tbody>
<tfoot>
<tr><td colspan=4>Subtotal</td><td class=n>{subtotal}</td></tr>
<tr><td colspan=4>Discount</td><td class=n>{discount}</td></tr>
<tr><td colspan=4>Credits and adjustments</td><td class=n>{credits}</td></tr>
<tr><td colspan=4>Total</td><td class=n>{total}</td></tr>
</tfoot></table>
<p>Usage is rated per second at the price in force each second; each line is rounded once, half up, to a millionth of the currency.</p>
</body></html>
"#,
        id = s.id,
        org = escape(org_name),
        status = s.status.as_str(),
        start = s.period_start.format("%Y-%m-%d %H:%M"),
        end = s.period_end.format("%Y-%m-%d %H:%M"),
        subtotal = money(s.subtotal_micros),
        discount = money(s.discount_micros),
        credits = money(s.credits_micros),
        total = money(s.total_micros),
    )
}
