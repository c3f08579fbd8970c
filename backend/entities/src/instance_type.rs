use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "instance_types")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub name: String,
    pub gpu_model_id: Uuid,
    pub gpus_per_node: i32,
    pub vcpus: i32,
    pub memory_gib: i32,
    pub disk_gib: i32,
    /// A fraction of one GPU, in thousandths, for a shared-GPU type.
    pub gpu_milli: Option<i32>,
    /// The MIG profile (`1g.10gb`) of a type that sells one MIG instance.
    pub mig_profile: Option<String>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
