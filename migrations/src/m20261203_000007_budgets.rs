//! Spend control: a monthly budget per organization, with alerts as spend
//! crosses its thresholds and an optional hard cap on new non-production
//! orders; the month's spend so far is kept on the account by the
//! scheduling leader.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

fn columns() -> Vec<ColumnDef> {
    vec![
        big_integer_null(BillingAccounts::MonthlyBudgetMicros),
        boolean(BillingAccounts::HardCap).default(false).to_owned(),
        timestamp_with_time_zone_null(BillingAccounts::SpendMonth),
        big_integer(BillingAccounts::MonthSpendMicros)
            .default(0)
            .to_owned(),
        integer(BillingAccounts::AlertedPercent)
            .default(0)
            .to_owned(),
    ]
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // SQLite takes one column per ALTER TABLE.
        for mut column in columns() {
            manager
                .alter_table(
                    Table::alter()
                        .table(BillingAccounts::Table)
                        .add_column(&mut column)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for column in [
            BillingAccounts::AlertedPercent,
            BillingAccounts::MonthSpendMicros,
            BillingAccounts::SpendMonth,
            BillingAccounts::HardCap,
            BillingAccounts::MonthlyBudgetMicros,
        ] {
            manager
                .alter_table(
                    Table::alter()
                        .table(BillingAccounts::Table)
                        .drop_column(column)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden)]
enum BillingAccounts {
    Table,
    MonthlyBudgetMicros,
    /// Refuse new non-production orders once the budget is spent.
    HardCap,
    /// The month `month_spend_micros` is of.
    SpendMonth,
    MonthSpendMicros,
    /// The highest threshold (50, 80, 100) already alerted this month.
    AlertedPercent,
}
