use sea_orm::entity::prelude::*;

/// An organization's billing terms; absent means none.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "billing_accounts")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub org_id: Uuid,
    /// A standing discount on usage, in thousandths.
    pub discount_permille: i32,
    pub updated_at: DateTimeUtc,
    pub monthly_budget_micros: Option<i64>,
    /// Refuse new non-production orders once the budget is spent.
    pub hard_cap: bool,
    /// The month `month_spend_micros` is of.
    pub spend_month: Option<DateTimeUtc>,
    pub month_spend_micros: i64,
    /// The highest threshold (50, 80, 100) already alerted this month.
    pub alerted_percent: i32,
    /// Usage is drawn from a prepaid balance as it is metered.
    pub prepaid: bool,
    /// Usage whose spans start before this is drawn from the balance.
    pub drawn_until: Option<DateTimeUtc>,
    /// When the balance last ran out; cleared by a top-up.
    pub exhausted_at: Option<DateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
