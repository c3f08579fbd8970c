//! Images tenants choose: an order may name an OCI reference instead of a
//! catalog image, from the registries and repositories operators allow;
//! organizations keep credentials for their registries, encrypted.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Orders::Table)
                    .add_column(string_len_null(Orders::ImageReference, 512))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(AllowedImagePrefixes::Table)
                    .col(string_len(AllowedImagePrefixes::Prefix, 512).primary_key())
                    .col(timestamp_with_time_zone(AllowedImagePrefixes::CreatedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(RegistryCredentials::Table)
                    .col(uuid(RegistryCredentials::Id).primary_key())
                    .col(uuid(RegistryCredentials::OrgId))
                    .col(string_len(RegistryCredentials::Registry, 255))
                    .col(string_len(RegistryCredentials::Username, 255))
                    .col(text(RegistryCredentials::Secret))
                    .col(uuid_null(RegistryCredentials::CreatedBy))
                    .col(timestamp_with_time_zone(RegistryCredentials::CreatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .from(RegistryCredentials::Table, RegistryCredentials::OrgId)
                            .to(Organizations::Table, Organizations::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("registry_credentials_org_registry")
                    .table(RegistryCredentials::Table)
                    .col(RegistryCredentials::OrgId)
                    .col(RegistryCredentials::Registry)
                    .unique()
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(RegistryCredentials::Table).to_owned())
            .await?;
        manager
            .drop_table(Table::drop().table(AllowedImagePrefixes::Table).to_owned())
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Orders::Table)
                    .drop_column(Orders::ImageReference)
                    .to_owned(),
            )
            .await
    }
}

#[derive(DeriveIden)]
enum Orders {
    Table,
    ImageReference,
}

#[derive(DeriveIden)]
enum AllowedImagePrefixes {
    Table,
    Prefix,
    CreatedAt,
}

#[derive(DeriveIden)]
enum RegistryCredentials {
    Table,
    Id,
    OrgId,
    Registry,
    Username,
    Secret,
    CreatedBy,
    CreatedAt,
}

#[derive(DeriveIden)]
enum Organizations {
    Table,
    Id,
}
