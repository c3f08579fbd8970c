use sea_orm::entity::prelude::*;

use gantry_types::classes::PriorityClass;

/// What a priority class is promised.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "sla_policies")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub priority_class: PriorityClass,
    /// Hundredths of a percent: 9990 is 99.90 %.
    pub availability_target_permyriad: i32,
    pub queue_wait_target_seconds: Option<i64>,
    /// JSON `[{below_permyriad, credit_percent}]`.
    pub credit_tiers: String,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
