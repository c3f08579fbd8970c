//! Refresh tokens: a browser session outlives its short access tokens by
//! exchanging a refresh token, kept in an httpOnly cookie, for a new pair.
//! Each is used once: the exchange marks it used and issues the next one
//! of its family (one sign-in). A used token presented again means it was
//! stolen, and the whole family is revoked, as are all of a user's on
//! sign-out of that session or a password change. Only a hash is stored.

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
                    .table(RefreshTokens::Table)
                    .col(pk_uuid(RefreshTokens::Id))
                    .col(uuid(RefreshTokens::UserId))
                    .col(uuid(RefreshTokens::FamilyId))
                    .col(string_len_uniq(RefreshTokens::TokenHash, 64))
                    .col(timestamp_with_time_zone(RefreshTokens::ExpiresAt))
                    .col(timestamp_with_time_zone(RefreshTokens::CreatedAt))
                    .col(timestamp_with_time_zone_null(RefreshTokens::UsedAt))
                    .col(timestamp_with_time_zone_null(RefreshTokens::RevokedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .from(RefreshTokens::Table, RefreshTokens::UserId)
                            .to(Users::Table, Users::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        for (name, column) in [
            ("idx_refresh_tokens_family", RefreshTokens::FamilyId),
            ("idx_refresh_tokens_user", RefreshTokens::UserId),
        ] {
            manager
                .create_index(
                    Index::create()
                        .name(name)
                        .table(RefreshTokens::Table)
                        .col(column)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(RefreshTokens::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum RefreshTokens {
    Table,
    Id,
    UserId,
    FamilyId,
    TokenHash,
    ExpiresAt,
    CreatedAt,
    UsedAt,
    RevokedAt,
}

#[derive(DeriveIden)]
enum Users {
    Table,
    Id,
}
