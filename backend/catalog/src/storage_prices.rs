//! Storage prices: versions per kind of volume and (optionally) region,
//! per GiB-month of 730 hours. A change is a new version from a time on;
//! none is edited, so storage is always rated at the price in force.

use std::collections::HashMap;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use sea_orm::{ActiveModelTrait, EntityTrait, QueryOrder, Set};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use gantry_core::audit;
use gantry_core::auth::principal::{Actor, Authenticated, Operator};
use gantry_core::error::{ApiResult, ProblemResponses};
use gantry_core::http::extract::ApiJson;
use gantry_core::state::AppState;
use gantry_core::validate::Fields;
use gantry_entities::storage_price;
use gantry_types::classes::VolumeKind;

/// A ceiling far above any real price.
const GIB_MONTH_MICROS_MAX: i64 = 1_000_000_000_000;

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct StoragePrice {
    pub id: Uuid,
    /// The region this price is for; `null` for every region without its own.
    pub region: Option<String>,
    pub kind: VolumeKind,
    /// Micro-units of the currency per GiB-month (730 hours) provisioned.
    pub gib_month_micros: i64,
    pub effective_from: DateTime<Utc>,
}

impl StoragePrice {
    fn new(row: storage_price::Model, regions: &HashMap<Uuid, String>) -> Self {
        Self {
            id: row.id,
            region: row.region_id.and_then(|id| regions.get(&id).cloned()),
            kind: row.kind,
            gib_month_micros: row.gib_month_micros,
            effective_from: row.effective_from,
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateStoragePrice {
    pub kind: VolumeKind,
    /// A region name or id; absent for the price everywhere else.
    #[schema(min_length = 1, max_length = 64)]
    pub region: Option<String>,
    #[schema(minimum = 0, maximum = 1_000_000_000_000_i64)]
    pub gib_month_micros: i64,
    /// When the price takes effect; now when absent. Never in the past, so
    /// storage already held keeps its price.
    pub effective_from: Option<DateTime<Utc>>,
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_storage_prices))
        .routes(routes!(create_storage_price))
}

/// Every storage price version, newest first, including those not yet in
/// effect.
#[utoipa::path(
    get,
    path = "/catalog/storage-prices",
    tag = "catalog",
    responses((status = 200, description = "The storage price history", body = Vec<StoragePrice>), ProblemResponses),
    security(("bearer" = []))
)]
async fn list_storage_prices(
    State(state): State<AppState>,
    _caller: Authenticated,
) -> ApiResult<Json<Vec<StoragePrice>>> {
    let regions = super::region_names(&state.db).await?;
    let rows = storage_price::Entity::find()
        .order_by_desc(storage_price::Column::EffectiveFrom)
        .order_by_desc(storage_price::Column::Id)
        .all(&state.db)
        .await?;
    Ok(Json(
        rows.into_iter()
            .map(|row| StoragePrice::new(row, &regions))
            .collect(),
    ))
}

/// Sets a storage price from a time on, as a new version.
#[utoipa::path(
    post,
    path = "/admin/catalog/storage-prices",
    tag = "admin",
    params(
        ("Idempotency-Key" = Option<String>, Header, description = "Makes a retry return the first response", max_length = 255, pattern = "^[\\x21-\\x7e]{1,255}$"),
    ),
    request_body = CreateStoragePrice,
    responses((status = 201, description = "The new storage price version", body = StoragePrice), ProblemResponses),
    security(("bearer" = []))
)]
async fn create_storage_price(
    State(state): State<AppState>,
    _operator: Operator,
    actor: Actor,
    ApiJson(request): ApiJson<CreateStoragePrice>,
) -> ApiResult<(StatusCode, Json<StoragePrice>)> {
    let now = state.clock.now();
    let mut fields = Fields::default();
    fields.range(
        "gib_month_micros",
        request.gib_month_micros,
        0,
        GIB_MONTH_MICROS_MAX,
    );
    let effective_from = super::prices::effective_from(
        &mut fields,
        request.effective_from,
        now,
        "storage already held keeps the price it had",
    );
    fields.finish()?;
    let txn = gantry_core::db::write(&state.db).await?;
    let region = match &request.region {
        Some(reference) => Some(super::region_in_body(&txn, reference).await?),
        None => None,
    };
    let row = storage_price::ActiveModel {
        id: Set(Uuid::now_v7()),
        region_id: Set(region.as_ref().map(|r| r.id)),
        kind: Set(request.kind),
        gib_month_micros: Set(request.gib_month_micros),
        effective_from: Set(effective_from),
        created_at: Set(now),
    }
    .insert(&txn)
    .await?;
    audit::platform(
        &txn,
        &actor,
        "storage_price.create",
        "storage_price",
        row.id,
        serde_json::json!({
            "kind": row.kind,
            "region": region.as_ref().map(|r| &r.name),
            "gib_month_micros": row.gib_month_micros,
            "effective_from": row.effective_from,
        }),
    )
    .await?;
    txn.commit().await?;
    let names = region
        .map(|r| (r.id, r.name))
        .into_iter()
        .collect::<HashMap<_, _>>();
    Ok((StatusCode::CREATED, Json(StoragePrice::new(row, &names))))
}
