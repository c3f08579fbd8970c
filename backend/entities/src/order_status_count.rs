use sea_orm::entity::prelude::*;

use gantry_types::classes::OrderStatus;

/// How many orders are in a status, as of the last fold of the moves.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "order_status_counts")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub status: OrderStatus,
    pub orders: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
