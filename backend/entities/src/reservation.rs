use sea_orm::entity::prelude::*;

use gantry_types::classes::ReservationStatus;

/// GPUs of one instance type held for an organization over a window.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "reservations")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub org_id: Uuid,
    /// When set, only this project's orders may run in it.
    pub project_id: Option<Uuid>,
    pub name: String,
    pub instance_type_id: Uuid,
    pub gpu_model_id: Uuid,
    pub region_id: Uuid,
    /// Instances of the type: one node each.
    pub node_count: i32,
    pub gpus_per_node: i32,
    pub starts_at: DateTimeUtc,
    pub ends_at: DateTimeUtc,
    /// The reserved price per instance-hour when it was confirmed.
    pub hourly_micros: i64,
    pub status: ReservationStatus,
    /// Where the charged window ends: `ends_at`, or earlier once cancelled.
    pub billed_until: DateTimeUtc,
    pub cancelled_at: Option<DateTimeUtc>,
    pub cancellation_fee_micros: i64,
    pub created_by_kind: String,
    pub created_by: Option<Uuid>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}

impl Model {
    /// GPUs it holds in all.
    pub fn gpus(&self) -> i64 {
        i64::from(self.node_count) * i64::from(self.gpus_per_node)
    }
}
