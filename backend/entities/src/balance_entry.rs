use sea_orm::entity::prelude::*;

use gantry_types::classes::BalanceKind;

/// A movement of an organization's prepaid balance.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "balance_entries")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub org_id: Uuid,
    pub kind: BalanceKind,
    /// Positive for a top-up, negative for usage drawn.
    pub amount_micros: i64,
    /// For usage: the spans drawn.
    pub period_start: Option<DateTimeUtc>,
    pub period_end: Option<DateTimeUtc>,
    pub reason: Option<String>,
    pub author: Option<Uuid>,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
