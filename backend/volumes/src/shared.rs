//! Shared file systems: the distributed file system an operator declares
//! for a region (GlusterFS, NFS, CephFS, Lustre, Weka), mounted at the same
//! path on every node of it. Each `shared` volume is a directory there.
//!
//! A shared file system cannot show a workload its files under other ids
//! (FUSE and NFS take no idmapped mounts), so the ids a file carries are
//! the ones the writing workload runs under on its node. Each organization
//! therefore gets a range of 65,536 ids of its own per region, the same on
//! every node: its workloads that attach shared volumes run under it, and
//! what one writes as root on one node the next owns as root on another.
//! Its volumes' directories belong to its root with mode 0700, so no other
//! range can enter them even where a mount would show them.

use std::collections::HashMap;

use axum::Json;
use axum::extract::{RawPathParams, State};
use axum::http::StatusCode;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter,
    QueryOrder, QuerySelect, Set,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use gantry_core::audit;
use gantry_core::auth::principal::{Actor, Operator};
use gantry_core::error::{ApiError, ApiResult, ProblemResponses, Resource};
use gantry_core::http::extract::ApiJson;
use gantry_core::state::AppState;
use gantry_core::validate::Fields;
use gantry_entities::{region, shared_file_system, shared_owner, volume};
use gantry_types::classes::{SharedFsKind, VolumeKind, VolumeState};

/// Ids each organization's range holds: every id a distribution's
/// packages use, as in a workload's own user namespace.
pub const IDS_PER_ORG: i64 = 65_536;
/// The first id given out when the operator names none: far above the
/// ids of a node's own users and of the agents' ranges by default.
pub const DEFAULT_FIRST_ID: i64 = 2_000_000_000;
/// The ids a node has: 32 bits.
const IDS_END: i64 = 1 << 32;
/// The directory of the file system that holds the volumes.
const VOLUMES_DIR: &str = "gantry-volumes";

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_shared_file_systems, set_shared_file_system))
        .routes(routes!(delete_shared_file_system))
}

/// A region's shared file system, as operators see it.
#[derive(Debug, Serialize, ToSchema)]
pub struct SharedFileSystem {
    pub region: String,
    pub kind: SharedFsKind,
    /// Where every node of the region has it mounted.
    pub mount_path: String,
    /// The first node id of organizations' ranges on it.
    pub first_id: i64,
    /// Organizations with a range on it.
    pub organizations: i64,
    /// Ranges left for more organizations.
    pub ranges_left: i64,
    /// Live `shared` volumes on it.
    pub volumes: i64,
    /// GiB sold to them.
    pub provisioned_gib: i64,
    /// Bytes their files take, as last measured.
    pub used_bytes: i64,
    /// The file system's free space, as a node of the region last saw it;
    /// none before one did.
    pub free_bytes: Option<i64>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetSharedFileSystem {
    /// A region name or id.
    #[schema(min_length = 1, max_length = 64)]
    pub region: String,
    pub kind: SharedFsKind,
    /// Where every node of the region has it mounted: an absolute path.
    #[schema(min_length = 1, max_length = 255)]
    pub mount_path: String,
    /// The first node id of organizations' ranges (65,536 ids each); no
    /// node's own users nor its agent's `--uid-range` may use ids from
    /// there on. Fixed once an organization has a range.
    #[schema(minimum = 65_536, maximum = 4_294_901_760_i64)]
    pub first_id: Option<i64>,
}

/// Where a node finds a shared volume, and the first id of its
/// organization's range: its workloads run under that range, and its
/// directory belongs to its root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct SharedPlace {
    /// The volume's directory on the node.
    pub path: String,
    pub owner_id: u32,
}

/// The shared file system of region `region_id`, if it has one.
pub async fn of_region(
    db: &impl ConnectionTrait,
    region_id: Uuid,
) -> ApiResult<Option<shared_file_system::Model>> {
    Ok(shared_file_system::Entity::find_by_id(region_id)
        .one(db)
        .await?)
}

/// [`of_region`], refusing a region without one.
pub async fn required(
    db: &impl ConnectionTrait,
    region: &region::Model,
) -> ApiResult<shared_file_system::Model> {
    of_region(db, region.id).await?.ok_or_else(|| {
        ApiError::unprocessable(
            "shared_storage_not_configured",
            format!(
                "region {} has no shared file system for volumes: ask the operator, or create a `local` volume",
                region.name
            ),
        )
    })
}

/// Gives organization `org_id` its range on `fs` where it has none yet.
/// The file system's row is locked first, so two organizations never get
/// one slot.
pub async fn ensure_owner(
    db: &impl ConnectionTrait,
    fs: &shared_file_system::Model,
    org_id: Uuid,
) -> ApiResult<()> {
    shared_file_system::Entity::find_by_id(fs.region_id)
        .lock_exclusive()
        .one(db)
        .await?;
    let owners = shared_owner::Entity::find()
        .filter(shared_owner::Column::RegionId.eq(fs.region_id))
        .order_by_asc(shared_owner::Column::Slot)
        .all(db)
        .await?;
    if owners.iter().any(|o| o.org_id == org_id) {
        return Ok(());
    }
    // The lowest free slot: ranges of organizations gone are reused.
    let slot = owners
        .iter()
        .zip(0..)
        .find(|(o, n)| o.slot != *n)
        .map_or_else(
            || i32::try_from(owners.len()).unwrap_or(i32::MAX),
            |(_, n)| n,
        );
    if i64::from(slot) >= ranges(fs.first_id) {
        return Err(ApiError::unprocessable(
            "shared_storage_full",
            "the region's shared file system has no id range left for another organization: ask the operator",
        ));
    }
    shared_owner::ActiveModel {
        region_id: Set(fs.region_id),
        org_id: Set(org_id),
        slot: Set(slot),
    }
    .insert(db)
    .await?;
    Ok(())
}

/// How many organizations' ranges fit from `first_id` on.
fn ranges(first_id: i64) -> i64 {
    ((IDS_END - first_id) / IDS_PER_ORG).max(0)
}

/// Where each of `volumes` (its `shared` ones) lives on their nodes.
pub async fn places(
    db: &impl ConnectionTrait,
    volumes: &[volume::Model],
) -> ApiResult<HashMap<Uuid, SharedPlace>> {
    let shared: Vec<&volume::Model> = volumes
        .iter()
        .filter(|v| v.kind == VolumeKind::Shared)
        .collect();
    if shared.is_empty() {
        return Ok(HashMap::new());
    }
    let file_systems: HashMap<Uuid, shared_file_system::Model> = shared_file_system::Entity::find()
        .filter(shared_file_system::Column::RegionId.is_in(shared.iter().map(|v| v.region_id)))
        .all(db)
        .await?
        .into_iter()
        .map(|fs| (fs.region_id, fs))
        .collect();
    let slots: HashMap<(Uuid, Uuid), i32> = shared_owner::Entity::find()
        .filter(shared_owner::Column::OrgId.is_in(shared.iter().map(|v| v.org_id)))
        .all(db)
        .await?
        .into_iter()
        .map(|o| ((o.region_id, o.org_id), o.slot))
        .collect();
    Ok(shared
        .into_iter()
        .filter_map(|v| {
            let fs = file_systems.get(&v.region_id)?;
            let slot = slots.get(&(v.region_id, v.org_id))?;
            let owner = fs.first_id + i64::from(*slot) * IDS_PER_ORG;
            Some((
                v.id,
                SharedPlace {
                    path: format!(
                        "{}/{VOLUMES_DIR}/{}",
                        fs.mount_path.trim_end_matches('/'),
                        v.id
                    ),
                    owner_id: u32::try_from(owner).ok()?,
                },
            ))
        })
        .collect())
}

/// Records the free space a node of region `region_id` sees on its shared
/// file system, writing only a change.
pub async fn record_free(
    db: &impl ConnectionTrait,
    region_id: Uuid,
    free_bytes: i64,
) -> ApiResult<()> {
    shared_file_system::Entity::update_many()
        .col_expr(
            shared_file_system::Column::FreeBytes,
            sea_orm::sea_query::Expr::value(free_bytes),
        )
        .filter(shared_file_system::Column::RegionId.eq(region_id))
        .filter(
            sea_orm::Condition::any()
                .add(shared_file_system::Column::FreeBytes.is_null())
                .add(shared_file_system::Column::FreeBytes.ne(free_bytes)),
        )
        .exec(db)
        .await?;
    Ok(())
}

/// The shared file systems of every region.
#[utoipa::path(
    get,
    path = "/admin/shared-file-systems",
    tag = "admin",
    responses((status = 200, description = "Each region's shared file system", body = Vec<SharedFileSystem>), ProblemResponses),
    security(("bearer" = []))
)]
async fn list_shared_file_systems(
    State(state): State<AppState>,
    _operator: Operator,
) -> ApiResult<Json<Vec<SharedFileSystem>>> {
    let catalog = state.catalog.current(&state.db).await?;
    let mut views = Vec::new();
    for fs in shared_file_system::Entity::find().all(&state.db).await? {
        let name = catalog
            .region_name(fs.region_id)
            .unwrap_or_default()
            .to_owned();
        views.push(view(&state.db, fs, name).await?);
    }
    views.sort_by(|a, b| a.region.cmp(&b.region));
    Ok(Json(views))
}

async fn view(
    db: &impl ConnectionTrait,
    fs: shared_file_system::Model,
    region: String,
) -> ApiResult<SharedFileSystem> {
    let organizations = i64::try_from(
        shared_owner::Entity::find()
            .filter(shared_owner::Column::RegionId.eq(fs.region_id))
            .count(db)
            .await?,
    )
    .unwrap_or(i64::MAX);
    let live = live_volumes(db, fs.region_id).await?;
    Ok(SharedFileSystem {
        region,
        kind: fs.kind,
        organizations,
        ranges_left: ranges(fs.first_id) - organizations,
        volumes: i64::try_from(live.len()).unwrap_or(i64::MAX),
        provisioned_gib: live.iter().map(|v| v.size_gib).sum(),
        used_bytes: live.iter().filter_map(|v| v.used_bytes).sum(),
        mount_path: fs.mount_path,
        first_id: fs.first_id,
        free_bytes: fs.free_bytes,
    })
}

/// The `shared` volumes of region `region_id` that are not gone.
pub async fn live_volumes(
    db: &impl ConnectionTrait,
    region_id: Uuid,
) -> ApiResult<Vec<volume::Model>> {
    Ok(volume::Entity::find()
        .filter(volume::Column::RegionId.eq(region_id))
        .filter(volume::Column::Kind.eq(VolumeKind::Shared))
        .filter(volume::Column::State.ne(VolumeState::Deleted))
        .all(db)
        .await?)
}

/// Declares (or changes) a region's shared file system. Its id range
/// cannot move once an organization has files under it.
#[utoipa::path(
    put,
    path = "/admin/shared-file-systems",
    tag = "admin",
    request_body = SetSharedFileSystem,
    responses((status = 200, description = "The region's shared file system", body = SharedFileSystem), ProblemResponses),
    security(("bearer" = []))
)]
async fn set_shared_file_system(
    State(state): State<AppState>,
    _operator: Operator,
    actor: Actor,
    ApiJson(request): ApiJson<SetSharedFileSystem>,
) -> ApiResult<Json<SharedFileSystem>> {
    let mut fields = Fields::default();
    if let Some(why) = crate::paths::shape_refusal(&request.mount_path) {
        fields.push("mount_path", why);
    } else if request.mount_path == "/" {
        fields.push(
            "mount_path",
            "must be the shared file system's own mount point, not /",
        );
    }
    if let Some(first) = request.first_id {
        fields.range("first_id", first, IDS_PER_ORG, IDS_END - IDS_PER_ORG);
    }
    fields.finish()?;
    let catalog = state.catalog.current(&state.db).await?;
    let region = catalog.region(&request.region)?;
    let now = state.clock.now();
    let txn = gantry_core::db::write(&state.db).await?;
    let existing = shared_file_system::Entity::find_by_id(region.id)
        .lock_exclusive()
        .one(&txn)
        .await?;
    let first_id = request
        .first_id
        .or(existing.as_ref().map(|fs| fs.first_id))
        .unwrap_or(DEFAULT_FIRST_ID);
    let row = match existing {
        Some(fs) => {
            if fs.first_id != first_id
                && shared_owner::Entity::find()
                    .filter(shared_owner::Column::RegionId.eq(region.id))
                    .one(&txn)
                    .await?
                    .is_some()
            {
                return Err(ApiError::conflict(
                    "shared_ids_in_use",
                    format!(
                        "organizations' files on region {}'s shared file system carry ids from {}: the first id cannot move",
                        region.name, fs.first_id
                    ),
                ));
            }
            let mut row: shared_file_system::ActiveModel = fs.into();
            row.kind = Set(request.kind);
            row.mount_path = Set(request.mount_path.clone());
            row.first_id = Set(first_id);
            row.updated_at = Set(now);
            row.update(&txn).await?
        }
        None => {
            shared_file_system::ActiveModel {
                region_id: Set(region.id),
                kind: Set(request.kind),
                mount_path: Set(request.mount_path.clone()),
                first_id: Set(first_id),
                free_bytes: Set(None),
                created_at: Set(now),
                updated_at: Set(now),
            }
            .insert(&txn)
            .await?
        }
    };
    audit::record(
        &txn,
        audit::Change {
            org_id: None,
            action: "shared_file_system.set",
            target_type: "region",
            target_id: Some(region.id.to_string()),
            details: serde_json::json!({
                "kind": row.kind,
                "mount_path": row.mount_path,
                "first_id": row.first_id,
            }),
            actor: &actor,
        },
    )
    .await?;
    let view = view(&txn, row, region.name.clone()).await?;
    txn.commit().await?;
    Ok(Json(view))
}

/// Takes a region's shared file system out of Gantry's hands, once no
/// volume lives on it.
#[utoipa::path(
    delete,
    path = "/admin/shared-file-systems/{region}",
    tag = "admin",
    params(("region" = String, Path, description = "Region name or id")),
    responses((status = 204, description = "The region has no shared file system now"), ProblemResponses),
    security(("bearer" = []))
)]
async fn delete_shared_file_system(
    State(state): State<AppState>,
    _operator: Operator,
    actor: Actor,
    params: RawPathParams,
) -> ApiResult<StatusCode> {
    let reference = gantry_core::http::extract::path_param(&params, "region");
    let catalog = state.catalog.current(&state.db).await?;
    let region = catalog.region(reference)?;
    let txn = gantry_core::db::write(&state.db).await?;
    let fs = of_region(&txn, region.id)
        .await?
        .ok_or_else(|| ApiError::not_found(Resource::SharedFileSystem, region.id))?;
    let live = live_volumes(&txn, region.id).await?;
    if !live.is_empty() {
        return Err(ApiError::conflict(
            "shared_volumes_exist",
            format!(
                "region {} has {} shared volume(s) on its file system: they must be deleted first",
                region.name,
                live.len()
            ),
        ));
    }
    // No files are left under the organizations' ranges: they go too.
    shared_owner::Entity::delete_many()
        .filter(shared_owner::Column::RegionId.eq(region.id))
        .exec(&txn)
        .await?;
    shared_file_system::Entity::delete_by_id(fs.region_id)
        .exec(&txn)
        .await?;
    audit::record(
        &txn,
        audit::Change {
            org_id: None,
            action: "shared_file_system.delete",
            target_type: "region",
            target_id: Some(region.id.to_string()),
            details: serde_json::json!({ "mount_path": fs.mount_path }),
            actor: &actor,
        },
    )
    .await?;
    txn.commit().await?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::{DEFAULT_FIRST_ID, IDS_END, IDS_PER_ORG, ranges};

    #[test]
    fn ranges_fit_below_the_last_id() {
        assert_eq!(ranges(IDS_END - IDS_PER_ORG), 1);
        assert_eq!(ranges(IDS_END - IDS_PER_ORG + 1), 0);
        // The default leaves room for more organizations than a region has.
        assert!(ranges(DEFAULT_FIRST_ID) > 30_000);
    }
}
