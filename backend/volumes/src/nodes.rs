//! Volumes as nodes see them: which to keep (at which size) and which to
//! erase, told with a node's assignments; and what the node says back
//! with its heartbeat, which moves each volume along its life.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use sea_orm::sea_query::{Expr, ExprTrait, Query};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, Condition, ConnectionTrait, EntityTrait, QueryFilter,
    QueryOrder, Set,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use gantry_core::error::ApiResult;
use gantry_core::validate::Fields;
use gantry_entities::{node, volume};
use gantry_types::classes::{DriverKind, NodeState, VolumeKind, VolumeState};

/// Volumes one heartbeat may report: more than a node could keep.
pub const REPORTS_MAX: usize = 4096;
const REASON_MAX: usize = 500;

/// What a node does with one of its volumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum VolumeAction {
    /// Make it if it is not there, grow it to `size_gib`, keep it mounted
    /// for the workloads that attach it.
    Keep,
    /// Erase its data, then remove it, once no workload uses it.
    Erase,
}

/// A volume a node keeps.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct NodeVolume {
    pub volume_id: Uuid,
    /// The organization that owns it.
    pub org_id: Uuid,
    pub size_gib: i64,
    pub action: VolumeAction,
    /// For a `shared` volume: its directory and its organization's ids.
    pub shared: Option<crate::shared::SharedPlace>,
}

/// How a node's volume stands, as its agent says.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VolumeReport {
    pub volume_id: Uuid,
    /// The size its file system has now.
    #[schema(minimum = 0)]
    pub size_gib: i64,
    /// Bytes its files take.
    #[schema(minimum = 0)]
    pub used_bytes: i64,
    /// What went wrong making or growing it, in the node's words.
    #[schema(max_length = 500)]
    pub error: Option<String>,
    /// A `shared` volume the node was asked to erase, erased: its files
    /// are overwritten and gone.
    #[serde(default)]
    pub erased: bool,
}

/// Checks a heartbeat's volume reports.
pub fn check(fields: &mut Fields, reports: &[VolumeReport], free_bytes: Option<i64>) {
    if reports.len() > REPORTS_MAX {
        fields.push("volumes", format!("at most {REPORTS_MAX} volumes"));
    }
    for (i, r) in reports.iter().enumerate() {
        fields.range(&format!("volumes[{i}].size_gib"), r.size_gib, 0, i64::MAX);
        fields.range(
            &format!("volumes[{i}].used_bytes"),
            r.used_bytes,
            0,
            i64::MAX,
        );
        if let Some(error) = &r.error {
            fields.text(&format!("volumes[{i}].error"), error, REASON_MAX);
        }
    }
    if let Some(free) = free_bytes {
        fields.range("volume_free_bytes", free, 0, i64::MAX);
    }
}

/// The volumes `node` keeps or erases: its `local` ones; the `shared`
/// ones its orders attach (`attached`); and, on the node that tends its
/// region's shared file system, every `shared` volume there to make,
/// measure or erase.
pub async fn of_node(
    db: &impl ConnectionTrait,
    node: &node::Model,
    attached: &[Uuid],
) -> ApiResult<Vec<NodeVolume>> {
    let mut volumes = volume::Entity::find()
        .filter(volume::Column::NodeId.eq(node.id))
        .filter(volume::Column::State.is_in(KEPT))
        .all(db)
        .await?;
    if crate::shared::of_region(db, node.region_id)
        .await?
        .is_some()
    {
        let mut shared = volume::Entity::find()
            .filter(volume::Column::RegionId.eq(node.region_id))
            .filter(volume::Column::Kind.eq(VolumeKind::Shared))
            .filter(volume::Column::State.is_in(KEPT));
        if tender(db, node.region_id).await? != Some(node.id) {
            shared = shared.filter(volume::Column::Id.is_in(attached.iter().copied()));
        }
        volumes.extend(shared.all(db).await?);
    }
    let places = crate::shared::places(db, &volumes).await?;
    Ok(volumes
        .into_iter()
        .map(|v| NodeVolume {
            volume_id: v.id,
            org_id: v.org_id,
            size_gib: v.size_gib,
            action: if v.state == VolumeState::Deleting {
                VolumeAction::Erase
            } else {
                VolumeAction::Keep
            },
            shared: places.get(&v.id).cloned(),
        })
        .collect())
}

/// States of a volume its node still has a hand in.
const KEPT: [VolumeState; 3] = [
    VolumeState::Creating,
    VolumeState::Available,
    VolumeState::Deleting,
];

/// The node that makes, measures and erases the `shared` volumes of
/// region `region_id`: its first agent node that answers. Another takes
/// over when it stops answering; either may be asked twice, which does
/// nothing more.
async fn tender(db: &impl ConnectionTrait, region_id: Uuid) -> ApiResult<Option<Uuid>> {
    Ok(node::Entity::find()
        .filter(node::Column::RegionId.eq(region_id))
        .filter(node::Column::Driver.eq(DriverKind::Agent))
        .filter(node::Column::State.ne(NodeState::Unhealthy))
        .order_by_asc(node::Column::Id)
        .one(db)
        .await?
        .map(|n| n.id))
}

/// Applies a node's report: volumes it made become available, grown ones
/// take their new size, failed ones say why, and erased ones (asked to be
/// and no longer reported, or reported erased) are deleted. `free_bytes`
/// is its room for more local volumes. Of a region's `shared` volumes,
/// only the node that tends them reports.
pub async fn apply(
    db: &impl ConnectionTrait,
    node: &node::Model,
    reports: &[VolumeReport],
    free_bytes: Option<i64>,
    now: DateTime<Utc>,
) -> ApiResult<()> {
    node::Entity::update_many()
        .col_expr(node::Column::VolumeFreeBytes, Expr::value(free_bytes))
        .filter(node::Column::Id.eq(node.id))
        .exec(db)
        .await?;
    let reported: HashMap<Uuid, &VolumeReport> = reports.iter().map(|r| (r.volume_id, r)).collect();
    let kept = volume::Entity::find()
        .filter(volume::Column::NodeId.eq(node.id))
        .filter(volume::Column::State.is_in(KEPT.into_iter().chain([VolumeState::Failed])))
        .all(db)
        .await?;
    let local: HashSet<Uuid> = kept.iter().map(|v| v.id).collect();
    for v in kept {
        let report = reported.get(&v.id).copied();
        settle(db, v, report, now).await?;
    }
    // The rest are shared volumes, of which only the tending node speaks:
    // another node's trouble with its own mount is not the volume's. Most
    // heartbeats report none, and ask nothing more.
    let others: Vec<Uuid> = reported
        .keys()
        .filter(|id| !local.contains(id))
        .copied()
        .collect();
    if others.is_empty() || tender(db, node.region_id).await? != Some(node.id) {
        return Ok(());
    }
    let shared = volume::Entity::find()
        .filter(volume::Column::Id.is_in(others))
        .filter(volume::Column::RegionId.eq(node.region_id))
        .filter(volume::Column::Kind.eq(VolumeKind::Shared))
        .filter(volume::Column::State.ne(VolumeState::Deleted))
        .all(db)
        .await?;
    for v in shared {
        let report = reported.get(&v.id).copied();
        settle(db, v, report, now).await?;
    }
    Ok(())
}

/// Moves volume `v` along as its node's `report` says (none: the node
/// does not have it), writing only what changed: most heartbeats change
/// nothing.
async fn settle(
    db: &impl ConnectionTrait,
    v: volume::Model,
    report: Option<&VolumeReport>,
    now: DateTime<Utc>,
) -> Result<(), sea_orm::DbErr> {
    let mut next = Standing::of(&v);
    let gone = match (v.kind, report) {
        (VolumeKind::Local, None) => true,
        (_, Some(r)) => r.erased,
        (VolumeKind::Shared, None) => false,
    };
    match (v.state, report) {
        (VolumeState::Deleting, _) if gone => {
            next.state = VolumeState::Deleted;
            next.deleted_at = Some(now);
            next.used_bytes = None;
        }
        (_, Some(r)) if r.erased => {}
        // A shared volume stays `creating` with the node's words: another
        // node may make it where this one cannot.
        (VolumeState::Creating, Some(r))
            if v.kind == VolumeKind::Local && r.error.is_some() && r.size_gib == 0 =>
        {
            next.state = VolumeState::Failed;
            next.reason.clone_from(&r.error);
        }
        (_, Some(r)) => {
            if v.state == VolumeState::Creating && r.size_gib > 0 {
                next.state = VolumeState::Available;
            }
            next.reason = r
                .error
                .clone()
                .or_else(|| crate::service::over_size(v.size_gib, r.used_bytes));
            next.provisioned_gib = r.size_gib;
            next.used_bytes = Some(r.used_bytes);
        }
        (_, None) => {}
    }
    if next == Standing::of(&v) {
        return Ok(());
    }
    let mut row: volume::ActiveModel = v.into();
    row.state = Set(next.state);
    row.state_reason = Set(next.reason);
    row.provisioned_gib = Set(next.provisioned_gib);
    row.used_bytes = Set(next.used_bytes);
    row.deleted_at = Set(next.deleted_at);
    row.updated_at = Set(now);
    row.update(db).await?;
    Ok(())
}

/// What a node's report may change of a volume.
#[derive(PartialEq, Eq)]
struct Standing {
    state: VolumeState,
    reason: Option<String>,
    provisioned_gib: i64,
    used_bytes: Option<i64>,
    deleted_at: Option<DateTime<Utc>>,
}

impl Standing {
    fn of(v: &volume::Model) -> Self {
        Self {
            state: v.state,
            reason: v.state_reason.clone(),
            provisioned_gib: v.provisioned_gib,
            used_bytes: v.used_bytes,
            deleted_at: v.deleted_at,
        }
    }
}

/// A node's storage for volumes, as operators see it.
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct NodeStorage {
    /// Room its agent reports for more volumes, in bytes; none where it
    /// keeps none.
    pub free_bytes: Option<i64>,
    /// GiB sold to the local volumes on it.
    pub provisioned_gib: i64,
    /// Bytes their files take, as last measured.
    pub used_bytes: i64,
    /// The local volumes that live on it: they stay through a drain, and
    /// the orders that attach them can run nowhere else.
    pub local_volumes: Vec<LocalVolume>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct LocalVolume {
    pub id: Uuid,
    pub name: String,
    pub org_id: Uuid,
    pub size_gib: i64,
    pub state: VolumeState,
}

/// The storage of each of `nodes` (their rows, for the room they report).
pub async fn storage(
    db: &impl ConnectionTrait,
    nodes: &[node::Model],
) -> ApiResult<HashMap<Uuid, NodeStorage>> {
    let mut storage: HashMap<Uuid, NodeStorage> = nodes
        .iter()
        .map(|n| {
            (
                n.id,
                NodeStorage {
                    free_bytes: n.volume_free_bytes,
                    ..NodeStorage::default()
                },
            )
        })
        .collect();
    for v in volume::Entity::find()
        .filter(volume::Column::NodeId.is_in(nodes.iter().map(|n| n.id)))
        .filter(volume::Column::State.ne(VolumeState::Deleted))
        .all(db)
        .await?
    {
        let Some(node) = v.node_id.and_then(|id| storage.get_mut(&id)) else {
            continue;
        };
        node.provisioned_gib += v.size_gib;
        node.used_bytes += v.used_bytes.unwrap_or(0);
        node.local_volumes.push(LocalVolume {
            id: v.id,
            name: v.name,
            org_id: v.org_id,
            size_gib: v.size_gib,
            state: v.state,
        });
    }
    Ok(storage)
}

/// Room a simulated node has for volumes: enough for a demo's worth.
pub const SIMULATED_ROOM_GIB: i64 = 4096;

/// Simulated nodes keep their volumes at once, as an agent would within a
/// heartbeat: volumes to make are made (and grown) and volumes to erase
/// are gone, through the same steps as an agent's report. The leader asks
/// every cycle, so one query finds the volumes waiting on a simulated node
/// (none, mostly); only the nodes they are on have their room counted
/// again, as what their volumes leave of [`SIMULATED_ROOM_GIB`].
pub async fn keep_on_simulated_nodes(
    db: &impl ConnectionTrait,
    now: DateTime<Utc>,
) -> Result<(), sea_orm::DbErr> {
    let simulated = Query::select()
        .column(node::Column::Id)
        .from(node::Entity)
        .and_where(node::Column::Driver.eq(DriverKind::Simulated))
        .to_owned();
    let waiting = volume::Entity::find()
        .filter(volume::Column::NodeId.in_subquery(simulated))
        .filter(
            Condition::any()
                .add(volume::Column::State.is_in([VolumeState::Creating, VolumeState::Deleting]))
                .add(
                    Condition::all()
                        .add(volume::Column::State.eq(VolumeState::Available))
                        .add(
                            Expr::col(volume::Column::ProvisionedGib)
                                .ne(Expr::col(volume::Column::SizeGib)),
                        ),
                ),
        )
        .all(db)
        .await?;
    let nodes: HashSet<Uuid> = waiting.iter().filter_map(|v| v.node_id).collect();
    for v in waiting {
        let made = (v.state != VolumeState::Deleting).then(|| VolumeReport {
            volume_id: v.id,
            size_gib: v.size_gib,
            used_bytes: v.used_bytes.unwrap_or(0),
            error: None,
            erased: false,
        });
        settle(db, v, made.as_ref(), now).await?;
    }
    for node_id in nodes {
        let held: i64 = volume::Entity::find()
            .filter(volume::Column::NodeId.eq(node_id))
            .filter(volume::Column::State.is_in([VolumeState::Creating, VolumeState::Available]))
            .all(db)
            .await?
            .iter()
            .map(|v| v.size_gib)
            .sum();
        let room = std::cmp::max(SIMULATED_ROOM_GIB - held, 0) << 30;
        node::Entity::update_many()
            .col_expr(node::Column::VolumeFreeBytes, Expr::value(room))
            .filter(node::Column::Id.eq(node_id))
            .exec(db)
            .await?;
    }
    Ok(())
}
