//! Sign-in through OpenID Connect providers: the sign-ins under way (each
//! state used once, with its PKCE verifier and nonce, until it lapses), and
//! the provider accounts linked to users.

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
                    .table(OidcSignIns::Table)
                    .col(string_len(OidcSignIns::State, 64).primary_key())
                    .col(string_len(OidcSignIns::Provider, 64))
                    .col(string_len(OidcSignIns::PkceVerifier, 128))
                    .col(string_len(OidcSignIns::Nonce, 64))
                    .col(string_len(OidcSignIns::Next, 2048))
                    .col(timestamp_with_time_zone(OidcSignIns::ExpiresAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(UserIdentities::Table)
                    .col(string_len(UserIdentities::Provider, 64))
                    .col(string_len(UserIdentities::Subject, 255))
                    .col(uuid(UserIdentities::UserId))
                    .col(timestamp_with_time_zone(UserIdentities::CreatedAt))
                    .primary_key(
                        Index::create()
                            .col(UserIdentities::Provider)
                            .col(UserIdentities::Subject),
                    )
                    .foreign_key(
                        ForeignKey::create()
                            .from(UserIdentities::Table, UserIdentities::UserId)
                            .to(Users::Table, Users::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(UserIdentities::Table).to_owned())
            .await?;
        manager
            .drop_table(Table::drop().table(OidcSignIns::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum OidcSignIns {
    Table,
    State,
    Provider,
    PkceVerifier,
    Nonce,
    Next,
    ExpiresAt,
}

#[derive(DeriveIden)]
enum UserIdentities {
    Table,
    Provider,
    Subject,
    UserId,
    CreatedAt,
}

#[derive(DeriveIden)]
enum Users {
    Table,
    Id,
}
