use sea_orm::entity::prelude::*;

/// The range of ids an organization's files on a region's shared file
/// system are stored under: its `slot`, the same on every node.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "shared_owners")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub region_id: Uuid,
    #[sea_orm(primary_key, auto_increment = false)]
    pub org_id: Uuid,
    pub slot: i32,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
