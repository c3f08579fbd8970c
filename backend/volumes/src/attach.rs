//! Volumes an order attaches: each the organization's own, available,
//! within its size, in the order's region, at a mount path of its own.
//! `local` volumes pin the order to their node; `shared` ones only to
//! their region.

use std::collections::HashMap;

use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, Set};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use gantry_access::tenancy::access::OrgScope;
use gantry_core::error::{ApiError, ApiResult, Resource};
use gantry_core::validate::Fields;
use gantry_entities::{order_volume, volume};
use gantry_types::classes::{VolumeKind, VolumeState};

/// Volumes one order may attach.
pub const PER_ORDER_MAX: usize = 8;

/// A volume an order attaches, and where its workloads see it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct VolumeAttachment {
    /// One of the organization's volumes (`/orgs/{org_id}/volumes`).
    pub volume_id: Uuid,
    /// An absolute path inside the workload, such as `/checkpoints`; not
    /// `/`, nor in `/proc`, `/sys`, `/dev` or `/run`, nor a system
    /// directory such as `/etc` or `/usr`.
    #[schema(min_length = 1, max_length = 255)]
    pub mount_path: String,
    /// Whether the workload may only read it; `false` when absent.
    #[serde(default)]
    pub read_only: bool,
}

/// What an order's volumes come to.
#[derive(Debug, Default)]
pub struct Attached {
    pub attachments: Vec<VolumeAttachment>,
    /// The region its volumes are in.
    pub region_id: Option<Uuid>,
    /// The node its `local` volumes live on: it runs only there.
    pub node_id: Option<Uuid>,
    /// The name of the first volume that pins it there.
    pub pinned_by: Option<String>,
}

impl Attached {
    /// The rows that attach the volumes to order `order_id`.
    pub fn rows(&self, order_id: Uuid) -> Vec<order_volume::ActiveModel> {
        self.attachments
            .iter()
            .map(|a| order_volume::ActiveModel {
                order_id: Set(order_id),
                volume_id: Set(a.volume_id),
                mount_path: Set(a.mount_path.clone()),
                read_only: Set(a.read_only),
            })
            .collect()
    }
}

/// Checks the attachments' own fields: count, paths, repeats.
pub fn check(fields: &mut Fields, attachments: &[VolumeAttachment]) {
    if attachments.len() > PER_ORDER_MAX {
        fields.push("volumes", format!("at most {PER_ORDER_MAX} volumes"));
    }
    for (i, a) in attachments.iter().enumerate() {
        if let Some(why) = crate::paths::refusal(&a.mount_path) {
            fields.push(&format!("volumes[{i}].mount_path"), why);
        } else if let Some(other) = attachments[..i]
            .iter()
            .find(|b| crate::paths::overlap(&a.mount_path, &b.mount_path))
        {
            fields.push(
                &format!("volumes[{i}].mount_path"),
                format!(
                    "{} overlaps {}, where another volume is mounted",
                    a.mount_path, other.mount_path
                ),
            );
        }
        if attachments[..i].iter().any(|b| b.volume_id == a.volume_id) {
            fields.push(
                &format!("volumes[{i}].volume_id"),
                "the volume is attached twice",
            );
        }
    }
}

/// Resolves an order's attachments against the organization's volumes:
/// another organization's volume is not found (404), as an unknown one.
pub async fn resolve(
    db: &impl ConnectionTrait,
    scope: &OrgScope,
    attachments: &[VolumeAttachment],
    region_id: Option<Uuid>,
    node_count: i32,
) -> ApiResult<Attached> {
    if attachments.is_empty() {
        return Ok(Attached::default());
    }
    let volumes: HashMap<Uuid, volume::Model> = scope
        .select::<volume::Entity>()
        .filter(volume::Column::Id.is_in(attachments.iter().map(|a| a.volume_id)))
        .filter(volume::Column::State.ne(VolumeState::Deleted))
        .all(db)
        .await?
        .into_iter()
        .map(|v| (v.id, v))
        .collect();
    let mut fields = Fields::default();
    let mut region = region_id;
    let mut node: Option<(Uuid, &str)> = None;
    for (i, a) in attachments.iter().enumerate() {
        let v = volumes
            .get(&a.volume_id)
            .ok_or_else(|| ApiError::not_found(Resource::Volume, a.volume_id))?;
        if !matches!(v.state, VolumeState::Creating | VolumeState::Available) {
            return Err(crate::service::unavailable(v));
        }
        if let Some(why) = v
            .used_bytes
            .and_then(|used| crate::service::over_size(v.size_gib, used))
        {
            return Err(ApiError::conflict(
                "volume_over_size",
                format!("volume {}: {why}", v.name),
            ));
        }
        let field = format!("volumes[{i}].volume_id");
        match region {
            Some(r) if r != v.region_id => fields.push(
                &field,
                format!(
                    "volume {} is in another region than the order: order it there",
                    v.name
                ),
            ),
            _ => region = Some(v.region_id),
        }
        if v.kind == VolumeKind::Local {
            if node_count > 1 {
                fields.push(
                    &field,
                    format!(
                        "volume {} is local to one node; an order on {node_count} nodes cannot attach it",
                        v.name
                    ),
                );
            }
            match (node, v.node_id) {
                (Some((at, first)), Some(here)) if at != here => fields.push(
                    &field,
                    format!(
                        "volumes {first} and {} are local to different nodes; one order runs on one",
                        v.name
                    ),
                ),
                (None, Some(here)) => node = Some((here, v.name.as_str())),
                _ => {}
            }
        }
    }
    fields.finish()?;
    Ok(Attached {
        attachments: attachments.to_vec(),
        region_id: region,
        node_id: node.map(|(id, _)| id),
        pinned_by: node.map(|(_, name)| name.to_owned()),
    })
}

/// The volumes each of `orders` attaches, outer mount paths first (so a
/// volume mounted inside another's path lands on top of it).
pub async fn of_orders(
    db: &impl ConnectionTrait,
    orders: &[Uuid],
) -> ApiResult<HashMap<Uuid, Vec<VolumeAttachment>>> {
    if orders.is_empty() {
        return Ok(HashMap::new());
    }
    let mut attached: HashMap<Uuid, Vec<VolumeAttachment>> = HashMap::new();
    for a in order_volume::Entity::find()
        .filter(order_volume::Column::OrderId.is_in(orders.iter().copied()))
        .all(db)
        .await?
    {
        attached
            .entry(a.order_id)
            .or_default()
            .push(VolumeAttachment {
                volume_id: a.volume_id,
                mount_path: a.mount_path,
                read_only: a.read_only,
            });
    }
    for list in attached.values_mut() {
        list.sort_by(|a, b| a.mount_path.cmp(&b.mount_path));
    }
    Ok(attached)
}
