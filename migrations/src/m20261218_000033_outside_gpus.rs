//! GPUs held by work Gantry did not place: on a node a cluster manager
//! fronted by Gantry also runs for others, the GPUs its other jobs hold
//! are taken, and the scheduler must not plan on them.

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
                    .table(Gpus::Table)
                    .add_column(boolean(Gpus::HeldOutside).default(false))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Gpus::Table)
                    .drop_column(Gpus::HeldOutside)
                    .to_owned(),
            )
            .await
    }
}

#[derive(DeriveIden)]
enum Gpus {
    Table,
    HeldOutside,
}
