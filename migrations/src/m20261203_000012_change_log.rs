//! The change log: one row per change to a row the scheduler plans with,
//! written by triggers in the same transaction as the change, so no code
//! path that writes those tables can forget it. The scheduling leader
//! follows the log from its last sequence number instead of reloading the
//! whole cluster and queue every cycle.

use sea_orm::DbBackend;
use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

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

/// The PostgreSQL trigger function every logged table shares.
const PG_FUNCTION: &str = "gantry_log_change";

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
        let db = manager.get_connection();
        match manager.get_database_backend() {
            DbBackend::Postgres => {
                db.execute_unprepared(&format!(
                    "CREATE FUNCTION {PG_FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$ \
                     BEGIN \
                       INSERT INTO change_log (entity, entity_id) VALUES \
                         (TG_TABLE_NAME, CASE WHEN TG_OP = 'DELETE' THEN OLD.id ELSE NEW.id END); \
                       RETURN NULL; \
                     END $$"
                ))
                .await?;
                for (table, columns) in LOGGED {
                    let update = update_event(columns);
                    db.execute_unprepared(&format!(
                        "CREATE TRIGGER {table}_change_log AFTER INSERT OR {update} OR DELETE \
                         ON {table} FOR EACH ROW EXECUTE FUNCTION {PG_FUNCTION}()"
                    ))
                    .await?;
                }
            }
            _ => {
                for (table, columns) in LOGGED {
                    let update = update_event(columns);
                    for (suffix, event, row) in [
                        ("insert", "INSERT".to_owned(), "NEW"),
                        ("update", update, "NEW"),
                        ("delete", "DELETE".to_owned(), "OLD"),
                    ] {
                        db.execute_unprepared(&format!(
                            "CREATE TRIGGER {table}_change_log_{suffix} AFTER {event} ON {table} \
                             BEGIN INSERT INTO change_log (entity, entity_id) \
                             VALUES ('{table}', {row}.id); END"
                        ))
                        .await?;
                    }
                }
            }
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        match manager.get_database_backend() {
            DbBackend::Postgres => {
                for (table, _) in LOGGED {
                    db.execute_unprepared(&format!("DROP TRIGGER {table}_change_log ON {table}"))
                        .await?;
                }
                db.execute_unprepared(&format!("DROP FUNCTION {PG_FUNCTION}()"))
                    .await?;
            }
            _ => {
                for (table, _) in LOGGED {
                    for suffix in ["insert", "update", "delete"] {
                        db.execute_unprepared(&format!("DROP TRIGGER {table}_change_log_{suffix}"))
                            .await?;
                    }
                }
            }
        }
        manager
            .drop_table(Table::drop().table(ChangeLog::Table).to_owned())
            .await
    }
}

/// The trigger event for an update of `columns` (any column when empty).
fn update_event(columns: &[&str]) -> String {
    if columns.is_empty() {
        "UPDATE".to_owned()
    } else {
        format!("UPDATE OF {}", columns.join(", "))
    }
}

#[derive(DeriveIden)]
enum ChangeLog {
    Table,
    Seq,
    Entity,
    EntityId,
}
