use sea_orm::entity::prelude::*;

/// One line a job wrote, as its node agent shipped it.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "job_logs")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub order_id: Uuid,
    pub attempt: i32,
    pub node_id: Option<Uuid>,
    /// `stdout` or `stderr`.
    pub stream: String,
    pub line: String,
    pub at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
