use sea_orm::entity::prelude::*;

/// One refresh token of a browser session; only its hash is kept.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "refresh_tokens")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub user_id: Uuid,
    /// The sign-in it descends from: rotation keeps it, revocation takes
    /// the whole family.
    pub family_id: Uuid,
    /// SHA-256 of the secret, hex.
    pub token_hash: String,
    pub expires_at: DateTimeUtc,
    pub created_at: DateTimeUtc,
    /// When it was exchanged for the next one: presenting it again is reuse.
    pub used_at: Option<DateTimeUtc>,
    pub revoked_at: Option<DateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
