use sea_orm::entity::prelude::*;

use gantry_types::classes::OrderStatus;

/// One order entering (`delta` 1) or leaving (−1) a status, written by a
/// trigger in the changing transaction and folded into
/// `order_status_counts` by the leader.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "order_status_moves")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub status: OrderStatus,
    pub delta: i32,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
