//! The organization's webhook endpoints (admins and owners): register,
//! change, rotate the secret, send a test event, read the delivery log and
//! send a delivery again.

use axum::Json;
use axum::extract::{RawPathParams, State};
use axum::http::StatusCode;
use chrono::{DateTime, TimeDelta, Utc};
use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, QueryOrder, Set};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::delivery::{self, PENDING};
use super::events::{self, TEST, TYPES};
use super::signing;
use gantry_access::tenancy::access::{OrgAccess, OrgScope, need};
use gantry_core::audit::{self, Change};
use gantry_core::error::{ApiError, ApiResult, ProblemResponses, Resource};
use gantry_core::http::extract::{ApiJson, ApiQuery, path_uuid};
use gantry_core::http::pagination::{Page, PageQuery};
use gantry_core::state::AppState;
use gantry_core::validate::Fields;
use gantry_entities::{webhook_attempt, webhook_delivery, webhook_endpoint};

const DESCRIPTION_MAX: usize = 500;
/// Endpoints one organization may have.
const ENDPOINTS_MAX: usize = 20;
/// The longest a rotated secret may keep signing beside its successor.
const OVERLAP_MAX_SECONDS: i64 = 7 * 24 * 3600;
const OVERLAP_DEFAULT_SECONDS: i64 = 24 * 3600;

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewWebhookEndpoint {
    /// `https://…`; resolved addresses must be public.
    #[schema(max_length = 2048)]
    pub url: String,
    #[serde(default)]
    #[schema(max_length = 500)]
    pub description: String,
    /// Event types to send; empty or absent for all of them.
    #[serde(default)]
    pub event_types: Vec<String>,
    #[serde(default = "on")]
    pub enabled: bool,
}

fn on() -> bool {
    true
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookEndpointChange {
    #[schema(max_length = 2048)]
    pub url: Option<String>,
    #[schema(max_length = 500)]
    pub description: Option<String>,
    pub event_types: Option<Vec<String>>,
    /// Turning an endpoint on clears why the platform turned it off.
    pub enabled: Option<bool>,
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SecretRotation {
    /// How long the old secret keeps signing beside the new one (0 to 7
    /// days; one day when absent).
    #[schema(minimum = 0, maximum = 604_800)]
    pub overlap_seconds: Option<i64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookEndpoint {
    pub id: Uuid,
    pub url: String,
    pub description: String,
    /// Event types sent; empty for all.
    pub event_types: Vec<String>,
    pub enabled: bool,
    /// Why the platform turned it off, when it did.
    pub disabled_reason: Option<String>,
    /// Since when every delivery has failed.
    pub failing_since: Option<DateTime<Utc>>,
    /// Until when the secret before the last rotation also signs.
    pub previous_secret_until: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

/// An endpoint with its signing secret, shown when it is created or its
/// secret rotated, and never again.
#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookEndpointWithSecret {
    #[serde(flatten)]
    pub endpoint: WebhookEndpoint,
    /// `whsec_…`: verify `webhook-signature` with it.
    pub secret: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct DeliveryAttempt {
    pub attempted_at: DateTime<Utc>,
    /// The receiver's HTTP status; absent when none came.
    pub status_code: Option<i32>,
    pub latency_ms: i32,
    /// The start of the receiver's answer.
    pub response_excerpt: Option<String>,
    /// Why no answer came.
    pub error: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct WebhookDelivery {
    pub id: Uuid,
    /// `webhook-id`, the same on every attempt.
    pub message_id: String,
    pub event_type: String,
    /// The body sent: `{type, timestamp, data}`.
    pub payload: serde_json::Value,
    /// pending, succeeded or failed.
    pub status: String,
    pub attempts: i32,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    /// Its attempts, oldest first.
    pub attempt_log: Vec<DeliveryAttempt>,
}

impl From<webhook_endpoint::Model> for WebhookEndpoint {
    fn from(row: webhook_endpoint::Model) -> Self {
        Self {
            id: row.id,
            url: row.url,
            description: row.description,
            event_types: serde_json::from_str(&row.event_types).unwrap_or_default(),
            enabled: row.enabled,
            disabled_reason: row.disabled_reason,
            failing_since: row.failing_since,
            previous_secret_until: row.previous_secret_until,
            created_at: row.created_at,
        }
    }
}

impl From<webhook_attempt::Model> for DeliveryAttempt {
    fn from(row: webhook_attempt::Model) -> Self {
        Self {
            attempted_at: row.attempted_at,
            status_code: row.status_code,
            latency_ms: row.latency_ms,
            response_excerpt: row.response_excerpt,
            error: row.error,
        }
    }
}

fn delivery_view(
    row: webhook_delivery::Model,
    attempts: Vec<webhook_attempt::Model>,
) -> WebhookDelivery {
    WebhookDelivery {
        id: row.id,
        message_id: row.message_id,
        event_type: row.event_type,
        payload: serde_json::from_str(&row.payload).unwrap_or(serde_json::Value::Null),
        status: row.status,
        attempts: row.attempts,
        next_attempt_at: row.next_attempt_at,
        created_at: row.created_at,
        attempt_log: attempts.into_iter().map(DeliveryAttempt::from).collect(),
    }
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_event_types))
        .routes(routes!(list_endpoints, create_endpoint))
        .routes(routes!(get_endpoint, change_endpoint, delete_endpoint))
        .routes(routes!(rotate_secret))
        .routes(routes!(send_test))
        .routes(routes!(list_deliveries))
        .routes(routes!(redeliver))
}

fn check_types(fields: &mut Fields, types: &[String]) -> String {
    if types.len() > TYPES.len() {
        fields.push(
            "event_types",
            format!("must list at most {} types", TYPES.len()),
        );
    }
    if let Some(unknown) = types.iter().find(|t| !TYPES.contains(&t.as_str())) {
        fields.push(
            "event_types",
            format!(
                "{unknown:?} is not an event type; known: {}",
                TYPES.join(", ")
            ),
        );
    }
    let mut unique: Vec<&String> = types.iter().collect();
    unique.sort();
    unique.dedup();
    serde_json::to_string(&unique).unwrap_or_else(|_| "[]".into())
}

fn check_url(state: &AppState, fields: &mut Fields, url: &str) -> String {
    if let Err(refused) = state.webhook_targets.check(url.trim()) {
        fields.push("url", refused.to_string());
    }
    url.trim().to_owned()
}

async fn find_endpoint(
    state: &AppState,
    scope: &OrgScope,
    params: &RawPathParams,
) -> ApiResult<webhook_endpoint::Model> {
    let id = path_uuid(params, "endpoint_id", Resource::WebhookEndpoint)?;
    scope
        .select::<webhook_endpoint::Entity>()
        .filter(webhook_endpoint::Column::Id.eq(id))
        .one(&state.db)
        .await?
        .ok_or_else(|| ApiError::not_found(Resource::WebhookEndpoint, id))
}

/// Audits a change to one of the organization's endpoints.
async fn record(
    txn: &impl sea_orm::ConnectionTrait,
    access: &OrgAccess<need::Admin>,
    org_id: Uuid,
    endpoint_id: Uuid,
    action: &'static str,
    details: serde_json::Value,
) -> Result<(), sea_orm::DbErr> {
    audit::record(
        txn,
        Change {
            org_id: Some(org_id),
            action,
            target_type: "webhook_endpoint",
            target_id: Some(endpoint_id.to_string()),
            details,
            actor: &access.actor,
        },
    )
    .await
}

/// Refuses to send to an endpoint that is turned off.
fn sendable(endpoint: &webhook_endpoint::Model) -> ApiResult<()> {
    if endpoint.enabled {
        Ok(())
    } else {
        Err(ApiError::conflict(
            "endpoint_disabled",
            "the endpoint is turned off; turn it on to send to it",
        ))
    }
}

/// Every event type an endpoint may subscribe to.
#[utoipa::path(
    get,
    path = "/webhooks/event-types",
    tag = "webhooks",
    responses((status = 200, description = "Event types", body = Vec<String>), ProblemResponses),
    security(("bearer" = []))
)]
async fn list_event_types(
    _caller: gantry_core::auth::principal::Authenticated,
) -> Json<Vec<&'static str>> {
    Json(TYPES.to_vec())
}

/// The organization's endpoints.
#[utoipa::path(
    get,
    path = "/orgs/{org_id}/webhooks",
    tag = "webhooks",
    params(("org_id" = Uuid, Path, description = "Organization id")),
    responses((status = 200, description = "Endpoints, oldest first", body = Vec<WebhookEndpoint>), ProblemResponses),
    security(("bearer" = []))
)]
async fn list_endpoints(
    State(state): State<AppState>,
    access: OrgAccess<need::Admin>,
) -> ApiResult<Json<Vec<WebhookEndpoint>>> {
    let rows = access
        .scope
        .select::<webhook_endpoint::Entity>()
        .order_by_asc(webhook_endpoint::Column::Id)
        .all(&state.db)
        .await?;
    Ok(Json(rows.into_iter().map(WebhookEndpoint::from).collect()))
}

/// Registers an endpoint; its signing secret is in this answer only.
#[utoipa::path(
    post,
    path = "/orgs/{org_id}/webhooks",
    tag = "webhooks",
    params(("org_id" = Uuid, Path, description = "Organization id")),
    request_body = NewWebhookEndpoint,
    responses((status = 201, description = "The endpoint and its secret", body = WebhookEndpointWithSecret), ProblemResponses),
    security(("bearer" = []))
)]
async fn create_endpoint(
    State(state): State<AppState>,
    access: OrgAccess<need::Admin>,
    ApiJson(request): ApiJson<NewWebhookEndpoint>,
) -> ApiResult<(StatusCode, Json<WebhookEndpointWithSecret>)> {
    let mut fields = Fields::default();
    let url = check_url(&state, &mut fields, &request.url);
    let description = fields.text("description", &request.description, DESCRIPTION_MAX);
    let event_types = check_types(&mut fields, &request.event_types);
    fields.finish()?;
    let scope = &access.scope;
    let now = state.clock.now();
    let txn = gantry_core::db::write(&state.db).await?;
    gantry_access::tenancy::orgs::lock(&txn, scope.org_id).await?;
    let existing = scope.select::<webhook_endpoint::Entity>().all(&txn).await?;
    if existing.len() >= ENDPOINTS_MAX {
        return Err(ApiError::conflict(
            "too_many_endpoints",
            format!("an organization may have at most {ENDPOINTS_MAX} webhook endpoints"),
        ));
    }
    let secret = signing::generate();
    let row = webhook_endpoint::ActiveModel {
        id: Set(Uuid::now_v7()),
        org_id: Set(scope.org_id),
        url: Set(url.clone()),
        description: Set(description),
        event_types: Set(event_types),
        enabled: Set(request.enabled),
        secret: Set(secret.clone()),
        previous_secret: Set(None),
        previous_secret_until: Set(None),
        failing_since: Set(None),
        disabled_reason: Set(None),
        created_at: Set(now),
        updated_at: Set(now),
    }
    .insert(&txn)
    .await?;
    record(
        &txn,
        &access,
        scope.org_id,
        row.id,
        "webhook.create",
        serde_json::json!({ "url": url, "event_types": request.event_types }),
    )
    .await?;
    txn.commit().await?;
    Ok((
        StatusCode::CREATED,
        Json(WebhookEndpointWithSecret {
            endpoint: row.into(),
            secret,
        }),
    ))
}

/// One endpoint.
#[utoipa::path(
    get,
    path = "/orgs/{org_id}/webhooks/{endpoint_id}",
    tag = "webhooks",
    params(
        ("org_id" = Uuid, Path, description = "Organization id"),
        ("endpoint_id" = Uuid, Path, description = "Endpoint id"),
    ),
    responses((status = 200, description = "The endpoint", body = WebhookEndpoint), ProblemResponses),
    security(("bearer" = []))
)]
async fn get_endpoint(
    State(state): State<AppState>,
    access: OrgAccess<need::Admin>,
    params: RawPathParams,
) -> ApiResult<Json<WebhookEndpoint>> {
    Ok(Json(
        find_endpoint(&state, &access.scope, &params).await?.into(),
    ))
}

/// Changes an endpoint's URL, description, event types or whether it is
/// on.
#[utoipa::path(
    patch,
    path = "/orgs/{org_id}/webhooks/{endpoint_id}",
    tag = "webhooks",
    params(
        ("org_id" = Uuid, Path, description = "Organization id"),
        ("endpoint_id" = Uuid, Path, description = "Endpoint id"),
    ),
    request_body = WebhookEndpointChange,
    responses((status = 200, description = "The endpoint", body = WebhookEndpoint), ProblemResponses),
    security(("bearer" = []))
)]
async fn change_endpoint(
    State(state): State<AppState>,
    access: OrgAccess<need::Admin>,
    params: RawPathParams,
    ApiJson(request): ApiJson<WebhookEndpointChange>,
) -> ApiResult<Json<WebhookEndpoint>> {
    let current = find_endpoint(&state, &access.scope, &params).await?;
    let mut fields = Fields::default();
    let url = request
        .url
        .as_deref()
        .map(|u| check_url(&state, &mut fields, u));
    let description = request
        .description
        .as_deref()
        .map(|d| fields.text("description", d, DESCRIPTION_MAX));
    let event_types = request
        .event_types
        .as_deref()
        .map(|t| check_types(&mut fields, t));
    fields.finish()?;
    let (id, org_id) = (current.id, current.org_id);
    let mut row: webhook_endpoint::ActiveModel = current.into();
    if let Some(url) = url {
        row.url = Set(url);
    }
    if let Some(description) = description {
        row.description = Set(description);
    }
    if let Some(event_types) = event_types {
        row.event_types = Set(event_types);
    }
    if let Some(enabled) = request.enabled {
        row.enabled = Set(enabled);
        if enabled {
            row.disabled_reason = Set(None);
            row.failing_since = Set(None);
        }
    }
    row.updated_at = Set(state.clock.now());
    let txn = gantry_core::db::write(&state.db).await?;
    let row = row.update(&txn).await?;
    record(
        &txn,
        &access,
        org_id,
        id,
        "webhook.update",
        serde_json::json!({
            "url": request.url, "event_types": request.event_types, "enabled": request.enabled,
        }),
    )
    .await?;
    txn.commit().await?;
    Ok(Json(row.into()))
}

/// Removes an endpoint and its delivery log.
#[utoipa::path(
    delete,
    path = "/orgs/{org_id}/webhooks/{endpoint_id}",
    tag = "webhooks",
    params(
        ("org_id" = Uuid, Path, description = "Organization id"),
        ("endpoint_id" = Uuid, Path, description = "Endpoint id"),
    ),
    responses((status = 204, description = "Removed"), ProblemResponses),
    security(("bearer" = []))
)]
async fn delete_endpoint(
    State(state): State<AppState>,
    access: OrgAccess<need::Admin>,
    params: RawPathParams,
) -> ApiResult<StatusCode> {
    let current = find_endpoint(&state, &access.scope, &params).await?;
    let txn = gantry_core::db::write(&state.db).await?;
    webhook_endpoint::Entity::delete_by_id(current.id)
        .exec(&txn)
        .await?;
    record(
        &txn,
        &access,
        current.org_id,
        current.id,
        "webhook.delete",
        serde_json::json!({ "url": current.url }),
    )
    .await?;
    txn.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A new signing secret; the old one keeps signing beside it for the
/// overlap, so receivers can switch without losing events.
#[utoipa::path(
    post,
    path = "/orgs/{org_id}/webhooks/{endpoint_id}/rotate-secret",
    tag = "webhooks",
    params(
        ("org_id" = Uuid, Path, description = "Organization id"),
        ("endpoint_id" = Uuid, Path, description = "Endpoint id"),
    ),
    request_body = SecretRotation,
    responses((status = 200, description = "The endpoint and its new secret", body = WebhookEndpointWithSecret), ProblemResponses),
    security(("bearer" = []))
)]
async fn rotate_secret(
    State(state): State<AppState>,
    access: OrgAccess<need::Admin>,
    params: RawPathParams,
    ApiJson(request): ApiJson<SecretRotation>,
) -> ApiResult<Json<WebhookEndpointWithSecret>> {
    let overlap = request.overlap_seconds.unwrap_or(OVERLAP_DEFAULT_SECONDS);
    let mut fields = Fields::default();
    fields.range("overlap_seconds", overlap, 0, OVERLAP_MAX_SECONDS);
    fields.finish()?;
    let current = find_endpoint(&state, &access.scope, &params).await?;
    let now = state.clock.now();
    let secret = signing::generate();
    let (id, org_id) = (current.id, current.org_id);
    let previous = current.secret.clone();
    let mut row: webhook_endpoint::ActiveModel = current.into();
    row.secret = Set(secret.clone());
    row.previous_secret = Set((overlap > 0).then_some(previous));
    row.previous_secret_until = Set((overlap > 0).then(|| now + TimeDelta::seconds(overlap)));
    row.updated_at = Set(now);
    let txn = gantry_core::db::write(&state.db).await?;
    let row = row.update(&txn).await?;
    record(
        &txn,
        &access,
        org_id,
        id,
        "webhook.rotate_secret",
        serde_json::json!({ "overlap_seconds": overlap }),
    )
    .await?;
    txn.commit().await?;
    Ok(Json(WebhookEndpointWithSecret {
        endpoint: row.into(),
        secret,
    }))
}

/// Sends a `webhook.test` event to this endpoint now, whatever its event
/// types.
#[utoipa::path(
    post,
    path = "/orgs/{org_id}/webhooks/{endpoint_id}/test",
    tag = "webhooks",
    params(
        ("org_id" = Uuid, Path, description = "Organization id"),
        ("endpoint_id" = Uuid, Path, description = "Endpoint id"),
    ),
    responses((status = 202, description = "The delivery, sent within a second", body = WebhookDelivery), ProblemResponses),
    security(("bearer" = []))
)]
async fn send_test(
    State(state): State<AppState>,
    access: OrgAccess<need::Admin>,
    params: RawPathParams,
) -> ApiResult<(StatusCode, Json<WebhookDelivery>)> {
    let endpoint = find_endpoint(&state, &access.scope, &params).await?;
    sendable(&endpoint)?;
    let now = state.clock.now();
    let payload = delivery::envelope(
        TEST,
        &events::timestamp(now),
        &serde_json::json!({ "endpoint_id": endpoint.id, "org_id": endpoint.org_id }),
    );
    let message_id = format!("msg_test_{}", Uuid::now_v7().simple());
    let row = delivery::delivery(&endpoint, None, message_id, TEST, payload, now)
        .insert(&state.db)
        .await?;
    Ok((StatusCode::ACCEPTED, Json(delivery_view(row, Vec::new()))))
}

/// The endpoint's deliveries, newest first, with their attempts.
#[utoipa::path(
    get,
    path = "/orgs/{org_id}/webhooks/{endpoint_id}/deliveries",
    tag = "webhooks",
    params(
        ("org_id" = Uuid, Path, description = "Organization id"),
        ("endpoint_id" = Uuid, Path, description = "Endpoint id"),
        PageQuery,
    ),
    responses((status = 200, description = "A page of deliveries", body = Page<WebhookDelivery>), ProblemResponses),
    security(("bearer" = []))
)]
async fn list_deliveries(
    State(state): State<AppState>,
    access: OrgAccess<need::Admin>,
    params: RawPathParams,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Json<Page<WebhookDelivery>>> {
    let request = query.validate()?;
    let endpoint = find_endpoint(&state, &access.scope, &params).await?;
    let rows = request
        .descending(
            access
                .scope
                .select::<webhook_delivery::Entity>()
                .filter(webhook_delivery::Column::EndpointId.eq(endpoint.id)),
            webhook_delivery::Column::Id,
        )
        .all(&state.db)
        .await?;
    let mut attempts: std::collections::HashMap<Uuid, Vec<webhook_attempt::Model>> =
        std::collections::HashMap::new();
    for attempt in webhook_attempt::Entity::find()
        .filter(webhook_attempt::Column::DeliveryId.is_in(rows.iter().map(|r| r.id)))
        .order_by_asc(webhook_attempt::Column::Id)
        .all(&state.db)
        .await?
    {
        attempts
            .entry(attempt.delivery_id)
            .or_default()
            .push(attempt);
    }
    Ok(Json(Page::from_rows(
        rows,
        request,
        |r| r.id,
        |r| {
            let log = attempts.remove(&r.id).unwrap_or_default();
            delivery_view(r, log)
        },
    )))
}

/// Sends a delivery again now, with its `webhook-id` and body unchanged.
#[utoipa::path(
    post,
    path = "/orgs/{org_id}/webhooks/{endpoint_id}/deliveries/{delivery_id}/redeliver",
    tag = "webhooks",
    params(
        ("org_id" = Uuid, Path, description = "Organization id"),
        ("endpoint_id" = Uuid, Path, description = "Endpoint id"),
        ("delivery_id" = Uuid, Path, description = "Delivery id"),
    ),
    responses((status = 202, description = "Queued to be sent within a second"), ProblemResponses),
    security(("bearer" = []))
)]
async fn redeliver(
    State(state): State<AppState>,
    access: OrgAccess<need::Admin>,
    params: RawPathParams,
) -> ApiResult<StatusCode> {
    let endpoint = find_endpoint(&state, &access.scope, &params).await?;
    let id = path_uuid(&params, "delivery_id", Resource::WebhookDelivery)?;
    let current = access
        .scope
        .select::<webhook_delivery::Entity>()
        .filter(webhook_delivery::Column::EndpointId.eq(endpoint.id))
        .filter(webhook_delivery::Column::Id.eq(id))
        .one(&state.db)
        .await?
        .ok_or_else(|| ApiError::not_found(Resource::WebhookDelivery, id))?;
    sendable(&endpoint)?;
    let now = state.clock.now();
    let mut row: webhook_delivery::ActiveModel = current.into();
    row.status = Set(PENDING.to_owned());
    row.next_attempt_at = Set(Some(now));
    row.updated_at = Set(now);
    row.update(&state.db).await?;
    Ok(StatusCode::ACCEPTED)
}
