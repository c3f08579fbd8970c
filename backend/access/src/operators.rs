//! Platform operators, created or promoted from the command line.

use chrono::Utc;
use sea_orm::{ActiveModelTrait, ColumnTrait, DatabaseConnection, EntityTrait, QueryFilter, Set};
use uuid::Uuid;

use crate::auth::accounts::normalize_email;
use gantry_core::audit::{self, Change};
use gantry_core::auth::password::{self, PasswordHasher};
use gantry_core::auth::principal::Actor;
use gantry_entities::user;

pub enum Outcome {
    Created(Uuid),
    Promoted(Uuid),
}

/// Makes `email` a platform operator: promotes the existing user (leaving
/// their password alone) or creates one with `password`.
pub async fn create_or_promote(
    db: &DatabaseConnection,
    email: &str,
    password: &str,
) -> anyhow::Result<Outcome> {
    let email = normalize_email(email)
        .ok_or_else(|| anyhow::anyhow!("{email:?} is not a valid email address"))?;
    let actor = Actor {
        kind: "cli",
        id: None,
        request_id: String::new(),
        source_address: "local".into(),
    };
    let txn = gantry_core::db::write(db).await?;
    let existing = user::Entity::find()
        .filter(user::Column::Email.eq(&email))
        .one(&txn)
        .await?;
    let outcome = match existing {
        Some(account) => {
            let id = account.id;
            let mut row: user::ActiveModel = account.into();
            row.is_operator = Set(true);
            row.updated_at = Set(Utc::now());
            row.update(&txn).await?;
            Outcome::Promoted(id)
        }
        None => {
            if let Some(weakness) = password::weakness(password, &email) {
                anyhow::bail!("the password {weakness}");
            }
            let hash = PasswordHasher::new()?.hash(password.to_owned()).await?;
            let now = Utc::now();
            let id = Uuid::now_v7();
            user::ActiveModel {
                id: Set(id),
                email: Set(email.clone()),
                name: Set(email.split('@').next().unwrap_or_default().to_owned()),
                password_hash: Set(hash),
                is_operator: Set(true),
                locale: Set(None),
                time_zone: Set(None),
                created_at: Set(now),
                updated_at: Set(now),
            }
            .insert(&txn)
            .await?;
            Outcome::Created(id)
        }
    };
    let (action, id) = match &outcome {
        Outcome::Created(id) => ("operator.create", *id),
        Outcome::Promoted(id) => ("operator.promote", *id),
    };
    audit::record(
        &txn,
        Change {
            org_id: None,
            action,
            target_type: "user",
            target_id: Some(id.to_string()),
            details: serde_json::json!({ "email": email }),
            actor: &actor,
        },
    )
    .await?;
    txn.commit().await?;
    Ok(outcome)
}
