//! Why a node is out of service: the operator's words when it was cordoned
//! or drained, or what the control plane saw when it marked it unhealthy,
//! so the next operator (and a cluster manager fronted by Gantry) can tell.

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
                    .table(Nodes::Table)
                    .add_column(string_len_null(Nodes::StateReason, 500))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(Nodes::Table)
                    .drop_column(Nodes::StateReason)
                    .to_owned(),
            )
            .await
    }
}

#[derive(DeriveIden)]
enum Nodes {
    Table,
    StateReason,
}
