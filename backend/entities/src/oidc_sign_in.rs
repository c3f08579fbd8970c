use sea_orm::entity::prelude::*;

/// A sign-in through an OpenID provider, between the redirect there and
/// the way back: taken (deleted) by the callback that carries its state.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "oidc_sign_ins")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub state: String,
    pub provider: String,
    pub pkce_verifier: String,
    pub nonce: String,
    /// The console path to return to.
    pub next: String,
    pub expires_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
