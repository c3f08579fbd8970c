//! Project networks: a project's work may run on a private network of its
//! own, or join another project's, instead of its organization's. A
//! network now belongs to a scope (the organization, or one project) in a
//! region, and each address records the network it is on.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        add(
            manager,
            PrivateNetworks::Table,
            uuid_null(PrivateNetworks::ScopeId),
        )
        .await?;
        add(
            manager,
            PrivateNetworks::Table,
            uuid_null(PrivateNetworks::ProjectId),
        )
        .await?;
        manager
            .exec_stmt(
                Query::update()
                    .table(PrivateNetworks::Table)
                    .value(PrivateNetworks::ScopeId, Expr::col(PrivateNetworks::OrgId))
                    .to_owned(),
            )
            .await?;
        manager
            .drop_index(
                Index::drop()
                    .name("private_networks_org_region")
                    .table(PrivateNetworks::Table)
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("private_networks_scope_region")
                    .table(PrivateNetworks::Table)
                    .col(PrivateNetworks::ScopeId)
                    .col(PrivateNetworks::RegionId)
                    .unique()
                    .to_owned(),
            )
            .await?;
        add(
            manager,
            Allocations::Table,
            uuid_null(Allocations::PrivateNetworkId),
        )
        .await?;
        add(
            manager,
            Projects::Table,
            string_len(Projects::Network, 16)
                .default("organization")
                .to_owned(),
        )
        .await?;
        add(
            manager,
            Projects::Table,
            uuid_null(Projects::NetworkProjectId),
        )
        .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for column in [Projects::NetworkProjectId, Projects::Network] {
            manager
                .alter_table(
                    Table::alter()
                        .table(Projects::Table)
                        .drop_column(column)
                        .to_owned(),
                )
                .await?;
        }
        manager
            .alter_table(
                Table::alter()
                    .table(Allocations::Table)
                    .drop_column(Allocations::PrivateNetworkId)
                    .to_owned(),
            )
            .await?;
        manager
            .drop_index(
                Index::drop()
                    .name("private_networks_scope_region")
                    .table(PrivateNetworks::Table)
                    .to_owned(),
            )
            .await?;
        // Project networks have no place in the old shape.
        manager
            .exec_stmt(
                Query::delete()
                    .from_table(PrivateNetworks::Table)
                    .and_where(Expr::col(PrivateNetworks::ProjectId).is_not_null())
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
        for column in [PrivateNetworks::ProjectId, PrivateNetworks::ScopeId] {
            manager
                .alter_table(
                    Table::alter()
                        .table(PrivateNetworks::Table)
                        .drop_column(column)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }
}

/// Adds `column` to `table` (one column a statement: SQLite's way).
async fn add(
    manager: &SchemaManager<'_>,
    table: impl IntoIden,
    column: ColumnDef,
) -> Result<(), DbErr> {
    manager
        .alter_table(Table::alter().table(table).add_column(column).to_owned())
        .await
}

#[derive(DeriveIden)]
enum PrivateNetworks {
    Table,
    OrgId,
    RegionId,
    ScopeId,
    ProjectId,
}

#[derive(DeriveIden)]
enum Allocations {
    Table,
    PrivateNetworkId,
}

#[derive(DeriveIden)]
enum Projects {
    Table,
    Network,
    NetworkProjectId,
}
