//! Regions: where capacity lives, with its time zone, compliance tags and an
//! optional off-peak window priced lower in local time.

use axum::Json;
use axum::extract::{RawPathParams, State};
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter, Set};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::{in_use, name_taken};
use gantry_core::audit;
use gantry_core::auth::principal::{Actor, Authenticated, Operator};
use gantry_core::error::{ApiError, ApiResult, ProblemResponses, Resource};
use gantry_core::http::extract::{ApiJson, ApiQuery, path_uuid};
use gantry_core::http::pagination::{Page, PageQuery};
use gantry_core::state::AppState;
use gantry_core::validate::Fields;
use gantry_entities::{node, region};

const DISPLAY_NAME_MAX: usize = 200;
const TAGS_MAX: usize = 16;

/// A lower price in a window of local hours.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OffPeak {
    /// The local hour the window opens, 0 to 23.
    #[schema(minimum = 0, maximum = 23)]
    pub start_hour: i16,
    /// The local hour the window closes, 0 to 23; before `start_hour` when
    /// the window spans midnight.
    #[schema(minimum = 0, maximum = 23)]
    pub end_hour: i16,
    /// The price in the window, in thousandths of the normal price
    /// (600 = 60%).
    #[schema(minimum = 1, maximum = 1000)]
    pub multiplier_permille: i32,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Region {
    pub id: Uuid,
    pub name: String,
    pub display_name: String,
    /// An IANA time zone, such as `Europe/Frankfurt`.
    pub time_zone: String,
    pub compliance_tags: Vec<String>,
    pub off_peak: Option<OffPeak>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<region::Model> for Region {
    fn from(row: region::Model) -> Self {
        let off_peak = match (
            row.off_peak_start_hour,
            row.off_peak_end_hour,
            row.off_peak_multiplier_permille,
        ) {
            (Some(start_hour), Some(end_hour), Some(multiplier_permille)) => Some(OffPeak {
                start_hour,
                end_hour,
                multiplier_permille,
            }),
            _ => None,
        };
        Self {
            id: row.id,
            compliance_tags: serde_json::from_str(&row.compliance_tags).unwrap_or_default(),
            name: row.name,
            display_name: row.display_name,
            time_zone: row.time_zone,
            off_peak,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateRegion {
    /// A unique slug, such as `eu-central`.
    #[schema(pattern = "^[a-z0-9][a-z0-9-]{0,62}$")]
    pub name: String,
    #[schema(
        min_length = 1,
        max_length = 200,
        pattern = "^[^\\x00-\\x1f\\x7f-\\x9f]*[^\\s\\x00-\\x1f\\x7f-\\x9f][^\\x00-\\x1f\\x7f-\\x9f]*$"
    )]
    pub display_name: String,
    /// An IANA time zone, such as `Asia/Seoul`.
    #[schema(min_length = 1, max_length = 64)]
    pub time_zone: String,
    /// Slugs such as `eu-gdpr`.
    #[serde(default)]
    #[schema(max_items = 16)]
    pub compliance_tags: Vec<String>,
    pub off_peak: Option<OffPeak>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateRegion {
    #[schema(
        min_length = 1,
        max_length = 200,
        pattern = "^[^\\x00-\\x1f\\x7f-\\x9f]*[^\\s\\x00-\\x1f\\x7f-\\x9f][^\\x00-\\x1f\\x7f-\\x9f]*$"
    )]
    pub display_name: Option<String>,
    #[schema(min_length = 1, max_length = 64)]
    pub time_zone: Option<String>,
    #[schema(max_items = 16)]
    pub compliance_tags: Option<Vec<String>>,
    /// `null` removes the off-peak window; absent leaves it.
    #[serde(default, deserialize_with = "gantry_core::validate::present")]
    pub off_peak: Option<Option<OffPeak>>,
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_regions))
        .routes(routes!(get_region))
        .routes(routes!(create_region))
        .routes(routes!(update_region, delete_region))
}

fn check_time_zone(fields: &mut Fields, value: &str) {
    if value.parse::<chrono_tz::Tz>().is_err() {
        fields.push(
            "time_zone",
            "must be an IANA time zone such as Europe/Berlin",
        );
    }
}

fn check_tags(fields: &mut Fields, tags: &[String]) -> String {
    if tags.len() > TAGS_MAX {
        fields.push("compliance_tags", format!("at most {TAGS_MAX} tags"));
    }
    for (index, tag) in tags.iter().enumerate() {
        fields.slug(&format!("compliance_tags[{index}]"), tag);
    }
    let mut names: Vec<&str> = tags.iter().map(String::as_str).collect();
    names.sort_unstable();
    names.dedup();
    serde_json::to_string(&names).unwrap_or_else(|_| "[]".into())
}

fn check_off_peak(fields: &mut Fields, off_peak: Option<&OffPeak>) {
    if let Some(window) = off_peak {
        fields.range("off_peak.start_hour", window.start_hour, 0, 23);
        fields.range("off_peak.end_hour", window.end_hour, 0, 23);
        fields.range(
            "off_peak.multiplier_permille",
            window.multiplier_permille,
            1,
            1000,
        );
        if window.start_hour == window.end_hour {
            fields.push("off_peak.end_hour", "must differ from start_hour");
        }
    }
}

fn set_off_peak(row: &mut region::ActiveModel, off_peak: Option<OffPeak>) {
    row.off_peak_start_hour = Set(off_peak.map(|w| w.start_hour));
    row.off_peak_end_hour = Set(off_peak.map(|w| w.end_hour));
    row.off_peak_multiplier_permille = Set(off_peak.map(|w| w.multiplier_permille));
}

async fn find(
    db: &impl sea_orm::ConnectionTrait,
    params: &RawPathParams,
) -> ApiResult<region::Model> {
    let id = path_uuid(params, "region_id", Resource::Region)?;
    region::Entity::find_by_id(id)
        .one(db)
        .await?
        .ok_or_else(|| ApiError::not_found(Resource::Region, id))
}

/// Every region.
#[utoipa::path(
    get,
    path = "/catalog/regions",
    tag = "catalog",
    params(PageQuery),
    responses((status = 200, description = "A page of regions", body = Page<Region>), ProblemResponses),
    security(("bearer" = []))
)]
async fn list_regions(
    State(state): State<AppState>,
    _caller: Authenticated,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Json<Page<Region>>> {
    let request = query.validate()?;
    let rows = request
        .ascending(region::Entity::find(), region::Column::Id)
        .all(&state.db)
        .await?;
    Ok(Json(Page::from_rows(rows, request, |r| r.id, Region::from)))
}

/// One region.
#[utoipa::path(
    get,
    path = "/catalog/regions/{region_id}",
    tag = "catalog",
    params(("region_id" = Uuid, Path, description = "Region id")),
    responses((status = 200, description = "The region", body = Region), ProblemResponses),
    security(("bearer" = []))
)]
async fn get_region(
    State(state): State<AppState>,
    _caller: Authenticated,
    params: RawPathParams,
) -> ApiResult<Json<Region>> {
    Ok(Json(find(&state.db, &params).await?.into()))
}

/// Adds a region.
#[utoipa::path(
    post,
    path = "/admin/catalog/regions",
    tag = "admin",
    params(("Idempotency-Key" = Option<String>, Header, description = "Makes a retry return the first response", max_length = 255, pattern = "^[\\x21-\\x7e]{1,255}$")),
    request_body = CreateRegion,
    responses((status = 201, description = "The new region", body = Region), ProblemResponses),
    security(("bearer" = []))
)]
async fn create_region(
    State(state): State<AppState>,
    _operator: Operator,
    actor: Actor,
    ApiJson(request): ApiJson<CreateRegion>,
) -> ApiResult<(StatusCode, Json<Region>)> {
    let mut fields = Fields::default();
    fields.slug("name", &request.name);
    let display_name = fields.name("display_name", &request.display_name, DISPLAY_NAME_MAX);
    check_time_zone(&mut fields, &request.time_zone);
    let tags = check_tags(&mut fields, &request.compliance_tags);
    check_off_peak(&mut fields, request.off_peak.as_ref());
    fields.finish()?;
    let txn = gantry_core::db::write(&state.db).await?;
    if region::Entity::find()
        .filter(region::Column::Name.eq(&request.name))
        .one(&txn)
        .await?
        .is_some()
    {
        return Err(name_taken("region", &request.name));
    }
    let now = Utc::now();
    let mut row = region::ActiveModel {
        id: Set(Uuid::now_v7()),
        name: Set(request.name),
        display_name: Set(display_name),
        time_zone: Set(request.time_zone),
        compliance_tags: Set(tags),
        created_at: Set(now),
        updated_at: Set(now),
        ..Default::default()
    };
    set_off_peak(&mut row, request.off_peak);
    let row = row.insert(&txn).await?;
    audit::platform(
        &txn,
        &actor,
        "region.create",
        "region",
        row.id,
        serde_json::json!({ "name": row.name }),
    )
    .await?;
    txn.commit().await?;
    Ok((StatusCode::CREATED, Json(row.into())))
}

/// Changes a region's display name, time zone, tags or off-peak window.
#[utoipa::path(
    patch,
    path = "/admin/catalog/regions/{region_id}",
    tag = "admin",
    params(("region_id" = Uuid, Path, description = "Region id")),
    request_body = UpdateRegion,
    responses((status = 200, description = "The updated region", body = Region), ProblemResponses),
    security(("bearer" = []))
)]
async fn update_region(
    State(state): State<AppState>,
    _operator: Operator,
    actor: Actor,
    params: RawPathParams,
    ApiJson(request): ApiJson<UpdateRegion>,
) -> ApiResult<Json<Region>> {
    let mut fields = Fields::default();
    let display_name = request
        .display_name
        .as_deref()
        .map(|name| fields.name("display_name", name, DISPLAY_NAME_MAX));
    if let Some(zone) = &request.time_zone {
        check_time_zone(&mut fields, zone);
    }
    let tags = request
        .compliance_tags
        .as_deref()
        .map(|tags| check_tags(&mut fields, tags));
    if let Some(off_peak) = &request.off_peak {
        check_off_peak(&mut fields, off_peak.as_ref());
    }
    fields.finish()?;
    let txn = gantry_core::db::write(&state.db).await?;
    let current = find(&txn, &params).await?;
    let mut row: region::ActiveModel = current.clone().into();
    if let Some(name) = display_name {
        row.display_name = Set(name);
    }
    if let Some(zone) = request.time_zone {
        row.time_zone = Set(zone);
    }
    if let Some(tags) = tags {
        row.compliance_tags = Set(tags);
    }
    if let Some(off_peak) = request.off_peak {
        set_off_peak(&mut row, off_peak);
    }
    row.updated_at = Set(Utc::now());
    let updated = row.update(&txn).await?;
    audit::platform(
        &txn,
        &actor,
        "region.update",
        "region",
        updated.id,
        serde_json::json!({ "name": updated.name }),
    )
    .await?;
    txn.commit().await?;
    Ok(Json(updated.into()))
}

/// Removes a region that no node is in.
#[utoipa::path(
    delete,
    path = "/admin/catalog/regions/{region_id}",
    tag = "admin",
    params(("region_id" = Uuid, Path, description = "Region id")),
    responses((status = 204, description = "Removed"), ProblemResponses),
    security(("bearer" = []))
)]
async fn delete_region(
    State(state): State<AppState>,
    _operator: Operator,
    actor: Actor,
    params: RawPathParams,
) -> ApiResult<StatusCode> {
    let txn = gantry_core::db::write(&state.db).await?;
    let current = find(&txn, &params).await?;
    let nodes = node::Entity::find()
        .filter(node::Column::RegionId.eq(current.id))
        .count(&txn)
        .await?;
    if nodes > 0 {
        return Err(in_use("region", &current.name, &format!("{nodes} nodes")));
    }
    let orders = gantry_entities::order::Entity::find()
        .filter(gantry_entities::order::Column::RegionId.eq(current.id))
        .count(&txn)
        .await?;
    if orders > 0 {
        return Err(in_use("region", &current.name, &format!("{orders} orders")));
    }
    region::Entity::delete_by_id(current.id).exec(&txn).await?;
    audit::platform(
        &txn,
        &actor,
        "region.delete",
        "region",
        current.id,
        serde_json::json!({ "name": current.name }),
    )
    .await?;
    txn.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}
