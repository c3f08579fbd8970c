//! Sign-in with an OpenID Connect provider (the authorization code flow
//! with PKCE and a nonce): operators list providers in the configuration;
//! the console offers "Sign in with …" for each; the way back links the
//! provider's account to a user by verified email, or makes one, and gives
//! memberships its claims map to.

mod flow;
mod link;

pub use flow::routes;

use gantry_core::config::oidc::Provider;

/// Drops sign-ins whose browser never came back before they lapsed.
pub async fn prune(
    db: &impl sea_orm::ConnectionTrait,
    now: chrono::DateTime<chrono::Utc>,
) -> Result<u64, sea_orm::DbErr> {
    use sea_orm::{ColumnTrait as _, EntityTrait as _, QueryFilter as _};
    let pruned = gantry_entities::oidc_sign_in::Entity::delete_many()
        .filter(gantry_entities::oidc_sign_in::Column::ExpiresAt.lte(now))
        .exec(db)
        .await?;
    Ok(pruned.rows_affected)
}
