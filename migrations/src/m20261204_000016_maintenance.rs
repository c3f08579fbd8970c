//! Maintenance windows: an operator holds every GPU of a node over a window,
//! the way a reservation holds its GPUs, so work is kept off it (or stopped
//! at the window's start) while it is serviced. Logged for the scheduling
//! leader like reservations.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

use crate::triggers::Triggers;

#[derive(DeriveMigrationName)]
pub struct Migration;

const TRIGGERS: Triggers<'static> = Triggers {
    tables: &[(
        "maintenance_windows",
        &["status", "starts_at", "ends_at", "node_id"],
    )],
    ..crate::m20261203_000012_change_log::TRIGGERS
};

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(MaintenanceWindows::Table)
                    .col(pk_uuid(MaintenanceWindows::Id))
                    .col(uuid(MaintenanceWindows::NodeId))
                    .col(timestamp_with_time_zone(MaintenanceWindows::StartsAt))
                    .col(timestamp_with_time_zone(MaintenanceWindows::EndsAt))
                    .col(text(MaintenanceWindows::Reason))
                    .col(string_len(MaintenanceWindows::Status, 16))
                    .col(uuid_null(MaintenanceWindows::CreatedBy))
                    .col(timestamp_with_time_zone(MaintenanceWindows::CreatedAt))
                    .col(timestamp_with_time_zone(MaintenanceWindows::UpdatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .from(MaintenanceWindows::Table, MaintenanceWindows::NodeId)
                            .to(Nodes::Table, Nodes::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        for (name, columns) in [
            (
                "idx_maintenance_status_ends",
                vec![MaintenanceWindows::Status, MaintenanceWindows::EndsAt],
            ),
            ("idx_maintenance_node", vec![MaintenanceWindows::NodeId]),
        ] {
            let mut index = Index::create();
            index.name(name).table(MaintenanceWindows::Table);
            for column in columns {
                index.col(column);
            }
            manager.create_index(index.to_owned()).await?;
        }
        // The change log's function (which also notifies) is called as an
        // earlier migration left it.
        TRIGGERS
            .attach(manager.get_connection(), manager.get_database_backend())
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(MaintenanceWindows::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum MaintenanceWindows {
    Table,
    Id,
    NodeId,
    StartsAt,
    EndsAt,
    Reason,
    Status,
    CreatedBy,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum Nodes {
    Table,
    Id,
}
