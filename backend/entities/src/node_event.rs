use sea_orm::entity::prelude::*;

/// Something that happened to a node and, when it hit one, an order: the
/// evidence SLA reports are measured from.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "node_events")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub node_id: Uuid,
    /// `node_unhealthy`, `node_recovered`.
    pub kind: String,
    pub order_id: Option<Uuid>,
    pub org_id: Option<Uuid>,
    /// JSON.
    pub details: String,
    pub at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
