use sea_orm::entity::prelude::*;

/// Part of a shared GPU held by a live allocation: thousandths of a GPU
/// for a fraction, slices for a MIG instance.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "gpu_shares")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub gpu_id: Uuid,
    #[sea_orm(primary_key, auto_increment = false)]
    pub allocation_id: Uuid,
    pub order_id: Uuid,
    pub units: i32,
    /// The MIG instance held, unique among live shares.
    pub mig_device: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
