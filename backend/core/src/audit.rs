//! Writing the audit log: every change records who made it, what it was,
//! when, in which request and from which address, in the same transaction
//! as the change it describes.

use chrono::Utc;
use gantry_entities::audit_log;
use sea_orm::{ActiveModelTrait, ConnectionTrait, Set};
use uuid::Uuid;

use crate::auth::principal::Actor;

/// What changed: an action on a target.
pub struct Change<'a> {
    pub org_id: Option<Uuid>,
    pub action: &'static str,
    pub target_type: &'static str,
    pub target_id: Option<String>,
    pub details: serde_json::Value,
    pub actor: &'a Actor,
}

pub async fn record(db: &impl ConnectionTrait, change: Change<'_>) -> Result<(), sea_orm::DbErr> {
    row(change).insert(db).await.map(drop)
}

/// The row that records `change`, for a caller that inserts many at once.
pub fn row(change: Change<'_>) -> audit_log::ActiveModel {
    audit_log::ActiveModel {
        id: Set(Uuid::now_v7()),
        org_id: Set(change.org_id),
        actor_kind: Set(change.actor.kind.to_owned()),
        actor_id: Set(change.actor.id),
        action: Set(change.action.to_owned()),
        target_type: Set(change.target_type.to_owned()),
        target_id: Set(change.target_id),
        details: Set(change.details.to_string()),
        request_id: Set(change.actor.request_id.clone()),
        source_address: Set(change.actor.source_address.clone()),
        created_at: Set(Utc::now()),
    }
}

/// Records an operator's change to something no organization owns (the
/// catalog, nodes, join tokens).
pub async fn platform(
    db: &impl ConnectionTrait,
    actor: &Actor,
    action: &'static str,
    target_type: &'static str,
    target_id: impl ToString,
    details: serde_json::Value,
) -> Result<(), sea_orm::DbErr> {
    record(
        db,
        Change {
            org_id: None,
            action,
            target_type,
            target_id: Some(target_id.to_string()),
            details,
            actor,
        },
    )
    .await
}
