//! Who a provider's account is here: the user it was linked to, else the
//! user with its verified email (linked now), else a new user; and the
//! memberships its claims map to, made just in time.

use chrono::Utc;
use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, Set};
use uuid::Uuid;

use super::Provider;
use crate::auth::accounts::{NewUser, add_user};
use gantry_core::audit::{self, Change};
use gantry_core::auth::principal::Actor;
use gantry_core::error::ApiResult;
use gantry_core::state::AppState;
use gantry_entities::{membership, user, user_identity};

pub struct Identity<'a> {
    pub subject: &'a str,
    /// Verified by the provider, normalized.
    pub email: &'a str,
    pub name: Option<&'a str>,
    /// The values of the provider's `org_claim`.
    pub groups: &'a [String],
}

pub async fn user_for(
    state: &AppState,
    provider: &Provider,
    identity: Identity<'_>,
    actor: &Actor,
) -> ApiResult<Uuid> {
    let now = Utc::now();
    let txn = gantry_core::db::write(&state.db).await?;
    let linked =
        user_identity::Entity::find_by_id((provider.name.clone(), identity.subject.to_owned()))
            .one(&txn)
            .await?;
    let user_id = match linked {
        Some(link) => link.user_id,
        None => {
            let existing = user::Entity::find()
                .filter(user::Column::Email.eq(identity.email))
                .one(&txn)
                .await?;
            let user_id = match existing {
                Some(user) => user.id,
                None => {
                    let user_id = Uuid::now_v7();
                    let name = identity
                        .name
                        .filter(|n| !n.trim().is_empty())
                        .unwrap_or_else(|| {
                            identity.email.split('@').next().unwrap_or(identity.email)
                        });
                    add_user(
                        &txn,
                        &actor.as_user(user_id),
                        NewUser {
                            id: user_id,
                            email: identity.email.to_owned(),
                            name: name.chars().take(100).collect(),
                            password_hash: gantry_core::auth::password::NO_PASSWORD.to_owned(),
                        },
                        serde_json::json!({ "provider": provider.name }),
                    )
                    .await?;
                    crate::tenancy::invitations::accept(
                        &txn,
                        &actor.as_user(user_id),
                        user_id,
                        identity.email,
                        state.clock.now(),
                    )
                    .await?;
                    user_id
                }
            };
            user_identity::ActiveModel {
                provider: Set(provider.name.clone()),
                subject: Set(identity.subject.to_owned()),
                user_id: Set(user_id),
                created_at: Set(now),
            }
            .insert(&txn)
            .await?;
            about(
                &txn,
                &actor.as_user(user_id),
                None,
                "user.identity_link",
                serde_json::json!({ "provider": provider.name, "subject": identity.subject }),
            )
            .await?;
            user_id
        }
    };
    let actor = actor.as_user(user_id);
    for mapping in provider
        .memberships
        .iter()
        .filter(|m| identity.groups.contains(&m.claim_value))
    {
        if membership::Entity::find_by_id((mapping.org_id, user_id))
            .one(&txn)
            .await?
            .is_some()
        {
            continue;
        }
        membership::ActiveModel {
            org_id: Set(mapping.org_id),
            user_id: Set(user_id),
            role: Set(mapping.role),
            created_at: Set(now),
            updated_at: Set(now),
        }
        .insert(&txn)
        .await?;
        about(
            &txn,
            &actor,
            Some(mapping.org_id),
            "member.add",
            serde_json::json!({ "role": mapping.role, "provider": provider.name, "claim_value": mapping.claim_value }),
        )
        .await?;
    }
    about(
        &txn,
        &actor,
        None,
        "user.login",
        serde_json::json!({ "provider": provider.name }),
    )
    .await?;
    txn.commit().await?;
    Ok(user_id)
}

/// An audit entry about the user `actor` acts as.
async fn about(
    txn: &impl sea_orm::ConnectionTrait,
    actor: &Actor,
    org_id: Option<Uuid>,
    action: &'static str,
    details: serde_json::Value,
) -> Result<(), sea_orm::DbErr> {
    audit::record(
        txn,
        Change {
            org_id,
            action,
            target_type: "user",
            target_id: actor.id.map(|id| id.to_string()),
            details,
            actor,
        },
    )
    .await
}
