//! Shared storage: the distributed file system an operator declares for a
//! region, where each `shared` volume is a directory; and the range of
//! node ids each organization's files on it are stored under, the same on
//! every node, so what one node's workload writes another's owns.

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
                    .table(SharedFileSystems::Table)
                    .col(uuid(SharedFileSystems::RegionId).primary_key())
                    .col(string_len(SharedFileSystems::Kind, 16))
                    .col(string_len(SharedFileSystems::MountPath, 255))
                    .col(big_integer(SharedFileSystems::FirstId))
                    .col(big_integer_null(SharedFileSystems::FreeBytes))
                    .col(timestamp_with_time_zone(SharedFileSystems::CreatedAt))
                    .col(timestamp_with_time_zone(SharedFileSystems::UpdatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .from(SharedFileSystems::Table, SharedFileSystems::RegionId)
                            .to(Regions::Table, Regions::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(SharedOwners::Table)
                    .col(uuid(SharedOwners::RegionId))
                    .col(uuid(SharedOwners::OrgId))
                    .col(integer(SharedOwners::Slot))
                    .primary_key(
                        Index::create()
                            .col(SharedOwners::RegionId)
                            .col(SharedOwners::OrgId),
                    )
                    .foreign_key(
                        ForeignKey::create()
                            .from(SharedOwners::Table, SharedOwners::RegionId)
                            .to(Regions::Table, Regions::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .foreign_key(
                        ForeignKey::create()
                            .from(SharedOwners::Table, SharedOwners::OrgId)
                            .to(Organizations::Table, Organizations::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("shared_owners_slot")
                    .table(SharedOwners::Table)
                    .col(SharedOwners::RegionId)
                    .col(SharedOwners::Slot)
                    .unique()
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(SharedOwners::Table).to_owned())
            .await?;
        manager
            .drop_table(Table::drop().table(SharedFileSystems::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum SharedFileSystems {
    Table,
    RegionId,
    Kind,
    MountPath,
    FirstId,
    FreeBytes,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum SharedOwners {
    Table,
    RegionId,
    OrgId,
    Slot,
}

#[derive(DeriveIden)]
enum Regions {
    Table,
    Id,
}

#[derive(DeriveIden)]
enum Organizations {
    Table,
    Id,
}
