use sea_orm::entity::prelude::*;

use gantry_types::classes::{PricingClass, UsageKind};

/// A span of one allocation's use of its GPUs: at most an hour, never
/// across an hour boundary (UTC), so hour-aligned ranges and days are exact.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "usage_records")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub org_id: Uuid,
    pub project_id: Option<Uuid>,
    pub order_id: Uuid,
    pub allocation_id: Uuid,
    pub node_id: Uuid,
    pub region_id: Uuid,
    pub gpu_model_id: Uuid,
    pub instance_type_id: Uuid,
    pub pricing_class: PricingClass,
    /// `YYYY-MM-DD` (UTC) of `period_start`.
    pub usage_day: String,
    pub period_start: DateTimeUtc,
    pub period_end: DateTimeUtc,
    pub gpus: i32,
    /// The share of each GPU, in thousandths: GPU-seconds are
    /// `gpus × seconds × gpu_milli ÷ 1000`.
    pub gpu_milli: i32,
    pub seconds: i64,
    /// Of `seconds`, those when a provider fault had the allocation down:
    /// measured, not billed.
    pub excluded_seconds: i64,
    pub kind: UsageKind,
    /// 0 for the metered record of a span, 1, 2, … for its corrections.
    pub seq: i32,
    /// Why an operator corrected it.
    pub reason: Option<String>,
    pub author: Option<Uuid>,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
