//! Volumes: storage an organization owns apart from any order, attached by
//! orders at a path of their choosing. A `local` volume lives on one node,
//! so orders that attach it run there; nodes say how much room they have
//! for volumes. Each volume's sizes over time are kept for billing, priced
//! per GiB-month by region and kind in versions like instance prices, and
//! invoice lines name the volume they charge for. Organizations may have a
//! storage quota per region (or everywhere) and kind.

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
                    .table(Volumes::Table)
                    .col(uuid(Volumes::Id).primary_key())
                    .col(uuid(Volumes::OrgId))
                    .col(uuid_null(Volumes::ProjectId))
                    .col(string_len(Volumes::Name, 63))
                    .col(uuid(Volumes::RegionId))
                    .col(string_len(Volumes::Kind, 16))
                    .col(big_integer(Volumes::SizeGib))
                    .col(string_len(Volumes::State, 16))
                    .col(string_len_null(Volumes::StateReason, 500))
                    .col(uuid_null(Volumes::NodeId))
                    .col(big_integer_null(Volumes::UsedBytes))
                    .col(big_integer(Volumes::ProvisionedGib))
                    .col(timestamp_with_time_zone(Volumes::CreatedAt))
                    .col(timestamp_with_time_zone(Volumes::UpdatedAt))
                    .col(timestamp_with_time_zone_null(Volumes::DeletedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .from(Volumes::Table, Volumes::OrgId)
                            .to(Organizations::Table, Organizations::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("volumes_org")
                    .table(Volumes::Table)
                    .col(Volumes::OrgId)
                    .col(Volumes::Id)
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("volumes_node")
                    .table(Volumes::Table)
                    .col(Volumes::NodeId)
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(OrderVolumes::Table)
                    .col(uuid(OrderVolumes::OrderId))
                    .col(uuid(OrderVolumes::VolumeId))
                    .col(string_len(OrderVolumes::MountPath, 255))
                    .col(boolean(OrderVolumes::ReadOnly))
                    .primary_key(
                        Index::create()
                            .col(OrderVolumes::OrderId)
                            .col(OrderVolumes::VolumeId),
                    )
                    .foreign_key(
                        ForeignKey::create()
                            .from(OrderVolumes::Table, OrderVolumes::OrderId)
                            .to(Orders::Table, Orders::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .foreign_key(
                        ForeignKey::create()
                            .from(OrderVolumes::Table, OrderVolumes::VolumeId)
                            .to(Volumes::Table, Volumes::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("order_volumes_volume")
                    .table(OrderVolumes::Table)
                    .col(OrderVolumes::VolumeId)
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Orders::Table)
                    .add_column(uuid_null(Orders::NodeId))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(VolumeSizes::Table)
                    .col(uuid(VolumeSizes::Id).primary_key())
                    .col(uuid(VolumeSizes::VolumeId))
                    .col(uuid(VolumeSizes::OrgId))
                    .col(big_integer(VolumeSizes::SizeGib))
                    .col(timestamp_with_time_zone(VolumeSizes::StartsAt))
                    .col(timestamp_with_time_zone_null(VolumeSizes::EndsAt))
                    .foreign_key(
                        ForeignKey::create()
                            .from(VolumeSizes::Table, VolumeSizes::VolumeId)
                            .to(Volumes::Table, Volumes::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("volume_sizes_org")
                    .table(VolumeSizes::Table)
                    .col(VolumeSizes::OrgId)
                    .col(VolumeSizes::StartsAt)
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(StoragePrices::Table)
                    .col(uuid(StoragePrices::Id).primary_key())
                    .col(uuid_null(StoragePrices::RegionId))
                    .col(string_len(StoragePrices::Kind, 16))
                    .col(big_integer(StoragePrices::GibMonthMicros))
                    .col(timestamp_with_time_zone(StoragePrices::EffectiveFrom))
                    .col(timestamp_with_time_zone(StoragePrices::CreatedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(InvoiceLines::Table)
                    .add_column(uuid_null(InvoiceLines::VolumeId))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(StorageQuotas::Table)
                    .col(uuid(StorageQuotas::Id).primary_key())
                    .col(uuid(StorageQuotas::OrgId))
                    .col(uuid_null(StorageQuotas::RegionId))
                    .col(string_len(StorageQuotas::Kind, 16))
                    .col(big_integer(StorageQuotas::MaxGib))
                    .col(timestamp_with_time_zone(StorageQuotas::CreatedAt))
                    .col(timestamp_with_time_zone(StorageQuotas::UpdatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .from(StorageQuotas::Table, StorageQuotas::OrgId)
                            .to(Organizations::Table, Organizations::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Nodes::Table)
                    .add_column(big_integer_null(Nodes::VolumeFreeBytes))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(StorageQuotas::Table).to_owned())
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(InvoiceLines::Table)
                    .drop_column(InvoiceLines::VolumeId)
                    .to_owned(),
            )
            .await?;
        manager
            .drop_table(Table::drop().table(StoragePrices::Table).to_owned())
            .await?;
        manager
            .drop_table(Table::drop().table(VolumeSizes::Table).to_owned())
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Nodes::Table)
                    .drop_column(Nodes::VolumeFreeBytes)
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Orders::Table)
                    .drop_column(Orders::NodeId)
                    .to_owned(),
            )
            .await?;
        manager
            .drop_table(Table::drop().table(OrderVolumes::Table).to_owned())
            .await?;
        manager
            .drop_table(Table::drop().table(Volumes::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum Volumes {
    Table,
    Id,
    OrgId,
    ProjectId,
    Name,
    RegionId,
    Kind,
    SizeGib,
    State,
    StateReason,
    NodeId,
    UsedBytes,
    ProvisionedGib,
    CreatedAt,
    UpdatedAt,
    DeletedAt,
}

#[derive(DeriveIden)]
enum OrderVolumes {
    Table,
    OrderId,
    VolumeId,
    MountPath,
    ReadOnly,
}

#[derive(DeriveIden)]
enum Orders {
    Table,
    Id,
    NodeId,
}

#[derive(DeriveIden)]
enum Nodes {
    Table,
    VolumeFreeBytes,
}

#[derive(DeriveIden)]
enum Organizations {
    Table,
    Id,
}

#[derive(DeriveIden)]
enum VolumeSizes {
    Table,
    Id,
    VolumeId,
    OrgId,
    SizeGib,
    StartsAt,
    EndsAt,
}

#[derive(DeriveIden)]
enum StoragePrices {
    Table,
    Id,
    RegionId,
    Kind,
    GibMonthMicros,
    EffectiveFrom,
    CreatedAt,
}

#[derive(DeriveIden)]
enum InvoiceLines {
    Table,
    VolumeId,
}

#[derive(DeriveIden)]
enum StorageQuotas {
    Table,
    Id,
    OrgId,
    RegionId,
    Kind,
    MaxGib,
    CreatedAt,
    UpdatedAt,
}
