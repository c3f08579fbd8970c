use sea_orm::entity::prelude::*;

/// A GPU held by a live allocation; the key is the GPU, so it is held once.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "gpu_claims")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub gpu_id: Uuid,
    pub allocation_id: Uuid,
    pub order_id: Uuid,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
