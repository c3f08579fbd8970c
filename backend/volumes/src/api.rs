//! Volumes over HTTP: an organization's members list and read them,
//! members create, grow, rename and delete them.

use std::collections::HashMap;

use axum::Json;
use axum::extract::{RawPathParams, State};
use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use crate::service::{self, NewVolume, VolumeChange};
use gantry_access::tenancy::access::{OrgAccess, need};
use gantry_core::error::{ApiResult, ProblemResponses, Resource};
use gantry_core::http::extract::{ApiJson, ApiQuery, path_uuid};
use gantry_core::http::pagination::{Page, PageQuery, PageRequest};
use gantry_core::state::AppState;
use gantry_entities::{node, region, volume};
use gantry_types::classes::{VolumeKind, VolumeState};

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_volumes, create_volume))
        .routes(routes!(get_volume, update_volume, delete_volume))
}

/// Where a volume is in its life, as tenants see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum VolumeStatus {
    /// Its node has not made it yet; orders may attach it already.
    Creating,
    Available,
    /// Live orders attach it (`orders`).
    Attached,
    /// Its node erases its data; then it is gone.
    Deleting,
    /// Its node could not make it: `status_reason` says why.
    Failed,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Volume {
    pub id: Uuid,
    pub org_id: Uuid,
    pub project_id: Option<Uuid>,
    pub name: String,
    pub region_id: Uuid,
    pub region: String,
    pub kind: VolumeKind,
    /// The size sold; the file system holds exactly this much.
    pub size_gib: i64,
    /// The size its node has made it so far: below `size_gib` while it
    /// is made or grown.
    pub provisioned_gib: i64,
    /// Bytes its files take, as its node last measured; none before.
    pub used_bytes: Option<i64>,
    pub status: VolumeStatus,
    pub status_reason: Option<String>,
    /// The node a `local` volume lives on: orders attaching it run there.
    pub node: Option<String>,
    /// Live orders attaching it.
    pub orders: Vec<VolumeUser>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A live order attaching a volume.
#[derive(Debug, Serialize, ToSchema)]
pub struct VolumeUser {
    pub order_id: Uuid,
    pub name: String,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateVolume {
    /// Unique among the organization's volumes.
    #[schema(min_length = 1, max_length = 63, pattern = "^[a-z0-9][a-z0-9-]{0,62}$")]
    pub name: String,
    /// Region name or id.
    #[schema(min_length = 1, max_length = 64)]
    pub region: String,
    /// `local` when absent.
    pub kind: Option<VolumeKind>,
    #[schema(minimum = 1, maximum = 65536)]
    pub size_gib: i64,
    pub project_id: Option<Uuid>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateVolume {
    #[schema(min_length = 1, max_length = 63, pattern = "^[a-z0-9][a-z0-9-]{0,62}$")]
    pub name: Option<String>,
    /// A larger size: a volume grows, never shrinks.
    #[schema(minimum = 1, maximum = 65536)]
    pub size_gib: Option<i64>,
}

/// The organization's volumes, deleted ones aside.
#[utoipa::path(
    get,
    path = "/orgs/{org_id}/volumes",
    tag = "volumes",
    params(("org_id" = Uuid, Path, description = "Organization id"), PageQuery),
    responses((status = 200, description = "A page of volumes", body = Page<Volume>), ProblemResponses),
    security(("bearer" = []))
)]
async fn list_volumes(
    State(state): State<AppState>,
    access: OrgAccess<need::AnyRole>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Json<Page<Volume>>> {
    let request = query.validate()?;
    let rows = request
        .ascending(
            access
                .scope
                .select::<volume::Entity>()
                .filter(volume::Column::State.ne(VolumeState::Deleted)),
            volume::Column::Id,
        )
        .all(&state.db)
        .await?;
    Ok(Json(page(&state.db, rows, request).await?))
}

/// Creates a volume. A `local` one goes to the node of the region with
/// the most room for it, which makes it within seconds (`creating`, then
/// `available`).
#[utoipa::path(
    post,
    path = "/orgs/{org_id}/volumes",
    tag = "volumes",
    params(
        ("org_id" = Uuid, Path, description = "Organization id"),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes a retry return the first response", max_length = 255, pattern = "^[\\x21-\\x7e]{1,255}$"),
    ),
    request_body = CreateVolume,
    responses((status = 201, description = "The new volume", body = Volume), ProblemResponses),
    security(("bearer" = []))
)]
async fn create_volume(
    State(state): State<AppState>,
    access: OrgAccess<need::Member>,
    ApiJson(request): ApiJson<CreateVolume>,
) -> ApiResult<(StatusCode, Json<Volume>)> {
    let catalog = state.catalog.current(&state.db).await?;
    let txn = gantry_core::db::write(&state.db).await?;
    let row = service::create(
        &txn,
        &catalog,
        &access.scope,
        &access.actor,
        NewVolume {
            name: &request.name,
            region: &request.region,
            kind: request.kind.unwrap_or(VolumeKind::Local),
            size_gib: request.size_gib,
            project_id: request.project_id,
        },
        state.clock.now(),
    )
    .await?;
    txn.commit().await?;
    Ok((StatusCode::CREATED, Json(one(&state.db, row).await?)))
}

/// One volume.
#[utoipa::path(
    get,
    path = "/orgs/{org_id}/volumes/{volume_id}",
    tag = "volumes",
    params(
        ("org_id" = Uuid, Path, description = "Organization id"),
        ("volume_id" = Uuid, Path, description = "Volume id"),
    ),
    responses((status = 200, description = "The volume", body = Volume), ProblemResponses),
    security(("bearer" = []))
)]
async fn get_volume(
    State(state): State<AppState>,
    access: OrgAccess<need::AnyRole>,
    params: RawPathParams,
) -> ApiResult<Json<Volume>> {
    let id = path_uuid(&params, "volume_id", Resource::Volume)?;
    let row = service::find(&state.db, &access.scope, id).await?;
    Ok(Json(one(&state.db, row).await?))
}

/// Renames or grows a volume. A grow reaches its file system within
/// seconds; where its node cannot grow a file system in use, once no
/// order attaches it (`provisioned_gib` says when).
#[utoipa::path(
    patch,
    path = "/orgs/{org_id}/volumes/{volume_id}",
    tag = "volumes",
    params(
        ("org_id" = Uuid, Path, description = "Organization id"),
        ("volume_id" = Uuid, Path, description = "Volume id"),
    ),
    request_body = UpdateVolume,
    responses((status = 200, description = "The updated volume", body = Volume), ProblemResponses),
    security(("bearer" = []))
)]
async fn update_volume(
    State(state): State<AppState>,
    access: OrgAccess<need::Member>,
    params: RawPathParams,
    ApiJson(request): ApiJson<UpdateVolume>,
) -> ApiResult<Json<Volume>> {
    let id = path_uuid(&params, "volume_id", Resource::Volume)?;
    let txn = gantry_core::db::write(&state.db).await?;
    let row = service::update(
        &txn,
        &access.scope,
        &access.actor,
        id,
        VolumeChange {
            name: request.name.as_deref(),
            size_gib: request.size_gib,
        },
        state.clock.now(),
    )
    .await?;
    txn.commit().await?;
    Ok(Json(one(&state.db, row).await?))
}

/// Deletes a volume that no live order attaches. Its node erases its data
/// before the space serves anyone else; it reads `deleting` until then.
#[utoipa::path(
    delete,
    path = "/orgs/{org_id}/volumes/{volume_id}",
    tag = "volumes",
    params(
        ("org_id" = Uuid, Path, description = "Organization id"),
        ("volume_id" = Uuid, Path, description = "Volume id"),
    ),
    responses((status = 202, description = "The volume, being deleted", body = Volume), ProblemResponses),
    security(("bearer" = []))
)]
async fn delete_volume(
    State(state): State<AppState>,
    access: OrgAccess<need::Member>,
    params: RawPathParams,
) -> ApiResult<(StatusCode, Json<Volume>)> {
    let id = path_uuid(&params, "volume_id", Resource::Volume)?;
    let txn = gantry_core::db::write(&state.db).await?;
    let row = service::delete(&txn, &access.scope, &access.actor, id, state.clock.now()).await?;
    txn.commit().await?;
    Ok((StatusCode::ACCEPTED, Json(one(&state.db, row).await?)))
}

async fn one(db: &impl ConnectionTrait, row: volume::Model) -> ApiResult<Volume> {
    let mut views = views(db, vec![row]).await?;
    views
        .pop()
        .ok_or_else(|| gantry_core::error::ApiError::internal(std::io::Error::other("no view")))
}

async fn page(
    db: &impl ConnectionTrait,
    rows: Vec<volume::Model>,
    request: PageRequest,
) -> ApiResult<Page<Volume>> {
    let page = Page::from_rows(rows, request, |v| v.id, |v| v);
    Ok(Page {
        items: views(db, page.items).await?,
        next_cursor: page.next_cursor,
    })
}

/// Volumes as tenants see them: three queries, whatever their number.
async fn views(db: &impl ConnectionTrait, rows: Vec<volume::Model>) -> ApiResult<Vec<Volume>> {
    let regions: HashMap<Uuid, String> = region::Entity::find()
        .filter(region::Column::Id.is_in(rows.iter().map(|v| v.region_id)))
        .all(db)
        .await?
        .into_iter()
        .map(|r| (r.id, r.name))
        .collect();
    let nodes: HashMap<Uuid, String> = node::Entity::find()
        .filter(node::Column::Id.is_in(rows.iter().filter_map(|v| v.node_id)))
        .all(db)
        .await?
        .into_iter()
        .map(|n| (n.id, n.name))
        .collect();
    let ids: Vec<Uuid> = rows.iter().map(|v| v.id).collect();
    let mut users = service::users(db, &ids).await?;
    Ok(rows
        .into_iter()
        .map(|v| {
            let orders: Vec<VolumeUser> = users
                .remove(&v.id)
                .unwrap_or_default()
                .into_iter()
                .map(|u| VolumeUser {
                    order_id: u.order_id,
                    name: u.name,
                })
                .collect();
            let status = match v.state {
                VolumeState::Creating => VolumeStatus::Creating,
                VolumeState::Available if orders.is_empty() => VolumeStatus::Available,
                VolumeState::Available => VolumeStatus::Attached,
                VolumeState::Deleting | VolumeState::Deleted => VolumeStatus::Deleting,
                VolumeState::Failed => VolumeStatus::Failed,
            };
            Volume {
                id: v.id,
                org_id: v.org_id,
                project_id: v.project_id,
                name: v.name,
                region: regions.get(&v.region_id).cloned().unwrap_or_default(),
                region_id: v.region_id,
                kind: v.kind,
                size_gib: v.size_gib,
                provisioned_gib: v.provisioned_gib,
                used_bytes: v.used_bytes,
                status,
                status_reason: v.state_reason,
                node: v.node_id.and_then(|n| nodes.get(&n).cloned()),
                orders,
                created_at: v.created_at,
                updated_at: v.updated_at,
            }
        })
        .collect())
}
