use sea_orm::entity::prelude::*;

use gantry_types::classes::PriorityClass;

/// A service credit one order earned in one month, until an invoice takes it.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "sla_credits")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub org_id: Uuid,
    pub month_start: DateTimeUtc,
    pub order_id: Uuid,
    pub priority_class: PriorityClass,
    pub availability_permyriad: i32,
    pub downtime_seconds: i64,
    pub credit_percent: i32,
    pub charges_micros: i64,
    pub credit_micros: i64,
    /// JSON: the node events that hit the order that month.
    pub evidence: String,
    pub applied_invoice_id: Option<Uuid>,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
