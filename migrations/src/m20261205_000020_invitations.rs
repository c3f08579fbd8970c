//! Invitations: an organization's admin asks someone to join by email
//! before they have an account; signing up with that email makes them a
//! member with the role they were invited to. An invitation is used once,
//! can be revoked, and lapses after its time.

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
                    .table(Invitations::Table)
                    .col(pk_uuid(Invitations::Id))
                    .col(uuid(Invitations::OrgId))
                    .col(string_len(Invitations::Email, 254))
                    .col(string_len(Invitations::Role, 16))
                    .col(uuid_null(Invitations::InvitedBy))
                    .col(timestamp_with_time_zone(Invitations::CreatedAt))
                    .col(timestamp_with_time_zone(Invitations::ExpiresAt))
                    .col(timestamp_with_time_zone_null(Invitations::AcceptedAt))
                    .col(timestamp_with_time_zone_null(Invitations::RevokedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .from(Invitations::Table, Invitations::OrgId)
                            .to(Organizations::Table, Organizations::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_invitations_email")
                    .table(Invitations::Table)
                    .col(Invitations::Email)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(Invitations::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum Invitations {
    Table,
    Id,
    OrgId,
    Email,
    Role,
    InvitedBy,
    CreatedAt,
    ExpiresAt,
    AcceptedAt,
    RevokedAt,
}

#[derive(DeriveIden)]
enum Organizations {
    Table,
    Id,
}
