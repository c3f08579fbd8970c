//! Why each attempt of an order was stopped (a drain, a preemption, a lost
//! node, a cancel…), so its tenant can read every stop and move on the
//! order's timeline after its reason in the queue has been replaced.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Allocations::Table)
                    .add_column(string_len_null(Allocations::StopCause, 16))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Allocations::Table)
                    .drop_column(Allocations::StopCause)
                    .to_owned(),
            )
            .await
    }
}

#[derive(DeriveIden)]
enum Allocations {
    Table,
    StopCause,
}
