use sea_orm::entity::prelude::*;

/// One event in the outbox, written in the transaction of the change that
/// caused it: by a trigger for an order's status change (`order_id`, the
/// statuses and the reason), or by code for the rest (`event_type` and the
/// JSON data in `detail`).
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "webhook_events")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub seq: i64,
    pub org_id: Uuid,
    pub event_type: Option<String>,
    pub order_id: Option<Uuid>,
    pub from_status: Option<String>,
    pub to_status: Option<String>,
    pub detail: Option<String>,
    /// RFC 3339 in UTC, written by the database's clock or the server's.
    pub occurred_at: String,
    /// Fanned out to the organization's endpoints.
    pub dispatched: bool,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
