//! The fleet over time: the scheduling leader's figures downsampled to one
//! row per series and interval, kept for a retention period, so the
//! console charts the last week without a Prometheus. Raw GPU telemetry is
//! pruned by age too, which needs an index on its time.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(HistorySamples::Table)
                    .col(string_len(HistorySamples::Metric, 40))
                    .col(string_len(HistorySamples::Subject, 80))
                    .col(big_integer(HistorySamples::At))
                    .col(double(HistorySamples::Value))
                    .primary_key(
                        Index::create()
                            .col(HistorySamples::Metric)
                            .col(HistorySamples::Subject)
                            .col(HistorySamples::At),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_history_samples_at")
                    .table(HistorySamples::Table)
                    .col(HistorySamples::At)
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_gpu_telemetry_sampled_at")
                    .table(GpuTelemetry::Table)
                    .col(GpuTelemetry::SampledAt)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_index(
                Index::drop()
                    .name("idx_gpu_telemetry_sampled_at")
                    .table(GpuTelemetry::Table)
                    .to_owned(),
            )
            .await?;
        manager
            .drop_table(Table::drop().table(HistorySamples::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum HistorySamples {
    Table,
    Metric,
    Subject,
    At,
    Value,
}

#[derive(DeriveIden)]
enum GpuTelemetry {
    Table,
    SampledAt,
}
