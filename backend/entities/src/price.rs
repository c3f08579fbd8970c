use sea_orm::entity::prelude::*;

use gantry_types::classes::PricingClass;

/// One version of a price; later versions supersede it from their
/// `effective_from` on, and no row is ever edited.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "prices")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub instance_type_id: Uuid,
    /// `None`: the price everywhere a region has no price of its own.
    pub region_id: Option<Uuid>,
    pub pricing_class: PricingClass,
    /// Micro-units of the currency per instance-hour.
    pub hourly_micros: i64,
    pub effective_from: DateTimeUtc,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
