//! Beside a waiting order's estimated start, how far it can be trusted; and
//! whether an order's work saves its progress when told to stop, so the
//! scheduler may move it to defragment.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // One column per statement: SQLite adds no more at once.
        for column in [
            string_len_null(Orders::EstimateConfidence, 16),
            boolean(Orders::Checkpointable).default(false).to_owned(),
        ] {
            manager
                .alter_table(
                    Table::alter()
                        .table(Orders::Table)
                        .add_column(column)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for column in [Orders::Checkpointable, Orders::EstimateConfidence] {
            manager
                .alter_table(
                    Table::alter()
                        .table(Orders::Table)
                        .drop_column(column)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden)]
enum Orders {
    Table,
    EstimateConfidence,
    Checkpointable,
}
