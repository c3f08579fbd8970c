use sea_orm::entity::prelude::*;

use gantry_types::classes::HistoryMetric;

/// One series' mean over one sampling interval: a fleet figure the
/// scheduling leader saw, by metric and subject (a GPU model, an
/// organization's id, or empty for the whole fleet).
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "history_samples")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub metric: HistoryMetric,
    #[sea_orm(primary_key, auto_increment = false)]
    pub subject: String,
    /// The interval's start, in seconds since the Unix epoch.
    #[sea_orm(primary_key, auto_increment = false)]
    pub at: i64,
    pub value: f64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
