//! Node agents: join tokens that let an agent register its node, GPU
//! telemetry samples (kept apart from allocations: allocation is not
//! utilization), and node events that SLA reports are measured from.

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
                    .table(JoinTokens::Table)
                    .col(pk_uuid(JoinTokens::Id))
                    .col(string_len(JoinTokens::SecretHash, 64))
                    .col(uuid(JoinTokens::RegionId))
                    .col(uuid_null(JoinTokens::CreatedBy))
                    .col(timestamp_with_time_zone(JoinTokens::CreatedAt))
                    .col(timestamp_with_time_zone(JoinTokens::ExpiresAt))
                    .col(timestamp_with_time_zone_null(JoinTokens::RevokedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .from(JoinTokens::Table, JoinTokens::RegionId)
                            .to(Regions::Table, Regions::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(GpuTelemetry::Table)
                    .col(uuid(GpuTelemetry::NodeId))
                    .col(integer(GpuTelemetry::GpuIndex))
                    .col(timestamp_with_time_zone(GpuTelemetry::SampledAt))
                    .col(small_integer(GpuTelemetry::UtilizationPct))
                    .col(big_integer(GpuTelemetry::MemoryUsedMib))
                    .col(small_integer(GpuTelemetry::TemperatureC))
                    .col(integer(GpuTelemetry::PowerW))
                    .primary_key(
                        Index::create()
                            .col(GpuTelemetry::NodeId)
                            .col(GpuTelemetry::GpuIndex)
                            .col(GpuTelemetry::SampledAt),
                    )
                    .foreign_key(
                        ForeignKey::create()
                            .from(GpuTelemetry::Table, GpuTelemetry::NodeId)
                            .to(Nodes::Table, Nodes::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;

        // Events keep no foreign keys: they must outlive the nodes and
        // orders they mention, as evidence for SLA reports.
        manager
            .create_table(
                Table::create()
                    .table(NodeEvents::Table)
                    .col(pk_uuid(NodeEvents::Id))
                    .col(uuid(NodeEvents::NodeId))
                    .col(string_len(NodeEvents::Kind, 32))
                    .col(uuid_null(NodeEvents::OrderId))
                    .col(uuid_null(NodeEvents::OrgId))
                    .col(text(NodeEvents::Details))
                    .col(timestamp_with_time_zone(NodeEvents::At))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_node_events_org")
                    .table(NodeEvents::Table)
                    .col(NodeEvents::OrgId)
                    .col(NodeEvents::At)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            NodeEvents::Table.into_iden(),
            GpuTelemetry::Table.into_iden(),
            JoinTokens::Table.into_iden(),
        ] {
            manager
                .drop_table(Table::drop().table(table).to_owned())
                .await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden)]
enum Regions {
    Table,
    Id,
}

#[derive(DeriveIden)]
enum Nodes {
    Table,
    Id,
}

#[derive(DeriveIden)]
enum JoinTokens {
    Table,
    Id,
    SecretHash,
    RegionId,
    CreatedBy,
    CreatedAt,
    ExpiresAt,
    RevokedAt,
}

#[derive(DeriveIden)]
enum GpuTelemetry {
    Table,
    NodeId,
    GpuIndex,
    SampledAt,
    UtilizationPct,
    MemoryUsedMib,
    TemperatureC,
    PowerW,
}

#[derive(DeriveIden)]
enum NodeEvents {
    Table,
    Id,
    NodeId,
    Kind,
    OrderId,
    OrgId,
    Details,
    At,
}
