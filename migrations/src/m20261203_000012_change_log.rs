//! The change log: one row per change to a row the scheduler plans with,
//! written by triggers in the same transaction as the change, so no code
//! path that writes those tables can forget it. The scheduling leader
//! follows the log from its last sequence number instead of reloading the
//! whole cluster and queue every cycle.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

use crate::triggers::Triggers;

#[derive(DeriveMigrationName)]
pub struct Migration;

/// The logged tables, and the columns whose update is a change. An update
/// of any other column (heartbeats, metering marks, output sizes) is not:
/// it would flood the log with rows the scheduler does not read.
const LOGGED: &[(&str, &[&str])] = &[
    ("gpu_models", &[]),
    ("instance_types", &[]),
    ("regions", &[]),
    ("prices", &[]),
    ("quotas", &[]),
    ("gpus", &[]),
    (
        "nodes",
        &[
            "name",
            "region_id",
            "rack",
            "labels",
            "cpu_milli",
            "memory_mib",
            "state",
            "driver",
        ],
    ),
    (
        "orders",
        &[
            "status",
            "pending_reason",
            "estimated_start",
            "attempts",
            "started_at",
            "duration_seconds",
            "deadline",
            "priority_class",
            "workload_class",
            "region_id",
            "project_id",
            "instance_type_id",
            "gpu_model_id",
            "gpus_per_node",
            "node_count",
        ],
    ),
    (
        "allocations",
        &["state", "stop_at", "node_id", "gpu_indices", "order_id"],
    ),
];

/// The triggers that write the log.
pub(crate) const TRIGGERS: Triggers<'static> = Triggers {
    name: "change_log",
    tables: LOGGED,
    function: "gantry_log_change",
    statement: "INSERT INTO change_log (entity, entity_id) VALUES \
                (TG_TABLE_NAME, CASE WHEN TG_OP = 'DELETE' THEN OLD.id ELSE NEW.id END)",
    row: true,
    sqlite: |table, row| {
        format!("INSERT INTO change_log (entity, entity_id) VALUES ('{table}', {row}.id)")
    },
};

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(ChangeLog::Table)
                    .col(big_pk_auto(ChangeLog::Seq))
                    .col(string(ChangeLog::Entity))
                    .col(uuid(ChangeLog::EntityId))
                    .to_owned(),
            )
            .await?;
        TRIGGERS
            .create(manager.get_connection(), manager.get_database_backend())
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        TRIGGERS
            .drop(manager.get_connection(), manager.get_database_backend())
            .await?;
        manager
            .drop_table(Table::drop().table(ChangeLog::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum ChangeLog {
    Table,
    Seq,
    Entity,
    EntityId,
}
