//! Tenancy and access: users, organizations, memberships, projects, API keys,
//! the audit log and stored idempotent responses.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

const ORG_ROLES: [&str; 5] = ["owner", "admin", "member", "viewer", "billing"];
/// An API key may carry every organization role except `owner`: ownership
/// belongs to people.
const API_KEY_ROLES: [&str; 4] = ["admin", "member", "viewer", "billing"];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(Users::Table)
                    .col(pk_uuid(Users::Id))
                    .col(string_len_uniq(Users::Email, 254))
                    .col(string_len(Users::Name, 200))
                    .col(string(Users::PasswordHash))
                    .col(boolean(Users::IsOperator).default(false))
                    .col(timestamp_with_time_zone(Users::CreatedAt))
                    .col(timestamp_with_time_zone(Users::UpdatedAt))
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(Organizations::Table)
                    .col(pk_uuid(Organizations::Id))
                    .col(string_len(Organizations::Name, 200))
                    .col(timestamp_with_time_zone(Organizations::CreatedAt))
                    .col(timestamp_with_time_zone(Organizations::UpdatedAt))
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(Memberships::Table)
                    .col(uuid(Memberships::OrgId))
                    .col(uuid(Memberships::UserId))
                    .col(
                        string_len(Memberships::Role, 16)
                            .check(Expr::col(Memberships::Role).is_in(ORG_ROLES)),
                    )
                    .col(timestamp_with_time_zone(Memberships::CreatedAt))
                    .col(timestamp_with_time_zone(Memberships::UpdatedAt))
                    .primary_key(
                        Index::create()
                            .col(Memberships::OrgId)
                            .col(Memberships::UserId),
                    )
                    .foreign_key(
                        ForeignKey::create()
                            .from(Memberships::Table, Memberships::OrgId)
                            .to(Organizations::Table, Organizations::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .foreign_key(
                        ForeignKey::create()
                            .from(Memberships::Table, Memberships::UserId)
                            .to(Users::Table, Users::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_memberships_user")
                    .table(Memberships::Table)
                    .col(Memberships::UserId)
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(Projects::Table)
                    .col(pk_uuid(Projects::Id))
                    .col(uuid(Projects::OrgId))
                    .col(string_len(Projects::Name, 100))
                    .col(string_len(Projects::Description, 1000).default(""))
                    .col(timestamp_with_time_zone(Projects::CreatedAt))
                    .col(timestamp_with_time_zone(Projects::UpdatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .from(Projects::Table, Projects::OrgId)
                            .to(Organizations::Table, Organizations::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("uq_projects_org_name")
                    .table(Projects::Table)
                    .col(Projects::OrgId)
                    .col(Projects::Name)
                    .unique()
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(ApiKeys::Table)
                    .col(pk_uuid(ApiKeys::Id))
                    .col(uuid(ApiKeys::OrgId))
                    .col(string_len(ApiKeys::Name, 100))
                    .col(
                        string_len(ApiKeys::Role, 16)
                            .check(Expr::col(ApiKeys::Role).is_in(API_KEY_ROLES)),
                    )
                    .col(string_len(ApiKeys::SecretHash, 64))
                    .col(uuid_null(ApiKeys::CreatedBy))
                    .col(timestamp_with_time_zone(ApiKeys::CreatedAt))
                    .col(timestamp_with_time_zone_null(ApiKeys::ExpiresAt))
                    .col(timestamp_with_time_zone_null(ApiKeys::LastUsedAt))
                    .col(timestamp_with_time_zone_null(ApiKeys::RevokedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .from(ApiKeys::Table, ApiKeys::OrgId)
                            .to(Organizations::Table, Organizations::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .foreign_key(
                        ForeignKey::create()
                            .from(ApiKeys::Table, ApiKeys::CreatedBy)
                            .to(Users::Table, Users::Id)
                            .on_delete(ForeignKeyAction::SetNull),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_api_keys_org")
                    .table(ApiKeys::Table)
                    .col(ApiKeys::OrgId)
                    .col(ApiKeys::Id)
                    .to_owned(),
            )
            .await?;

        // The audit log keeps no foreign keys: its rows must outlive the users,
        // keys and organizations they mention.
        manager
            .create_table(
                Table::create()
                    .table(AuditLog::Table)
                    .col(pk_uuid(AuditLog::Id))
                    .col(uuid_null(AuditLog::OrgId))
                    .col(string_len(AuditLog::ActorKind, 16))
                    .col(uuid_null(AuditLog::ActorId))
                    .col(string_len(AuditLog::Action, 64))
                    .col(string_len(AuditLog::TargetType, 32))
                    .col(string_len_null(AuditLog::TargetId, 64))
                    .col(text(AuditLog::Details))
                    .col(string_len(AuditLog::RequestId, 64))
                    .col(string_len(AuditLog::SourceAddress, 64))
                    .col(timestamp_with_time_zone(AuditLog::CreatedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_audit_log_org")
                    .table(AuditLog::Table)
                    .col(AuditLog::OrgId)
                    .col(AuditLog::Id)
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(IdempotencyKeys::Table)
                    .col(string_len(IdempotencyKeys::Principal, 64))
                    .col(string_len(IdempotencyKeys::Key, 255))
                    .col(string_len(IdempotencyKeys::Method, 8))
                    .col(string_len(IdempotencyKeys::Path, 512))
                    .col(string_len(IdempotencyKeys::RequestHash, 64))
                    .col(small_integer_null(IdempotencyKeys::ResponseStatus))
                    .col(text_null(IdempotencyKeys::ResponseBody))
                    .col(timestamp_with_time_zone(IdempotencyKeys::CreatedAt))
                    .primary_key(
                        Index::create()
                            .col(IdempotencyKeys::Principal)
                            .col(IdempotencyKeys::Key),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_idempotency_keys_created")
                    .table(IdempotencyKeys::Table)
                    .col(IdempotencyKeys::CreatedAt)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            IdempotencyKeys::Table.into_iden(),
            AuditLog::Table.into_iden(),
            ApiKeys::Table.into_iden(),
            Projects::Table.into_iden(),
            Memberships::Table.into_iden(),
            Organizations::Table.into_iden(),
            Users::Table.into_iden(),
        ] {
            manager
                .drop_table(Table::drop().table(table).to_owned())
                .await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden)]
enum Users {
    Table,
    Id,
    Email,
    Name,
    PasswordHash,
    IsOperator,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum Organizations {
    Table,
    Id,
    Name,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum Memberships {
    Table,
    OrgId,
    UserId,
    Role,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum Projects {
    Table,
    Id,
    OrgId,
    Name,
    Description,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum ApiKeys {
    Table,
    Id,
    OrgId,
    Name,
    Role,
    SecretHash,
    CreatedBy,
    CreatedAt,
    ExpiresAt,
    LastUsedAt,
    RevokedAt,
}

#[derive(DeriveIden)]
enum AuditLog {
    Table,
    Id,
    OrgId,
    ActorKind,
    ActorId,
    Action,
    TargetType,
    TargetId,
    Details,
    RequestId,
    SourceAddress,
    CreatedAt,
}

#[derive(DeriveIden)]
enum IdempotencyKeys {
    Table,
    Principal,
    Key,
    Method,
    Path,
    RequestHash,
    ResponseStatus,
    ResponseBody,
    CreatedAt,
}
