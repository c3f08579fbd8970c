//! On PostgreSQL the change-log trigger also notifies the channel
//! `gantry_changes`, delivered when the change commits, with the writing
//! connection's application name and the table: replicas other than the
//! writer learn of new work, cancels and releases at once instead of at
//! their next poll. PostgreSQL folds identical notifications of one
//! transaction into one. SQLite has no notifications; nothing changes there.

use sea_orm::DbBackend;
use sea_orm_migration::prelude::*;

use crate::m20261203_000012_change_log::TRIGGERS;
use crate::triggers::define_function;

#[derive(DeriveMigrationName)]
pub struct Migration;

const NOTIFY: &str = "PERFORM pg_notify('gantry_changes', \
                      current_setting('application_name') || ' ' || TG_TABLE_NAME)";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DbBackend::Postgres {
            return Ok(());
        }
        let statement = format!("{}; {NOTIFY}", TRIGGERS.statement);
        define_function(manager.get_connection(), TRIGGERS.function, &statement).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DbBackend::Postgres {
            return Ok(());
        }
        define_function(
            manager.get_connection(),
            TRIGGERS.function,
            TRIGGERS.statement,
        )
        .await
    }
}
