use sea_orm::entity::prelude::*;

/// One GPU's measurements at one time, as its agent reported them.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "gpu_telemetry")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub node_id: Uuid,
    #[sea_orm(primary_key, auto_increment = false)]
    pub gpu_index: i32,
    #[sea_orm(primary_key, auto_increment = false)]
    pub sampled_at: DateTimeUtc,
    pub utilization_pct: i16,
    pub memory_used_mib: i64,
    pub temperature_c: i16,
    pub power_w: i32,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
