//! Prices: versions per instance type, pricing class and (optionally)
//! region. A change is a new version from a time on; none is edited, so
//! usage is always rated at the price that was in force.

use std::collections::HashMap;

use axum::Json;
use axum::extract::{RawPathParams, State};
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder, Set,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use gantry_core::audit;
use gantry_core::auth::principal::{Actor, Authenticated, Operator};
use gantry_core::error::{ApiError, ApiResult, ProblemResponses, Resource};
use gantry_core::http::extract::{ApiJson, path_uuid};
use gantry_core::state::AppState;
use gantry_core::validate::Fields;
use gantry_entities::{instance_type, price};
use gantry_types::classes::PricingClass;

/// A ceiling that keeps every product of price and seconds inside `i64`.
const HOURLY_MICROS_MAX: i64 = 1_000_000_000_000;

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Price {
    pub id: Uuid,
    pub instance_type_id: Uuid,
    /// The region this price is for; `null` for every region without its own.
    pub region: Option<String>,
    pub pricing_class: PricingClass,
    /// Micro-units of the currency per instance-hour.
    pub hourly_micros: i64,
    pub effective_from: DateTime<Utc>,
}

impl Price {
    fn new(row: price::Model, regions: &HashMap<Uuid, String>) -> Self {
        Self {
            id: row.id,
            instance_type_id: row.instance_type_id,
            region: row.region_id.and_then(|id| regions.get(&id).cloned()),
            pricing_class: row.pricing_class,
            hourly_micros: row.hourly_micros,
            effective_from: row.effective_from,
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreatePrice {
    pub pricing_class: PricingClass,
    /// A region name or id; absent for the price everywhere else.
    #[schema(min_length = 1, max_length = 64)]
    pub region: Option<String>,
    #[schema(minimum = 0, maximum = 1_000_000_000_000_i64)]
    pub hourly_micros: i64,
    /// When the price takes effect; now when absent. Never in the past, so
    /// usage already recorded keeps its price.
    pub effective_from: Option<DateTime<Utc>>,
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_prices))
        .routes(routes!(create_price))
        .routes(routes!(withdraw_price))
}

/// The prices in force at `at` for each instance type: per pricing class
/// and region, the latest version that has taken effect.
pub async fn current(
    db: &impl ConnectionTrait,
    types: &[Uuid],
    at: DateTime<Utc>,
) -> ApiResult<HashMap<Uuid, Vec<Price>>> {
    let regions = super::region_names(db).await?;
    let rows = price::Entity::find()
        .filter(price::Column::InstanceTypeId.is_in(types.iter().copied()))
        .filter(price::Column::EffectiveFrom.lte(at))
        .order_by_desc(price::Column::EffectiveFrom)
        .order_by_desc(price::Column::Id)
        .all(db)
        .await?;
    let mut seen = std::collections::HashSet::new();
    let mut prices: HashMap<Uuid, Vec<Price>> = HashMap::new();
    for row in rows {
        if seen.insert((row.instance_type_id, row.pricing_class, row.region_id)) {
            prices
                .entry(row.instance_type_id)
                .or_default()
                .push(Price::new(row, &regions));
        }
    }
    for list in prices.values_mut() {
        list.sort_by(|a, b| {
            (a.pricing_class.as_str(), &a.region).cmp(&(b.pricing_class.as_str(), &b.region))
        });
    }
    Ok(prices)
}

pub(super) async fn find_type(
    db: &impl ConnectionTrait,
    params: &RawPathParams,
) -> ApiResult<instance_type::Model> {
    let id = path_uuid(params, "instance_type_id", Resource::InstanceType)?;
    instance_type::Entity::find_by_id(id)
        .one(db)
        .await?
        .ok_or_else(|| ApiError::not_found(Resource::InstanceType, id))
}

/// When a new price version takes effect: now when not given, and never in
/// the past (`kept` says what keeps the price it had), with a minute of
/// slack for clocks that differ between client and server.
pub(crate) fn effective_from(
    fields: &mut Fields,
    asked: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
    kept: &str,
) -> DateTime<Utc> {
    let at = asked.unwrap_or(now);
    if at < now - chrono::Duration::minutes(1) {
        fields.push("effective_from", format!("must not be in the past: {kept}"));
    }
    at.max(now)
}

/// Every price version of an instance type, newest first, including those
/// not yet in effect.
#[utoipa::path(
    get,
    path = "/catalog/instance-types/{instance_type_id}/prices",
    tag = "catalog",
    params(("instance_type_id" = Uuid, Path, description = "Instance type id")),
    responses((status = 200, description = "The price history", body = Vec<Price>), ProblemResponses),
    security(("bearer" = []))
)]
async fn list_prices(
    State(state): State<AppState>,
    _caller: Authenticated,
    params: RawPathParams,
) -> ApiResult<Json<Vec<Price>>> {
    let instance = find_type(&state.db, &params).await?;
    let regions = super::region_names(&state.db).await?;
    let rows = price::Entity::find()
        .filter(price::Column::InstanceTypeId.eq(instance.id))
        .order_by_desc(price::Column::EffectiveFrom)
        .order_by_desc(price::Column::Id)
        .all(&state.db)
        .await?;
    Ok(Json(
        rows.into_iter()
            .map(|row| Price::new(row, &regions))
            .collect(),
    ))
}

/// Sets a price from a time on, as a new version.
#[utoipa::path(
    post,
    path = "/admin/catalog/instance-types/{instance_type_id}/prices",
    tag = "admin",
    params(
        ("instance_type_id" = Uuid, Path, description = "Instance type id"),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes a retry return the first response", max_length = 255, pattern = "^[\\x21-\\x7e]{1,255}$"),
    ),
    request_body = CreatePrice,
    responses((status = 201, description = "The new price version", body = Price), ProblemResponses),
    security(("bearer" = []))
)]
async fn create_price(
    State(state): State<AppState>,
    _operator: Operator,
    actor: Actor,
    params: RawPathParams,
    ApiJson(request): ApiJson<CreatePrice>,
) -> ApiResult<(StatusCode, Json<Price>)> {
    let now = state.clock.now();
    let mut fields = Fields::default();
    fields.range("hourly_micros", request.hourly_micros, 0, HOURLY_MICROS_MAX);
    let effective_from = effective_from(
        &mut fields,
        request.effective_from,
        now,
        "recorded usage keeps the price it had",
    );
    fields.finish()?;
    let txn = gantry_core::db::write(&state.db).await?;
    let instance = find_type(&txn, &params).await?;
    let region = match &request.region {
        Some(reference) => Some(super::region_in_body(&txn, reference).await?),
        None => None,
    };
    let row = price::ActiveModel {
        id: Set(Uuid::now_v7()),
        instance_type_id: Set(instance.id),
        region_id: Set(region.as_ref().map(|r| r.id)),
        pricing_class: Set(request.pricing_class),
        hourly_micros: Set(request.hourly_micros),
        effective_from: Set(effective_from),
        created_at: Set(now),
    }
    .insert(&txn)
    .await?;
    audit::platform(
        &txn,
        &actor,
        "price.create",
        "instance_type",
        instance.id,
        serde_json::json!({
            "instance_type": instance.name,
            "pricing_class": row.pricing_class,
            "region": region.as_ref().map(|r| &r.name),
            "hourly_micros": row.hourly_micros,
            "effective_from": row.effective_from,
        }),
    )
    .await?;
    txn.commit().await?;
    let names = region
        .map(|r| (r.id, r.name))
        .into_iter()
        .collect::<HashMap<_, _>>();
    Ok((StatusCode::CREATED, Json(Price::new(row, &names))))
}

/// Withdraws a price version that has not taken effect yet; one in force
/// stays, since usage was rated at it (a new version replaces it).
#[utoipa::path(
    delete,
    path = "/admin/catalog/instance-types/{instance_type_id}/prices/{price_id}",
    tag = "admin",
    params(
        ("instance_type_id" = Uuid, Path, description = "Instance type id"),
        ("price_id" = Uuid, Path, description = "Price version id"),
    ),
    responses((status = 204, description = "Withdrawn"), ProblemResponses),
    security(("bearer" = []))
)]
async fn withdraw_price(
    State(state): State<AppState>,
    _operator: Operator,
    actor: Actor,
    params: RawPathParams,
) -> ApiResult<StatusCode> {
    let now = state.clock.now();
    let id = path_uuid(&params, "price_id", Resource::Price)?;
    let txn = gantry_core::db::write(&state.db).await?;
    let instance = find_type(&txn, &params).await?;
    let row = price::Entity::find_by_id(id)
        .filter(price::Column::InstanceTypeId.eq(instance.id))
        .one(&txn)
        .await?
        .ok_or_else(|| ApiError::not_found(Resource::Price, id))?;
    if row.effective_from <= now {
        return Err(ApiError::conflict(
            "price_in_force",
            format!(
                "this price took effect at {} and usage may have been rated at it; \
                 add a new version to change it",
                row.effective_from.to_rfc3339()
            ),
        ));
    }
    price::Entity::delete_by_id(row.id).exec(&txn).await?;
    audit::platform(
        &txn,
        &actor,
        "price.withdraw",
        "instance_type",
        instance.id,
        serde_json::json!({
            "instance_type": instance.name,
            "pricing_class": row.pricing_class,
            "hourly_micros": row.hourly_micros,
            "effective_from": row.effective_from,
        }),
    )
    .await?;
    txn.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}
