//! Shared GPUs: instance types that sell a fraction of a GPU or one MIG
//! instance, the MIG instances an agent found on each GPU, and the shares
//! live allocations hold. Whole GPUs stay claimed in `gpu_claims`, one row
//! per GPU; a shared GPU has one `gpu_shares` row per allocation on it, and
//! a MIG instance is held by one allocation at most, which its unique
//! index makes certain whatever the code above it does.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

use crate::triggers::Triggers;

#[derive(DeriveMigrationName)]
pub struct Migration;

/// A GPU's MIG layout decides which shared types fit a node, which
/// admission reads from the versioned catalog: a change to it raises the
/// version like a new GPU does.
const CATALOG_TRIGGERS: Triggers<'static> = Triggers {
    name: "catalog_version_mig",
    tables: &[("gpus", &["mig_enabled", "mig_devices"])],
    ..crate::m20261203_000013_catalog_version::TRIGGERS
};

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // SQLite adds one column per statement.
        let columns: [(DynIden, ColumnDef); 8] = [
            (
                InstanceTypes::Table.into_iden(),
                integer_null(InstanceTypes::GpuMilli),
            ),
            (
                InstanceTypes::Table.into_iden(),
                string_len_null(InstanceTypes::MigProfile, 16),
            ),
            (Orders::Table.into_iden(), integer_null(Orders::GpuMilli)),
            (
                Orders::Table.into_iden(),
                string_len_null(Orders::MigProfile, 16),
            ),
            (Gpus::Table.into_iden(), text_null(Gpus::MigDevices)),
            (
                Allocations::Table.into_iden(),
                integer(Allocations::GpuMilli).default(1000).take(),
            ),
            (
                Allocations::Table.into_iden(),
                string_len_null(Allocations::MigDevice, 64),
            ),
            (
                UsageRecords::Table.into_iden(),
                integer(UsageRecords::GpuMilli).default(1000).take(),
            ),
        ];
        for (table, mut column) in columns {
            manager
                .alter_table(
                    Table::alter()
                        .table(table)
                        .add_column(&mut column)
                        .to_owned(),
                )
                .await?;
        }
        manager
            .create_table(
                Table::create()
                    .table(GpuShares::Table)
                    .col(uuid(GpuShares::GpuId))
                    .col(uuid(GpuShares::AllocationId))
                    .col(uuid(GpuShares::OrderId))
                    .col(integer(GpuShares::Units))
                    .col(string_len_null(GpuShares::MigDevice, 64))
                    .primary_key(
                        Index::create()
                            .col(GpuShares::GpuId)
                            .col(GpuShares::AllocationId),
                    )
                    .foreign_key(
                        ForeignKey::create()
                            .from(GpuShares::Table, GpuShares::GpuId)
                            .to(Gpus::Table, Gpus::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .foreign_key(
                        ForeignKey::create()
                            .from(GpuShares::Table, GpuShares::AllocationId)
                            .to(Allocations::Table, Allocations::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_gpu_shares_allocation")
                    .table(GpuShares::Table)
                    .col(GpuShares::AllocationId)
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_gpu_shares_mig_device")
                    .table(GpuShares::Table)
                    .col(GpuShares::MigDevice)
                    .unique()
                    .to_owned(),
            )
            .await?;
        CATALOG_TRIGGERS
            .attach(manager.get_connection(), manager.get_database_backend())
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        CATALOG_TRIGGERS
            .detach(manager.get_connection(), manager.get_database_backend())
            .await?;
        manager
            .drop_table(Table::drop().table(GpuShares::Table).to_owned())
            .await?;
        let columns: [(DynIden, DynIden); 8] = [
            (
                InstanceTypes::Table.into_iden(),
                InstanceTypes::GpuMilli.into_iden(),
            ),
            (
                InstanceTypes::Table.into_iden(),
                InstanceTypes::MigProfile.into_iden(),
            ),
            (Orders::Table.into_iden(), Orders::GpuMilli.into_iden()),
            (Orders::Table.into_iden(), Orders::MigProfile.into_iden()),
            (Gpus::Table.into_iden(), Gpus::MigDevices.into_iden()),
            (
                Allocations::Table.into_iden(),
                Allocations::GpuMilli.into_iden(),
            ),
            (
                Allocations::Table.into_iden(),
                Allocations::MigDevice.into_iden(),
            ),
            (
                UsageRecords::Table.into_iden(),
                UsageRecords::GpuMilli.into_iden(),
            ),
        ];
        for (table, column) in columns {
            manager
                .alter_table(Table::alter().table(table).drop_column(column).to_owned())
                .await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden)]
enum InstanceTypes {
    Table,
    GpuMilli,
    MigProfile,
}

#[derive(DeriveIden)]
enum Orders {
    Table,
    GpuMilli,
    MigProfile,
}

#[derive(DeriveIden)]
enum Gpus {
    Table,
    Id,
    MigDevices,
}

#[derive(DeriveIden)]
enum Allocations {
    Table,
    Id,
    GpuMilli,
    MigDevice,
}

#[derive(DeriveIden)]
enum UsageRecords {
    Table,
    GpuMilli,
}

#[derive(DeriveIden)]
enum GpuShares {
    Table,
    GpuId,
    AllocationId,
    OrderId,
    Units,
    MigDevice,
}
