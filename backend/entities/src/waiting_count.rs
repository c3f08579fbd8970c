use sea_orm::entity::prelude::*;

/// How many orders of an organization (and project, when set) wait, as of
/// the last fold of the moves.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "waiting_counts")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub org_id: Uuid,
    pub project_id: Option<Uuid>,
    pub orders: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
