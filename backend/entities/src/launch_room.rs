use sea_orm::entity::prelude::*;

/// What a launch of an instance type would meet in a region, as the
/// scheduling leader last worked it out.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "launch_rooms")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub instance_type_id: Uuid,
    #[sea_orm(primary_key, auto_increment = false)]
    pub region_id: Uuid,
    /// Instances that could start side by side; `None` for types without
    /// GPUs.
    pub instances_now: Option<i32>,
    /// GPUs of the type's model waiting orders may take in the region.
    pub waiting_gpus: i64,
    pub as_of: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
