use sea_orm::entity::prelude::*;

use gantry_types::classes::ReservationStatus;

/// Every GPU of one node held for maintenance over a window.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "maintenance_windows")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub node_id: Uuid,
    pub starts_at: DateTimeUtc,
    pub ends_at: DateTimeUtc,
    pub reason: String,
    /// Confirmed, cancelled or ended, as reservations are.
    pub status: ReservationStatus,
    pub created_by: Option<Uuid>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
