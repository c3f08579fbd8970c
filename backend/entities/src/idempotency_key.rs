use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "idempotency_keys")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub principal: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub key: String,
    pub method: String,
    pub path: String,
    pub request_hash: String,
    /// `None` while the first request with this key is still running.
    pub response_status: Option<i16>,
    pub response_body: Option<String>,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
