use sea_orm::entity::prelude::*;

/// One order of an organization (and project) entering (`delta` 1) or
/// leaving (−1) a waiting status, written by a trigger in the changing
/// transaction and folded into `waiting_counts` by the leader.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "waiting_moves")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub org_id: Uuid,
    pub project_id: Option<Uuid>,
    pub delta: i32,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
