//! Two things a Slurm region needs. GPUs held by work Gantry did not
//! place: on a node the cluster also runs others' jobs on, the GPUs those
//! hold are taken, and the scheduler must not plan on them. And retries
//! with backoff: how many times an attempt's submission was tried, and
//! when the next try is due after one Slurm refused or did not answer.
//! And how much of each output file of a running job has been read into
//! its log.

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
            .await?;
        // SQLite adds one column per statement.
        for mut column in [
            integer(SlurmJobs::Tries).default(1).to_owned(),
            timestamp_with_time_zone_null(SlurmJobs::RetryAt),
            big_integer(SlurmJobs::OutRead).default(0).to_owned(),
            big_integer(SlurmJobs::ErrRead).default(0).to_owned(),
        ] {
            manager
                .alter_table(
                    Table::alter()
                        .table(SlurmJobs::Table)
                        .add_column(&mut column)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for column in [
            SlurmJobs::ErrRead,
            SlurmJobs::OutRead,
            SlurmJobs::RetryAt,
            SlurmJobs::Tries,
        ] {
            manager
                .alter_table(
                    Table::alter()
                        .table(SlurmJobs::Table)
                        .drop_column(column)
                        .to_owned(),
                )
                .await?;
        }
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

#[derive(DeriveIden)]
enum SlurmJobs {
    Table,
    Tries,
    RetryAt,
    OutRead,
    ErrRead,
}
