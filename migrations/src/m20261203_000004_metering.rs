//! Metering: when each allocation began running, when a provider fault took
//! it down, how far it has been metered, and the usage records themselves.
//!
//! Usage records are an append-only ledger with no foreign keys: they are
//! billing history and outlive the nodes, orders and catalog rows they name.
//! An operator corrects them with compensating records (`kind` correction,
//! numbered by `seq` after the metered record of the span), never by edits.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // SQLite takes one column per ALTER TABLE.
        for column in [
            Allocations::RunningSince,
            Allocations::DownFrom,
            Allocations::MeteredUntil,
        ] {
            manager
                .alter_table(
                    Table::alter()
                        .table(Allocations::Table)
                        .add_column(timestamp_with_time_zone_null(column))
                        .to_owned(),
                )
                .await?;
        }

        manager
            .create_table(
                Table::create()
                    .table(UsageRecords::Table)
                    .col(pk_uuid(UsageRecords::Id))
                    .col(uuid(UsageRecords::OrgId))
                    .col(uuid_null(UsageRecords::ProjectId))
                    .col(uuid(UsageRecords::OrderId))
                    .col(uuid(UsageRecords::AllocationId))
                    .col(uuid(UsageRecords::NodeId))
                    .col(uuid(UsageRecords::RegionId))
                    .col(uuid(UsageRecords::GpuModelId))
                    .col(uuid(UsageRecords::InstanceTypeId))
                    .col(string_len(UsageRecords::PricingClass, 16))
                    .col(string_len(UsageRecords::UsageDay, 10))
                    .col(timestamp_with_time_zone(UsageRecords::PeriodStart))
                    .col(timestamp_with_time_zone(UsageRecords::PeriodEnd))
                    .col(integer(UsageRecords::Gpus))
                    .col(big_integer(UsageRecords::Seconds))
                    .col(big_integer(UsageRecords::ExcludedSeconds))
                    .col(string_len(UsageRecords::Kind, 16).default("metered"))
                    .col(integer(UsageRecords::Seq).default(0))
                    .col(string_len_null(UsageRecords::Reason, 500))
                    .col(uuid_null(UsageRecords::Author))
                    .col(timestamp_with_time_zone(UsageRecords::CreatedAt))
                    .to_owned(),
            )
            .await?;
        // The natural key: metering the same span twice is a no-op (metered
        // records are always `seq` 0).
        manager
            .create_index(
                Index::create()
                    .name("ux_usage_records_span")
                    .table(UsageRecords::Table)
                    .col(UsageRecords::AllocationId)
                    .col(UsageRecords::PeriodStart)
                    .col(UsageRecords::Seq)
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_usage_records_org_period")
                    .table(UsageRecords::Table)
                    .col(UsageRecords::OrgId)
                    .col(UsageRecords::PeriodStart)
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_usage_records_period")
                    .table(UsageRecords::Table)
                    .col(UsageRecords::PeriodStart)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(UsageRecords::Table).to_owned())
            .await?;
        for column in [
            Allocations::MeteredUntil,
            Allocations::DownFrom,
            Allocations::RunningSince,
        ] {
            manager
                .alter_table(
                    Table::alter()
                        .table(Allocations::Table)
                        .drop_column(column)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden)]
enum Allocations {
    Table,
    RunningSince,
    DownFrom,
    MeteredUntil,
}

#[derive(DeriveIden)]
enum UsageRecords {
    Table,
    Id,
    OrgId,
    ProjectId,
    OrderId,
    AllocationId,
    NodeId,
    RegionId,
    GpuModelId,
    InstanceTypeId,
    PricingClass,
    /// The UTC day (`YYYY-MM-DD`) the span lies in, for grouping alike on
    /// every engine.
    UsageDay,
    PeriodStart,
    PeriodEnd,
    Gpus,
    Seconds,
    /// Of `seconds`, those when a provider fault had the allocation down.
    ExcludedSeconds,
    /// `metered`, or `correction`: a compensating record that excludes its
    /// span of an earlier record from billing.
    Kind,
    /// 0 for the metered record of a span, 1, 2, … for its corrections.
    Seq,
    /// Why an operator corrected it.
    Reason,
    Author,
    CreatedAt,
}
