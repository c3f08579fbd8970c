//! Isolation on the node and a way into instances: each node's runtime and
//! credential rotation, join tokens bound to one node, users' SSH keys,
//! the image catalog, and what an order asks of access (keys, ports, image).

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

/// Adds each column to `table`, one statement each (SQLite's way).
async fn add_columns(
    manager: &SchemaManager<'_>,
    table: impl IntoIden + Copy,
    columns: Vec<ColumnDef>,
) -> Result<(), DbErr> {
    for mut column in columns {
        manager
            .alter_table(
                Table::alter()
                    .table(table)
                    .add_column(&mut column)
                    .to_owned(),
            )
            .await?;
    }
    Ok(())
}

async fn drop_columns(
    manager: &SchemaManager<'_>,
    table: impl IntoIden + Copy,
    columns: &[&'static str],
) -> Result<(), DbErr> {
    for column in columns {
        manager
            .alter_table(
                Table::alter()
                    .table(table)
                    .drop_column(Alias::new(*column))
                    .to_owned(),
            )
            .await?;
    }
    Ok(())
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        add_columns(
            manager,
            Nodes::Table,
            vec![
                string_len_null(Nodes::Runtime, 16),
                string_len_null(Nodes::CredentialNextHash, 64),
                boolean(Nodes::CredentialRotate).default(false).to_owned(),
            ],
        )
        .await?;
        add_columns(
            manager,
            JoinTokens::Table,
            vec![string_len_null(JoinTokens::NodeName, 64)],
        )
        .await?;
        add_columns(
            manager,
            Orders::Table,
            vec![
                text_null(Orders::SshKeyIds),
                text_null(Orders::Ports),
                uuid_null(Orders::ImageId),
            ],
        )
        .await?;
        manager
            .create_table(
                Table::create()
                    .table(SshKeys::Table)
                    .col(pk_uuid(SshKeys::Id))
                    .col(uuid(SshKeys::UserId))
                    .col(string_len(SshKeys::Name, 64))
                    .col(string_len(SshKeys::Algorithm, 32))
                    .col(string_len(SshKeys::Fingerprint, 64))
                    .col(text(SshKeys::PublicKey))
                    .col(timestamp_with_time_zone(SshKeys::CreatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .from(SshKeys::Table, SshKeys::UserId)
                            .to(Users::Table, Users::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_ssh_keys_user_fingerprint")
                    .table(SshKeys::Table)
                    .col(SshKeys::UserId)
                    .col(SshKeys::Fingerprint)
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(Images::Table)
                    .col(pk_uuid(Images::Id))
                    .col(string_len_uniq(Images::Name, 64))
                    .col(string_len(Images::Reference, 512))
                    .col(text(Images::Description))
                    .col(boolean(Images::IsDefault).default(false))
                    .col(timestamp_with_time_zone(Images::CreatedAt))
                    .col(timestamp_with_time_zone(Images::UpdatedAt))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(Images::Table).to_owned())
            .await?;
        manager
            .drop_table(Table::drop().table(SshKeys::Table).to_owned())
            .await?;
        drop_columns(
            manager,
            Orders::Table,
            &["image_id", "ports", "ssh_key_ids"],
        )
        .await?;
        drop_columns(manager, JoinTokens::Table, &["node_name"]).await?;
        drop_columns(
            manager,
            Nodes::Table,
            &["credential_rotate", "credential_next_hash", "runtime"],
        )
        .await
    }
}

#[derive(DeriveIden, Clone, Copy)]
enum Nodes {
    Table,
    Runtime,
    CredentialNextHash,
    CredentialRotate,
}

#[derive(DeriveIden, Clone, Copy)]
enum JoinTokens {
    Table,
    NodeName,
}

#[derive(DeriveIden, Clone, Copy)]
enum Orders {
    Table,
    SshKeyIds,
    Ports,
    ImageId,
}

#[derive(DeriveIden)]
enum Users {
    Table,
    Id,
}

#[derive(DeriveIden)]
enum SshKeys {
    Table,
    Id,
    UserId,
    Name,
    Algorithm,
    Fingerprint,
    PublicKey,
    CreatedAt,
}

#[derive(DeriveIden)]
enum Images {
    Table,
    Id,
    Name,
    Reference,
    Description,
    IsDefault,
    CreatedAt,
    UpdatedAt,
}
