use sea_orm::entity::prelude::*;

use gantry_types::classes::{LineKind, PricingClass};

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "invoice_lines")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub invoice_id: Uuid,
    pub position: i32,
    pub kind: LineKind,
    pub description: String,
    pub instance_type_id: Option<Uuid>,
    pub region_id: Option<Uuid>,
    pub pricing_class: Option<PricingClass>,
    /// The price per instance-hour in force.
    pub hourly_micros: Option<i64>,
    /// The share of it charged, in thousandths (off-peak multipliers).
    pub price_permille: Option<i32>,
    /// Instance-seconds; GiB-seconds on a storage line.
    pub quantity_seconds: i64,
    pub gpu_seconds: i64,
    pub amount_micros: i64,
    pub reason: Option<String>,
    pub author: Option<Uuid>,
    /// The volume a storage line charges for.
    pub volume_id: Option<Uuid>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
