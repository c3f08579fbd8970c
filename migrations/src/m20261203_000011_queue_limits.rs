//! Limits on how much work an organization (or one of its projects) may
//! have waiting at once, and the index that counts it.

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
                    .table(QueueLimits::Table)
                    .col(pk_uuid(QueueLimits::Id))
                    .col(uuid(QueueLimits::OrgId))
                    .col(uuid_null(QueueLimits::ProjectId))
                    .col(integer(QueueLimits::MaxWaitingOrders))
                    .col(timestamp_with_time_zone(QueueLimits::UpdatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .from(QueueLimits::Table, QueueLimits::OrgId)
                            .to(Organizations::Table, Organizations::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .foreign_key(
                        ForeignKey::create()
                            .from(QueueLimits::Table, QueueLimits::ProjectId)
                            .to(Projects::Table, Projects::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_queue_limits_org")
                    .table(QueueLimits::Table)
                    .col(QueueLimits::OrgId)
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_orders_org_status")
                    .table(Orders::Table)
                    .col(Orders::OrgId)
                    .col(Orders::Status)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(
                Index::drop()
                    .name("idx_orders_org_status")
                    .table(Orders::Table)
                    .to_owned(),
            )
            .await?;
        manager
            .drop_table(Table::drop().table(QueueLimits::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum QueueLimits {
    Table,
    Id,
    OrgId,
    ProjectId,
    MaxWaitingOrders,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum Organizations {
    Table,
    Id,
}

#[derive(DeriveIden)]
enum Projects {
    Table,
    Id,
}

#[derive(DeriveIden)]
enum Orders {
    Table,
    OrgId,
    Status,
}
