use sea_orm::entity::prelude::*;

/// One try at sending a delivery and what the receiver answered.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "webhook_attempts")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub delivery_id: Uuid,
    pub attempted_at: DateTimeUtc,
    pub status_code: Option<i32>,
    pub latency_ms: i32,
    /// The start of the response body.
    pub response_excerpt: Option<String>,
    /// Why no answer came (refused address, timeout, connection error).
    pub error: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
