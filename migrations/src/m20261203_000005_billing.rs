//! Billing: per-organization terms, invoices and their line items.
//!
//! A finalized invoice is never changed again; its lines are kept as they
//! were rated, so history reads the same after any later price change.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(BillingAccounts::Table)
                    .col(pk_uuid(BillingAccounts::OrgId))
                    .col(integer(BillingAccounts::DiscountPermille).default(0))
                    .col(timestamp_with_time_zone(BillingAccounts::UpdatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .from(BillingAccounts::Table, BillingAccounts::OrgId)
                            .to(Organizations::Table, Organizations::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(Invoices::Table)
                    .col(pk_uuid(Invoices::Id))
                    .col(uuid(Invoices::OrgId))
                    .col(timestamp_with_time_zone(Invoices::PeriodStart))
                    .col(timestamp_with_time_zone(Invoices::PeriodEnd))
                    .col(string_len(Invoices::Status, 16))
                    .col(string_len(Invoices::Currency, 3))
                    .col(big_integer(Invoices::SubtotalMicros))
                    .col(big_integer(Invoices::DiscountMicros))
                    .col(big_integer(Invoices::CreditsMicros))
                    .col(big_integer(Invoices::TotalMicros))
                    .col(timestamp_with_time_zone(Invoices::RatedAt))
                    .col(timestamp_with_time_zone_null(Invoices::FinalizedAt))
                    .col(timestamp_with_time_zone_null(Invoices::PaidAt))
                    .col(timestamp_with_time_zone_null(Invoices::VoidedAt))
                    .col(timestamp_with_time_zone(Invoices::CreatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .from(Invoices::Table, Invoices::OrgId)
                            .to(Organizations::Table, Organizations::Id)
                            .on_delete(ForeignKeyAction::Restrict),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_invoices_org_period")
                    .table(Invoices::Table)
                    .col(Invoices::OrgId)
                    .col(Invoices::PeriodStart)
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(InvoiceLines::Table)
                    .col(pk_uuid(InvoiceLines::Id))
                    .col(uuid(InvoiceLines::InvoiceId))
                    .col(integer(InvoiceLines::Position))
                    .col(string_len(InvoiceLines::Kind, 16))
                    .col(string_len(InvoiceLines::Description, 300))
                    .col(uuid_null(InvoiceLines::InstanceTypeId))
                    .col(uuid_null(InvoiceLines::RegionId))
                    .col(string_len_null(InvoiceLines::PricingClass, 16))
                    .col(big_integer_null(InvoiceLines::HourlyMicros))
                    .col(integer_null(InvoiceLines::PricePermille))
                    .col(big_integer(InvoiceLines::QuantitySeconds))
                    .col(big_integer(InvoiceLines::GpuSeconds))
                    .col(big_integer(InvoiceLines::AmountMicros))
                    .col(string_len_null(InvoiceLines::Reason, 500))
                    .col(uuid_null(InvoiceLines::Author))
                    .foreign_key(
                        ForeignKey::create()
                            .from(InvoiceLines::Table, InvoiceLines::InvoiceId)
                            .to(Invoices::Table, Invoices::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_invoice_lines_invoice")
                    .table(InvoiceLines::Table)
                    .col(InvoiceLines::InvoiceId)
                    .col(InvoiceLines::Position)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            InvoiceLines::Table.into_iden(),
            Invoices::Table.into_iden(),
            BillingAccounts::Table.into_iden(),
        ] {
            manager
                .drop_table(Table::drop().table(table).to_owned())
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
    OrgId,
    /// A standing discount on usage, in thousandths.
    DiscountPermille,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum Invoices {
    Table,
    Id,
    OrgId,
    PeriodStart,
    PeriodEnd,
    /// `draft`, `finalized`, `paid` or `void`.
    Status,
    Currency,
    SubtotalMicros,
    DiscountMicros,
    CreditsMicros,
    TotalMicros,
    /// When its usage lines were last rated.
    RatedAt,
    FinalizedAt,
    PaidAt,
    VoidedAt,
    CreatedAt,
}

#[derive(DeriveIden)]
enum InvoiceLines {
    Table,
    Id,
    InvoiceId,
    Position,
    /// `usage`, `downtime` (measured, not billed), `discount` or
    /// `adjustment`.
    Kind,
    Description,
    InstanceTypeId,
    RegionId,
    PricingClass,
    /// The price per instance-hour in force.
    HourlyMicros,
    /// The share of it charged (off-peak multipliers), in thousandths.
    PricePermille,
    /// Instance-seconds.
    QuantitySeconds,
    GpuSeconds,
    AmountMicros,
    Reason,
    Author,
}
