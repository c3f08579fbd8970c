use sea_orm::entity::prelude::*;

/// One change to a row the scheduler plans with, written by a trigger in
/// the changing transaction; `seq` grows with every change.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "change_log")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub seq: i64,
    /// The changed row's table.
    pub entity: String,
    /// The changed row's id.
    pub entity_id: Uuid,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
