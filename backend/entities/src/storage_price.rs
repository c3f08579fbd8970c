use sea_orm::entity::prelude::*;

use gantry_types::classes::VolumeKind;

/// One version of a storage price; later versions supersede it from their
/// `effective_from` on, and no row is ever edited.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "storage_prices")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    /// `None`: the price everywhere a region has no price of its own.
    pub region_id: Option<Uuid>,
    pub kind: VolumeKind,
    /// Micro-units of the currency per GiB-month (730 hours).
    pub gib_month_micros: i64,
    pub effective_from: DateTimeUtc,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
