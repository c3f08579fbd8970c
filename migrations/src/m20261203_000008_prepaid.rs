//! Prepaid accounts: a balance ledger of top-ups and of rated usage drawn
//! from it as it is metered; an account that runs dry refuses new orders
//! and, after a warning period, has its non-production work stopped.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

fn columns() -> Vec<ColumnDef> {
    vec![
        boolean(BillingAccounts::Prepaid).default(false).to_owned(),
        timestamp_with_time_zone_null(BillingAccounts::DrawnUntil),
        timestamp_with_time_zone_null(BillingAccounts::ExhaustedAt),
    ]
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
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
        manager
            .create_table(
                Table::create()
                    .table(BalanceEntries::Table)
                    .col(pk_uuid(BalanceEntries::Id))
                    .col(uuid(BalanceEntries::OrgId))
                    .col(string_len(BalanceEntries::Kind, 16))
                    .col(big_integer(BalanceEntries::AmountMicros))
                    .col(timestamp_with_time_zone_null(BalanceEntries::PeriodStart))
                    .col(timestamp_with_time_zone_null(BalanceEntries::PeriodEnd))
                    .col(string_len_null(BalanceEntries::Reason, 500))
                    .col(uuid_null(BalanceEntries::Author))
                    .col(timestamp_with_time_zone(BalanceEntries::CreatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .from(BalanceEntries::Table, BalanceEntries::OrgId)
                            .to(Organizations::Table, Organizations::Id)
                            .on_delete(ForeignKeyAction::Restrict),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_balance_entries_org")
                    .table(BalanceEntries::Table)
                    .col(BalanceEntries::OrgId)
                    .col(BalanceEntries::CreatedAt)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(BalanceEntries::Table).to_owned())
            .await?;
        for column in [
            BillingAccounts::ExhaustedAt,
            BillingAccounts::DrawnUntil,
            BillingAccounts::Prepaid,
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
enum Organizations {
    Table,
    Id,
}

#[derive(DeriveIden)]
enum BillingAccounts {
    Table,
    Prepaid,
    /// Usage whose spans start before this is drawn from the balance.
    DrawnUntil,
    /// When the balance last ran out; cleared by a top-up.
    ExhaustedAt,
}

#[derive(DeriveIden)]
enum BalanceEntries {
    Table,
    Id,
    OrgId,
    /// `top_up` or `usage`.
    Kind,
    /// Positive for a top-up, negative for usage drawn.
    AmountMicros,
    /// For usage: the spans drawn.
    PeriodStart,
    PeriodEnd,
    Reason,
    Author,
    CreatedAt,
}
