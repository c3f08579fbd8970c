use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "quotas")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub org_id: Uuid,
    /// `None`: the whole organization.
    pub project_id: Option<Uuid>,
    pub gpu_model_id: Uuid,
    /// `None`: every region together.
    pub region_id: Option<Uuid>,
    pub guaranteed_gpus: i32,
    /// `None`: no limit beyond the cluster.
    pub max_gpus: Option<i32>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
