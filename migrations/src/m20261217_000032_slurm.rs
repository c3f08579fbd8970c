//! Slurm regions: how Gantry reaches the Slurm cluster that runs a region's
//! work, and the Slurm job behind each attempt of an order placed there.
//! The job's row is written before `sbatch` is called, under a name that
//! carries the order, so a crash between the two finds the job again
//! instead of submitting it twice.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

const DRIVERS_BEFORE: &str = "'simulated', 'agent'";
const DRIVERS_AFTER: &str = "'simulated', 'agent', 'slurm'";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::checks::allow(
            manager,
            "nodes",
            "driver",
            "simulated",
            DRIVERS_BEFORE,
            DRIVERS_AFTER,
        )
        .await?;
        manager
            .create_table(
                Table::create()
                    .table(SlurmClusters::Table)
                    .col(uuid(SlurmClusters::RegionId).primary_key())
                    .col(string_len(SlurmClusters::Partition, 64))
                    .col(string_len_null(SlurmClusters::Account, 64))
                    .col(string_len_null(SlurmClusters::ConfPath, 255))
                    .col(string_len_null(SlurmClusters::LoginHost, 255))
                    .col(string_len(SlurmClusters::OutputDir, 255))
                    .col(text(SlurmClusters::GresTypes))
                    .col(string_len(SlurmClusters::Access, 8))
                    .col(string_len(SlurmClusters::Users, 24))
                    .col(string_len(SlurmClusters::UserPrefix, 16))
                    .col(text_null(SlurmClusters::Problem))
                    .col(text_null(SlurmClusters::Outside))
                    .col(timestamp_with_time_zone_null(SlurmClusters::SyncedAt))
                    .col(timestamp_with_time_zone(SlurmClusters::CreatedAt))
                    .col(timestamp_with_time_zone(SlurmClusters::UpdatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .from(SlurmClusters::Table, SlurmClusters::RegionId)
                            .to(Regions::Table, Regions::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(SlurmJobs::Table)
                    .col(uuid(SlurmJobs::OrderId))
                    .col(integer(SlurmJobs::Attempt))
                    .col(uuid(SlurmJobs::RegionId))
                    .col(string_len(SlurmJobs::Name, 64))
                    .col(big_integer_null(SlurmJobs::JobId))
                    .col(string_len_null(SlurmJobs::State, 32))
                    .col(text_null(SlurmJobs::Bound))
                    .col(timestamp_with_time_zone(SlurmJobs::SubmittedAt))
                    .col(timestamp_with_time_zone_null(SlurmJobs::StartedAt))
                    .col(timestamp_with_time_zone_null(SlurmJobs::EndedAt))
                    .col(boolean(SlurmJobs::Finished))
                    .primary_key(
                        Index::create()
                            .col(SlurmJobs::OrderId)
                            .col(SlurmJobs::Attempt),
                    )
                    .foreign_key(
                        ForeignKey::create()
                            .from(SlurmJobs::Table, SlurmJobs::OrderId)
                            .to(Orders::Table, Orders::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .foreign_key(
                        ForeignKey::create()
                            .from(SlurmJobs::Table, SlurmJobs::RegionId)
                            .to(Regions::Table, Regions::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("slurm_jobs_unfinished")
                    .table(SlurmJobs::Table)
                    .col(SlurmJobs::RegionId)
                    .col(SlurmJobs::Finished)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(SlurmJobs::Table).to_owned())
            .await?;
        manager
            .drop_table(Table::drop().table(SlurmClusters::Table).to_owned())
            .await?;
        crate::checks::allow(
            manager,
            "nodes",
            "driver",
            "simulated",
            DRIVERS_AFTER,
            DRIVERS_BEFORE,
        )
        .await
    }
}

#[derive(DeriveIden)]
enum SlurmClusters {
    Table,
    RegionId,
    Partition,
    Account,
    ConfPath,
    LoginHost,
    OutputDir,
    GresTypes,
    Access,
    Users,
    UserPrefix,
    Problem,
    Outside,
    SyncedAt,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum SlurmJobs {
    Table,
    OrderId,
    Attempt,
    RegionId,
    Name,
    JobId,
    State,
    Bound,
    SubmittedAt,
    StartedAt,
    EndedAt,
    Finished,
}

#[derive(DeriveIden)]
enum Regions {
    Table,
    Id,
}

#[derive(DeriveIden)]
enum Orders {
    Table,
    Id,
}
