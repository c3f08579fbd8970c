//! Storage quotas: how many GiB of each kind an organization may hold in a
//! region, or in every region together. Checked when a volume is created
//! or grown; an organization without a quota of a kind has no limit there.

use axum::Json;
use axum::extract::{RawPathParams, State};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QuerySelect, Set,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use gantry_access::tenancy::access::{OrgAccess, OrgScope, need};
use gantry_core::audit;
use gantry_core::auth::principal::{Actor, Operator};
use gantry_core::error::{ApiError, ApiResult, ProblemResponses};
use gantry_core::http::extract::ApiJson;
use gantry_core::state::AppState;
use gantry_core::validate::Fields;
use gantry_entities::{organization, region, storage_quota, volume};
use gantry_types::classes::{VolumeKind, VolumeState};

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_storage_quotas))
        .routes(routes!(set_storage_quota))
}

/// A storage quota with what the organization holds against it.
#[derive(Debug, Serialize, ToSchema)]
pub struct StorageQuota {
    /// The region it limits; `null` for every region together.
    pub region: Option<String>,
    pub kind: VolumeKind,
    pub max_gib: i64,
    /// GiB its volumes of that kind (and region) are sold at now.
    pub used_gib: i64,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetStorageQuota {
    /// A region name or id; absent for every region together.
    #[schema(min_length = 1, max_length = 64)]
    pub region: Option<String>,
    pub kind: VolumeKind,
    /// 0 forbids the kind there; a limit below what is held already stops
    /// new volumes and grows, and takes nothing away.
    #[schema(minimum = 0, maximum = 1_000_000_000)]
    pub max_gib: i64,
}

/// GiB of `kind` the organization's live volumes hold, in `region` or
/// everywhere.
async fn held_gib(
    db: &impl ConnectionTrait,
    org_id: Uuid,
    region: Option<Uuid>,
    kind: VolumeKind,
) -> ApiResult<i64> {
    let mut select = volume::Entity::find()
        .filter(volume::Column::OrgId.eq(org_id))
        .filter(volume::Column::Kind.eq(kind))
        .filter(volume::Column::State.ne(VolumeState::Deleted))
        .filter(volume::Column::State.ne(VolumeState::Deleting))
        .filter(volume::Column::State.ne(VolumeState::Failed));
    if let Some(region) = region {
        select = select.filter(volume::Column::RegionId.eq(region));
    }
    Ok(select.all(db).await?.iter().map(|v| v.size_gib).sum())
}

/// Refuses `adding` GiB more of `kind` in `region` past any of the
/// organization's quotas, naming the limit. The organization's row is
/// locked first, so two volumes made at once are counted one after the
/// other.
pub async fn check(
    db: &impl ConnectionTrait,
    org_id: Uuid,
    region: &region::Model,
    kind: VolumeKind,
    adding: i64,
) -> ApiResult<()> {
    organization::Entity::find_by_id(org_id)
        .lock_exclusive()
        .one(db)
        .await?;
    let quotas = storage_quota::Entity::find()
        .filter(storage_quota::Column::OrgId.eq(org_id))
        .filter(storage_quota::Column::Kind.eq(kind))
        .all(db)
        .await?;
    for quota in quotas {
        let scope = match quota.region_id {
            Some(id) if id != region.id => continue,
            Some(_) => Some(region.id),
            None => None,
        };
        let held = held_gib(db, org_id, scope, kind).await?;
        if held + adding > quota.max_gib {
            let place = match scope {
                Some(_) => format!("in region {}", region.name),
                None => "across all regions".to_owned(),
            };
            return Err(ApiError::unprocessable(
                "storage_quota_exceeded",
                format!(
                    "the organization's {} storage quota {place} is {} GiB; it holds {held} GiB and asks for {adding} more",
                    kind.as_str(),
                    quota.max_gib
                ),
            ));
        }
    }
    Ok(())
}

/// The organization's storage quotas and what it holds against each.
#[utoipa::path(
    get,
    path = "/orgs/{org_id}/storage-quotas",
    tag = "quotas",
    params(("org_id" = Uuid, Path, description = "Organization id")),
    responses((status = 200, description = "The storage quotas", body = Vec<StorageQuota>), ProblemResponses),
    security(("bearer" = []))
)]
async fn list_storage_quotas(
    State(state): State<AppState>,
    access: OrgAccess<need::AnyRole>,
) -> ApiResult<Json<Vec<StorageQuota>>> {
    Ok(Json(views(&state, &access.scope).await?))
}

async fn views(state: &AppState, scope: &OrgScope) -> ApiResult<Vec<StorageQuota>> {
    let rows = storage_quota::Entity::find()
        .filter(storage_quota::Column::OrgId.eq(scope.org_id))
        .all(&state.db)
        .await?;
    let catalog = state.catalog.current(&state.db).await?;
    let mut views = Vec::with_capacity(rows.len());
    for row in rows {
        views.push(StorageQuota {
            region: row
                .region_id
                .and_then(|id| catalog.region_name(id))
                .map(str::to_owned),
            kind: row.kind,
            max_gib: row.max_gib,
            used_gib: held_gib(&state.db, scope.org_id, row.region_id, row.kind).await?,
        });
    }
    views.sort_by(|a, b| (a.kind.as_str(), &a.region).cmp(&(b.kind.as_str(), &b.region)));
    Ok(views)
}

/// Sets an organization's storage quota of one kind in a region (or
/// everywhere), replacing the one there was.
#[utoipa::path(
    put,
    path = "/admin/orgs/{org_id}/storage-quotas",
    tag = "admin",
    params(("org_id" = Uuid, Path, description = "Organization id")),
    request_body = SetStorageQuota,
    responses((status = 200, description = "The quota, with what is held against it", body = StorageQuota), ProblemResponses),
    security(("bearer" = []))
)]
async fn set_storage_quota(
    State(state): State<AppState>,
    _operator: Operator,
    actor: Actor,
    params: RawPathParams,
    ApiJson(request): ApiJson<SetStorageQuota>,
) -> ApiResult<Json<StorageQuota>> {
    let mut fields = Fields::default();
    fields.range("max_gib", request.max_gib, 0, 1_000_000_000);
    fields.finish()?;
    let org = gantry_access::tenancy::orgs::from_path(&state.db, &params).await?;
    let catalog = state.catalog.current(&state.db).await?;
    let region = request
        .region
        .as_deref()
        .map(|reference| catalog.region(reference))
        .transpose()?;
    let now = state.clock.now();
    let txn = gantry_core::db::write(&state.db).await?;
    let existing = storage_quota::Entity::find()
        .filter(storage_quota::Column::OrgId.eq(org.id))
        .filter(storage_quota::Column::Kind.eq(request.kind))
        .filter(match region {
            Some(r) => storage_quota::Column::RegionId.eq(r.id),
            None => storage_quota::Column::RegionId.is_null(),
        })
        .one(&txn)
        .await?;
    match existing {
        Some(row) => {
            let mut row: storage_quota::ActiveModel = row.into();
            row.max_gib = Set(request.max_gib);
            row.updated_at = Set(now);
            row.update(&txn).await?;
        }
        None => {
            storage_quota::ActiveModel {
                id: Set(Uuid::now_v7()),
                org_id: Set(org.id),
                region_id: Set(region.map(|r| r.id)),
                kind: Set(request.kind),
                max_gib: Set(request.max_gib),
                created_at: Set(now),
                updated_at: Set(now),
            }
            .insert(&txn)
            .await?;
        }
    }
    audit::record(
        &txn,
        audit::Change {
            org_id: Some(org.id),
            action: "storage_quota.set",
            target_type: "organization",
            target_id: Some(org.id.to_string()),
            details: serde_json::json!({
                "region": region.map(|r| &r.name),
                "kind": request.kind,
                "max_gib": request.max_gib,
            }),
            actor: &actor,
        },
    )
    .await?;
    txn.commit().await?;
    Ok(Json(StorageQuota {
        region: region.map(|r| r.name.clone()),
        kind: request.kind,
        max_gib: request.max_gib,
        used_gib: held_gib(&state.db, org.id, region.map(|r| r.id), request.kind).await?,
    }))
}
