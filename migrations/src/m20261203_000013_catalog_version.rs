//! The catalog's version: one number that every change to what order
//! admission reads (catalog, images, quotas, node sizes and their GPUs)
//! raises, in the changing transaction. A replica keeps that data in memory
//! and reads it again only when the number moved. A single row, rather than
//! the change log, because a row is raised under its lock: a change that
//! commits after a replica read the number always shows a higher one, which
//! a sequence taken at write time and seen at commit does not promise.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

use crate::triggers::Triggers;

#[derive(DeriveMigrationName)]
pub struct Migration;

/// The tables admission reads, and the columns whose update is a change
/// (any column when empty).
const WATCHED: &[(&str, &[&str])] = &[
    ("gpu_models", &[]),
    ("instance_types", &[]),
    ("regions", &[]),
    ("prices", &[]),
    ("images", &[]),
    ("quotas", &[]),
    ("nodes", &["region_id", "cpu_milli", "memory_mib"]),
    ("gpus", &["node_id", "gpu_model_id"]),
];

const RAISE: &str = "UPDATE catalog_version SET version = version + 1";

/// The triggers that raise the version; on PostgreSQL once per statement,
/// so a statement that changes many rows raises it once.
pub(crate) const TRIGGERS: Triggers<'static> = Triggers {
    name: "catalog_version",
    tables: WATCHED,
    function: "gantry_raise_catalog_version",
    statement: RAISE,
    row: false,
    sqlite: |_, _| RAISE.to_owned(),
};

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(CatalogVersion::Table)
                    .col(integer(CatalogVersion::Id).primary_key())
                    .col(big_integer(CatalogVersion::Version))
                    .to_owned(),
            )
            .await?;
        let db = manager.get_connection();
        db.execute_unprepared("INSERT INTO catalog_version (id, version) VALUES (1, 1)")
            .await?;
        TRIGGERS.create(db, manager.get_database_backend()).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        TRIGGERS
            .drop(manager.get_connection(), manager.get_database_backend())
            .await?;
        manager
            .drop_table(Table::drop().table(CatalogVersion::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum CatalogVersion {
    Table,
    Id,
    Version,
}
