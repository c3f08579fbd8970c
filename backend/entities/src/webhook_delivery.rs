use sea_orm::entity::prelude::*;

/// One event for one endpoint: the exact bytes sent on every attempt.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "webhook_deliveries")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub endpoint_id: Uuid,
    pub org_id: Uuid,
    /// `webhook-id`: the same on every attempt and redelivery.
    pub message_id: String,
    /// The outbox event it carries; none for a test event. An endpoint's
    /// deliveries are sent in this order.
    pub event_seq: Option<i64>,
    pub event_type: String,
    pub payload: String,
    /// pending, succeeded or failed.
    pub status: String,
    pub attempts: i32,
    pub next_attempt_at: Option<DateTimeUtc>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
