use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "gpus")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub node_id: Uuid,
    /// The index the node's driver knows it by (`CUDA_VISIBLE_DEVICES`).
    pub index: i32,
    pub gpu_model_id: Uuid,
    pub hardware_uuid: String,
    pub memory_mib: i64,
    pub nvlink_domain: i32,
    pub healthy: bool,
    pub mig_enabled: bool,
    /// A JSON array of its MIG instances (`uuid`, `profile`) as the agent
    /// found them; none when it is not in MIG mode.
    pub mig_devices: Option<String>,
    /// Held by work its node's cluster manager runs that Gantry did not
    /// place (a Slurm job submitted there directly): taken, not free.
    pub held_outside: bool,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
