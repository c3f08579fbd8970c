use sea_orm::entity::prelude::*;

/// The GPUs one reservation holds on one node.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "reservation_nodes")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub reservation_id: Uuid,
    pub node_id: Uuid,
    /// A JSON array of the GPU indices on the node.
    pub gpu_indices: String,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}

impl Model {
    /// The GPU indices it holds on its node.
    pub fn gpu_list(&self) -> Vec<u32> {
        serde_json::from_str(&self.gpu_indices).unwrap_or_default()
    }
}
