//! The confirmed reservations holding GPUs on nodes, as operators see them
//! on a node and as cordoning and maintenance weigh them.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter};
use serde::Serialize;
use utoipa::ToSchema;
use uuid::Uuid;

use gantry_core::error::ApiResult;
use gantry_entities::{reservation, reservation_node};
use gantry_types::classes::ReservationStatus;

/// A reservation holding GPUs on a node, as operators see it there.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct NodeReservation {
    pub id: Uuid,
    pub name: String,
    pub org_id: Uuid,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    /// The GPU indices it holds on the node.
    pub gpu_ids: Vec<u32>,
}

/// The confirmed reservations holding GPUs on each of `nodes`, earliest
/// first.
pub async fn held_on(
    db: &impl ConnectionTrait,
    nodes: &[Uuid],
) -> ApiResult<HashMap<Uuid, Vec<NodeReservation>>> {
    let held = reservation_node::Entity::find()
        .filter(reservation_node::Column::NodeId.is_in(nodes.iter().copied()))
        .all(db)
        .await?;
    if held.is_empty() {
        return Ok(HashMap::new());
    }
    let rows: HashMap<Uuid, reservation::Model> = reservation::Entity::find()
        .filter(reservation::Column::Id.is_in(held.iter().map(|h| h.reservation_id)))
        .filter(reservation::Column::Status.eq(ReservationStatus::Confirmed))
        .all(db)
        .await?
        .into_iter()
        .map(|r| (r.id, r))
        .collect();
    let mut on: HashMap<Uuid, Vec<NodeReservation>> = HashMap::new();
    for h in held {
        if let Some(r) = rows.get(&h.reservation_id) {
            on.entry(h.node_id).or_default().push(NodeReservation {
                id: r.id,
                name: r.name.clone(),
                org_id: r.org_id,
                starts_at: r.starts_at,
                ends_at: r.ends_at,
                gpu_ids: h.gpu_list(),
            });
        }
    }
    for list in on.values_mut() {
        list.sort_by_key(|r| (r.starts_at, r.id));
    }
    Ok(on)
}
