use sea_orm::entity::prelude::*;

use gantry_types::classes::InvoiceStatus;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "invoices")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub org_id: Uuid,
    pub period_start: DateTimeUtc,
    pub period_end: DateTimeUtc,
    pub status: InvoiceStatus,
    pub currency: String,
    pub subtotal_micros: i64,
    pub discount_micros: i64,
    pub credits_micros: i64,
    pub total_micros: i64,
    pub rated_at: DateTimeUtc,
    pub finalized_at: Option<DateTimeUtc>,
    pub paid_at: Option<DateTimeUtc>,
    pub voided_at: Option<DateTimeUtc>,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
