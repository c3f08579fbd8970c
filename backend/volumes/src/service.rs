//! Creating, growing, renaming and deleting volumes, apart from HTTP: the
//! checks, the node a `local` volume lives on, and the rows with their
//! audit entries.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, Set,
};
use uuid::Uuid;

use gantry_access::tenancy::access::OrgScope;
use gantry_core::audit::{self, Change};
use gantry_core::auth::principal::Actor;
use gantry_core::catalog::Catalog;
use gantry_core::error::{ApiError, ApiResult, Resource};
use gantry_core::validate::Fields;
use gantry_entities::{node, order, order_volume, region, volume, volume_size};
use gantry_types::classes::{NodeState, OrderStatus, VolumeKind, VolumeState};

/// The largest volume, in GiB: 64 TiB.
pub const SIZE_MAX_GIB: i64 = 65_536;
pub const NAME_MAX: usize = 63;
const GIB: i64 = 1024 * 1024 * 1024;

/// A new volume, as asked for.
pub struct NewVolume<'a> {
    pub name: &'a str,
    pub region: &'a str,
    pub kind: VolumeKind,
    pub size_gib: i64,
    pub project_id: Option<Uuid>,
}

/// A change to a volume, as asked for.
pub struct VolumeChange<'a> {
    pub name: Option<&'a str>,
    pub size_gib: Option<i64>,
}

fn check_name(fields: &mut Fields, name: &str) {
    if !gantry_core::validate::is_slug(name) {
        fields.push(
            "name",
            "must be 1 to 63 lowercase letters, digits or dashes, starting with a letter or digit",
        );
    }
}

fn check_size(fields: &mut Fields, size_gib: i64) {
    fields.range("size_gib", size_gib, 1, SIZE_MAX_GIB);
}

/// Creates a volume: a `local` one on the node of its region with the most
/// room for it, which then makes it; a `shared` one on the region's shared
/// file system, where a node of the region makes its directory.
pub async fn create(
    db: &impl ConnectionTrait,
    catalog: &Catalog,
    scope: &OrgScope,
    actor: &Actor,
    request: NewVolume<'_>,
    now: DateTime<Utc>,
) -> ApiResult<volume::Model> {
    let mut fields = Fields::default();
    check_name(&mut fields, request.name);
    check_size(&mut fields, request.size_gib);
    fields.finish()?;
    let region = catalog.region(request.region)?;
    gantry_access::tenancy::projects::require_in(db, scope, request.project_id).await?;
    ensure_name_free(db, scope, request.name, None).await?;
    crate::quotas::check(db, scope.org_id, region, request.kind, request.size_gib).await?;
    let node = match request.kind {
        VolumeKind::Local => {
            Some(roomiest_node(db, region.id, &region.name, request.size_gib).await?)
        }
        VolumeKind::Shared => {
            let fs = crate::shared::required(db, region).await?;
            crate::shared::ensure_owner(db, &fs, scope.org_id).await?;
            None
        }
    };
    let row = volume::ActiveModel {
        id: Set(Uuid::now_v7()),
        org_id: Set(scope.org_id),
        project_id: Set(request.project_id),
        name: Set(request.name.to_owned()),
        region_id: Set(region.id),
        kind: Set(request.kind),
        size_gib: Set(request.size_gib),
        state: Set(VolumeState::Creating),
        state_reason: Set(None),
        node_id: Set(node.as_ref().map(|n| n.id)),
        used_bytes: Set(None),
        provisioned_gib: Set(0),
        created_at: Set(now),
        updated_at: Set(now),
        deleted_at: Set(None),
    }
    .insert(db)
    .await?;
    sized(db, &row, row.size_gib, now).await?;
    audit::record(
        db,
        Change {
            org_id: Some(scope.org_id),
            action: "volume.create",
            target_type: "volume",
            target_id: Some(row.id.to_string()),
            details: serde_json::json!({
                "name": row.name,
                "region": region.name,
                "kind": row.kind,
                "size_gib": row.size_gib,
                "node": node.map(|n| n.name),
            }),
            actor,
        },
    )
    .await?;
    Ok(row)
}

/// Renames or grows a volume. A volume never shrinks: its file system
/// cannot give back space its files may use.
pub async fn update(
    db: &impl ConnectionTrait,
    scope: &OrgScope,
    actor: &Actor,
    id: Uuid,
    change: VolumeChange<'_>,
    now: DateTime<Utc>,
) -> ApiResult<volume::Model> {
    let mut fields = Fields::default();
    if let Some(name) = change.name {
        check_name(&mut fields, name);
    }
    if let Some(size) = change.size_gib {
        check_size(&mut fields, size);
    }
    fields.finish()?;
    let current = find_locked(db, scope, id).await?;
    if let Some(size) = change.size_gib
        && size < current.size_gib
    {
        return Err(ApiError::validation(vec![gantry_core::error::FieldError {
            field: "size_gib".into(),
            message: format!(
                "a volume grows and never shrinks: it has {} GiB",
                current.size_gib
            ),
        }]));
    }
    if !matches!(
        current.state,
        VolumeState::Creating | VolumeState::Available
    ) {
        return Err(unavailable(&current));
    }
    if let Some(name) = change.name {
        ensure_name_free(db, scope, name, Some(current.id)).await?;
    }
    let grow = change
        .size_gib
        .filter(|size| *size > current.size_gib)
        .map(|size| size - current.size_gib);
    if let Some(more) = grow {
        let region = region::Entity::find_by_id(current.region_id)
            .one(db)
            .await?
            .ok_or_else(|| ApiError::not_found(Resource::Region, current.region_id))?;
        crate::quotas::check(db, scope.org_id, &region, current.kind, more).await?;
    }
    if let (Some(more), Some(node_id)) = (grow, current.node_id) {
        let node = node::Entity::find_by_id(node_id)
            .lock_exclusive()
            .one(db)
            .await?
            .ok_or_else(|| missing_node(node_id))?;
        let promised = promised_bytes(db, &[node.id]).await?;
        let room = room(&node, &promised);
        if room < more.saturating_mul(GIB) {
            return Err(no_room_on(&node.name, more, room));
        }
    }
    let mut row: volume::ActiveModel = current.clone().into();
    if let Some(name) = change.name {
        row.name = Set(name.to_owned());
    }
    if let Some(size) = change.size_gib {
        row.size_gib = Set(size.max(current.size_gib));
    }
    row.updated_at = Set(now);
    let updated = row.update(db).await?;
    if updated.size_gib != current.size_gib {
        sized(db, &updated, updated.size_gib, now).await?;
    }
    audit::record(
        db,
        Change {
            org_id: Some(scope.org_id),
            action: "volume.update",
            target_type: "volume",
            target_id: Some(updated.id.to_string()),
            details: serde_json::json!({
                "name": updated.name,
                "size_gib": updated.size_gib,
                "previous_size_gib": current.size_gib,
            }),
            actor,
        },
    )
    .await?;
    Ok(updated)
}

/// Deletes a volume no live order attaches: its node erases its data, then
/// it is gone. The row stays (as `deleted`) for usage and invoices.
pub async fn delete(
    db: &impl ConnectionTrait,
    scope: &OrgScope,
    actor: &Actor,
    id: Uuid,
    now: DateTime<Utc>,
) -> ApiResult<volume::Model> {
    let current = find_locked(db, scope, id).await?;
    if current.state == VolumeState::Deleting {
        return Ok(current);
    }
    let users = users(db, &[current.id]).await?;
    if let Some(orders) = users.get(&current.id) {
        let names: Vec<String> = orders.iter().map(|o| o.name.clone()).collect();
        return Err(ApiError::conflict(
            "volume_attached",
            format!(
                "volume {} is attached to {}: cancel {} or wait for {} to end first",
                current.name,
                names.join(", "),
                if names.len() == 1 { "it" } else { "them" },
                if names.len() == 1 { "it" } else { "them" },
            ),
        ));
    }
    let mut row: volume::ActiveModel = current.clone().into();
    // A local volume on no node has nothing to erase. One on a node goes
    // through its node even if the node never said it made it: the node
    // may have made it since, and its space must come back erased. A
    // shared one is erased by a node of its region.
    if current.kind == VolumeKind::Local && current.node_id.is_none() {
        row.state = Set(VolumeState::Deleted);
        row.deleted_at = Set(Some(now));
    } else {
        row.state = Set(VolumeState::Deleting);
    }
    row.updated_at = Set(now);
    let updated = row.update(db).await?;
    size_ends(db, updated.id, now).await?;
    audit::record(
        db,
        Change {
            org_id: Some(scope.org_id),
            action: "volume.delete",
            target_type: "volume",
            target_id: Some(updated.id.to_string()),
            details: serde_json::json!({ "name": updated.name }),
            actor,
        },
    )
    .await?;
    Ok(updated)
}

/// Records that `volume` holds `size_gib` from `at` on: the size it had
/// until then ends there. Storage is billed by these rows, from the
/// moment a size is sold to the moment the volume is deleted.
async fn sized(
    db: &impl ConnectionTrait,
    volume: &volume::Model,
    size_gib: i64,
    at: DateTime<Utc>,
) -> ApiResult<()> {
    size_ends(db, volume.id, at).await?;
    volume_size::ActiveModel {
        id: Set(Uuid::now_v7()),
        volume_id: Set(volume.id),
        org_id: Set(volume.org_id),
        size_gib: Set(size_gib),
        starts_at: Set(at),
        ends_at: Set(None),
    }
    .insert(db)
    .await?;
    Ok(())
}

async fn size_ends(db: &impl ConnectionTrait, volume: Uuid, at: DateTime<Utc>) -> ApiResult<()> {
    volume_size::Entity::update_many()
        .col_expr(volume_size::Column::EndsAt, Expr::value(at))
        .filter(volume_size::Column::VolumeId.eq(volume))
        .filter(volume_size::Column::EndsAt.is_null())
        .exec(db)
        .await?;
    Ok(())
}

/// The organization's volume `id`, unless it is deleted.
pub async fn find(
    db: &impl ConnectionTrait,
    scope: &OrgScope,
    id: Uuid,
) -> ApiResult<volume::Model> {
    one(db, live(scope, id), id).await
}

/// [`find`], locked for the rest of the transaction.
async fn find_locked(
    db: &impl ConnectionTrait,
    scope: &OrgScope,
    id: Uuid,
) -> ApiResult<volume::Model> {
    one(db, live(scope, id).lock_exclusive(), id).await
}

fn live(scope: &OrgScope, id: Uuid) -> sea_orm::Select<volume::Entity> {
    scope
        .select::<volume::Entity>()
        .filter(volume::Column::Id.eq(id))
        .filter(volume::Column::State.ne(VolumeState::Deleted))
}

async fn one(
    db: &impl ConnectionTrait,
    select: sea_orm::Select<volume::Entity>,
    id: Uuid,
) -> ApiResult<volume::Model> {
    select
        .one(db)
        .await?
        .ok_or_else(|| ApiError::not_found(Resource::Volume, id))
}

/// Refuses an order or a change naming a volume that is going or broken.
pub fn unavailable(volume: &volume::Model) -> ApiError {
    let why = match volume.state {
        VolumeState::Deleting | VolumeState::Deleted => "is being deleted".to_owned(),
        VolumeState::Failed => format!(
            "failed: {}",
            volume
                .state_reason
                .as_deref()
                .unwrap_or("its node could not make it")
        ),
        VolumeState::Creating | VolumeState::Available => "is available".to_owned(),
    };
    ApiError::conflict(
        "volume_unavailable",
        format!("volume {} {why}", volume.name),
    )
}

/// What a volume whose files take `used_bytes`, more than its
/// `size_gib`, tells its tenant; none while they fit. Only a shared file
/// system without quotas lets files grow past the size sold.
pub fn over_size(size_gib: i64, used_bytes: i64) -> Option<String> {
    (used_bytes > size_gib.saturating_mul(GIB)).then(|| {
        format!(
            "its files take {:.1} GiB, more than its {size_gib} GiB: orders cannot attach it until it is grown or files are removed",
            used_bytes as f64 / GIB as f64
        )
    })
}

async fn ensure_name_free(
    db: &impl ConnectionTrait,
    scope: &OrgScope,
    name: &str,
    except: Option<Uuid>,
) -> ApiResult<()> {
    let mut select = scope
        .select::<volume::Entity>()
        .filter(volume::Column::Name.eq(name))
        .filter(volume::Column::State.ne(VolumeState::Deleted));
    if let Some(id) = except {
        select = select.filter(volume::Column::Id.ne(id));
    }
    if select.one(db).await?.is_some() {
        return Err(ApiError::conflict(
            "volume_name_taken",
            format!("the organization already has a volume named {name:?}"),
        ));
    }
    Ok(())
}

/// A live order that attaches a volume.
#[derive(Debug, Clone)]
pub struct User {
    pub order_id: Uuid,
    pub name: String,
}

/// The live orders attaching each of `volumes`.
pub async fn users(
    db: &impl ConnectionTrait,
    volumes: &[Uuid],
) -> ApiResult<HashMap<Uuid, Vec<User>>> {
    if volumes.is_empty() {
        return Ok(HashMap::new());
    }
    let attached = order_volume::Entity::find()
        .filter(order_volume::Column::VolumeId.is_in(volumes.iter().copied()))
        .all(db)
        .await?;
    if attached.is_empty() {
        return Ok(HashMap::new());
    }
    let live: HashMap<Uuid, order::Model> = order::Entity::find()
        .filter(order::Column::Id.is_in(attached.iter().map(|a| a.order_id)))
        .filter(order::Column::Status.is_not_in(OrderStatus::FINAL))
        .all(db)
        .await?
        .into_iter()
        .map(|o| (o.id, o))
        .collect();
    let mut users: HashMap<Uuid, Vec<User>> = HashMap::new();
    for a in attached {
        if let Some(o) = live.get(&a.order_id) {
            users.entry(a.volume_id).or_default().push(User {
                order_id: o.id,
                name: o.name.clone().unwrap_or_else(|| o.id.to_string()),
            });
        }
    }
    Ok(users)
}

/// Bytes promised to volumes on each of `nodes` that their nodes have not
/// made yet (new volumes, and the growth of grown ones): the room a node
/// reports does not count them yet.
async fn promised_bytes(
    db: &impl ConnectionTrait,
    nodes: &[Uuid],
) -> ApiResult<HashMap<Uuid, i64>> {
    let mut promised: HashMap<Uuid, i64> = HashMap::new();
    for v in volume::Entity::find()
        .filter(volume::Column::NodeId.is_in(nodes.iter().copied()))
        .filter(volume::Column::State.is_in([VolumeState::Creating, VolumeState::Available]))
        .all(db)
        .await?
    {
        if let Some(node) = v.node_id {
            let pending = (v.size_gib - v.provisioned_gib).max(0).saturating_mul(GIB);
            *promised.entry(node).or_default() += pending;
        }
    }
    Ok(promised)
}

/// Room left on `node` for volumes, in bytes.
fn room(node: &node::Model, promised: &HashMap<Uuid, i64>) -> i64 {
    node.volume_free_bytes.unwrap_or(0) - promised.get(&node.id).copied().unwrap_or(0)
}

/// The ready node of `region` with the most room for volumes, if it has
/// room for `size_gib` more. Nodes are locked, so two volumes made at once
/// cannot both count the same room.
async fn roomiest_node(
    db: &impl ConnectionTrait,
    region: Uuid,
    region_name: &str,
    size_gib: i64,
) -> ApiResult<node::Model> {
    let nodes = node::Entity::find()
        .filter(node::Column::RegionId.eq(region))
        .filter(node::Column::State.eq(NodeState::Ready))
        .filter(node::Column::VolumeFreeBytes.is_not_null())
        .order_by_asc(node::Column::Id)
        .lock_exclusive()
        .all(db)
        .await?;
    let ids: Vec<Uuid> = nodes.iter().map(|n| n.id).collect();
    let promised = promised_bytes(db, &ids).await?;
    let best = nodes
        .into_iter()
        .map(|n| (room(&n, &promised), n))
        .max_by_key(|(room, n)| (*room, std::cmp::Reverse(n.id)));
    match best {
        Some((room, node)) if room >= size_gib.saturating_mul(GIB) => Ok(node),
        Some((room, node)) => Err(no_room_on(&node.name, size_gib, room)),
        None => Err(ApiError::unprocessable(
            "no_volume_nodes",
            format!(
                "region {region_name} has no ready node that keeps local volumes: ask the operator, or choose another region"
            ),
        )),
    }
}

fn no_room_on(node: &str, size_gib: i64, room: i64) -> ApiError {
    ApiError::validation(vec![gantry_core::error::FieldError {
        field: "size_gib".into(),
        message: format!(
            "{size_gib} GiB does not fit: the node with the most room ({node}) has {} GiB free for volumes",
            room.max(0) / GIB
        ),
    }])
}

fn missing_node(id: Uuid) -> ApiError {
    ApiError::internal(std::io::Error::other(format!(
        "volume's node {id} is missing"
    )))
}
