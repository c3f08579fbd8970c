//! Private networks: one per organization and region, carried between
//! nodes by VXLAN under a network identifier of its own; every workload on
//! a node with a fabric address gets an address on its organization's.

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
                    .table(PrivateNetworks::Table)
                    .col(uuid(PrivateNetworks::Id).primary_key())
                    .col(uuid(PrivateNetworks::OrgId))
                    .col(uuid(PrivateNetworks::RegionId))
                    .col(integer(PrivateNetworks::Vni))
                    .col(string_len(PrivateNetworks::Cidr, 18))
                    .col(integer(PrivateNetworks::NextHost))
                    .col(timestamp_with_time_zone(PrivateNetworks::CreatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .from(PrivateNetworks::Table, PrivateNetworks::OrgId)
                            .to(Organizations::Table, Organizations::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("private_networks_org_region")
                    .table(PrivateNetworks::Table)
                    .col(PrivateNetworks::OrgId)
                    .col(PrivateNetworks::RegionId)
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("private_networks_vni")
                    .table(PrivateNetworks::Table)
                    .col(PrivateNetworks::Vni)
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Allocations::Table)
                    .add_column(string_len_null(Allocations::PrivateAddress, 15))
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Nodes::Table)
                    .add_column(string_len_null(Nodes::FabricAddress, 15))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Nodes::Table)
                    .drop_column(Nodes::FabricAddress)
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Allocations::Table)
                    .drop_column(Allocations::PrivateAddress)
                    .to_owned(),
            )
            .await?;
        manager
            .drop_table(Table::drop().table(PrivateNetworks::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum PrivateNetworks {
    Table,
    Id,
    OrgId,
    RegionId,
    Vni,
    Cidr,
    NextHost,
    CreatedAt,
}

#[derive(DeriveIden)]
enum Allocations {
    Table,
    PrivateAddress,
}

#[derive(DeriveIden)]
enum Nodes {
    Table,
    FabricAddress,
}

#[derive(DeriveIden)]
enum Organizations {
    Table,
    Id,
}
