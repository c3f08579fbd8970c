//! Capacity: the catalog (regions, GPU models, instance types, versioned
//! prices), the inventory (nodes and their GPUs), quotas, orders, the
//! allocations that hold exact GPUs, and the scheduler's leader lease.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

const PRICING_CLASSES: [&str; 3] = ["on_demand", "spot", "reserved"];
const PRIORITY_CLASSES: [&str; 4] = ["preemptible", "batch", "standard", "production"];
const WORKLOAD_CLASSES: [&str; 6] = [
    "training",
    "fine_tuning",
    "inference",
    "dev",
    "batch",
    "hpo",
];
const ORDER_STATUSES: [&str; 8] = [
    "queued",
    "scheduled",
    "provisioning",
    "running",
    "completed",
    "failed",
    "cancelled",
    "preempted",
];
const NODE_STATES: [&str; 4] = ["ready", "cordoned", "draining", "unhealthy"];
const DRIVERS: [&str; 2] = ["simulated", "agent"];
const ALLOCATION_STATES: [&str; 3] = ["active", "stopping", "released"];

fn timestamps(table: &mut TableCreateStatement, created: impl IntoIden, updated: impl IntoIden) {
    table
        .col(timestamp_with_time_zone(created))
        .col(timestamp_with_time_zone(updated));
}

fn fk(
    from_table: impl IntoIden,
    from_col: impl IntoIden,
    to_table: impl IntoIden,
    to_col: impl IntoIden,
    on_delete: ForeignKeyAction,
) -> ForeignKeyCreateStatement {
    ForeignKey::create()
        .from(from_table, from_col)
        .to(to_table, to_col)
        .on_delete(on_delete)
        .to_owned()
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let mut regions = Table::create();
        regions
            .table(Regions::Table)
            .col(pk_uuid(Regions::Id))
            .col(string_len_uniq(Regions::Name, 64))
            .col(string_len(Regions::DisplayName, 200))
            .col(string_len(Regions::TimeZone, 64))
            .col(text(Regions::ComplianceTags))
            .col(small_integer_null(Regions::OffPeakStartHour))
            .col(small_integer_null(Regions::OffPeakEndHour))
            .col(integer_null(Regions::OffPeakMultiplierPermille));
        timestamps(&mut regions, Regions::CreatedAt, Regions::UpdatedAt);
        manager.create_table(regions).await?;

        let mut models = Table::create();
        models
            .table(GpuModels::Table)
            .col(pk_uuid(GpuModels::Id))
            .col(string_len_uniq(GpuModels::Name, 64))
            .col(string_len(GpuModels::Vendor, 64))
            .col(integer(GpuModels::MemoryGib))
            .col(string_len(GpuModels::Interconnect, 32))
            .col(boolean(GpuModels::MigCapable));
        timestamps(&mut models, GpuModels::CreatedAt, GpuModels::UpdatedAt);
        manager.create_table(models).await?;

        let mut types = Table::create();
        types
            .table(InstanceTypes::Table)
            .col(pk_uuid(InstanceTypes::Id))
            .col(string_len_uniq(InstanceTypes::Name, 64))
            .col(uuid(InstanceTypes::GpuModelId))
            .col(integer(InstanceTypes::GpusPerNode))
            .col(integer(InstanceTypes::Vcpus))
            .col(integer(InstanceTypes::MemoryGib))
            .col(integer(InstanceTypes::DiskGib))
            .foreign_key(&mut fk(
                InstanceTypes::Table,
                InstanceTypes::GpuModelId,
                GpuModels::Table,
                GpuModels::Id,
                ForeignKeyAction::Restrict,
            ));
        timestamps(
            &mut types,
            InstanceTypes::CreatedAt,
            InstanceTypes::UpdatedAt,
        );
        manager.create_table(types).await?;

        // Prices are versions: a change inserts a row with a later
        // `effective_from`, so usage is always rated at the price in force.
        manager
            .create_table(
                Table::create()
                    .table(Prices::Table)
                    .col(pk_uuid(Prices::Id))
                    .col(uuid(Prices::InstanceTypeId))
                    .col(uuid_null(Prices::RegionId))
                    .col(
                        string_len(Prices::PricingClass, 16)
                            .check(Expr::col(Prices::PricingClass).is_in(PRICING_CLASSES)),
                    )
                    .col(
                        big_integer(Prices::HourlyMicros)
                            .check(Expr::col(Prices::HourlyMicros).gte(0)),
                    )
                    .col(timestamp_with_time_zone(Prices::EffectiveFrom))
                    .col(timestamp_with_time_zone(Prices::CreatedAt))
                    .foreign_key(&mut fk(
                        Prices::Table,
                        Prices::InstanceTypeId,
                        InstanceTypes::Table,
                        InstanceTypes::Id,
                        ForeignKeyAction::Cascade,
                    ))
                    .foreign_key(&mut fk(
                        Prices::Table,
                        Prices::RegionId,
                        Regions::Table,
                        Regions::Id,
                        ForeignKeyAction::Cascade,
                    ))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_prices_type_class")
                    .table(Prices::Table)
                    .col(Prices::InstanceTypeId)
                    .col(Prices::PricingClass)
                    .col(Prices::EffectiveFrom)
                    .to_owned(),
            )
            .await?;

        let mut nodes = Table::create();
        nodes
            .table(Nodes::Table)
            .col(pk_uuid(Nodes::Id))
            .col(string_len_uniq(Nodes::Name, 100))
            .col(uuid(Nodes::RegionId))
            .col(string_len(Nodes::Rack, 64))
            .col(uuid_null(Nodes::InstanceTypeId))
            .col(big_integer(Nodes::CpuMilli))
            .col(big_integer(Nodes::MemoryMib))
            .col(text(Nodes::Labels))
            .col(string_len(Nodes::State, 16).check(Expr::col(Nodes::State).is_in(NODE_STATES)))
            .col(string_len(Nodes::Driver, 16).check(Expr::col(Nodes::Driver).is_in(DRIVERS)))
            .col(string_len_null(Nodes::CredentialHash, 64))
            .col(timestamp_with_time_zone_null(Nodes::LastHeartbeatAt))
            .foreign_key(&mut fk(
                Nodes::Table,
                Nodes::RegionId,
                Regions::Table,
                Regions::Id,
                ForeignKeyAction::Restrict,
            ))
            .foreign_key(&mut fk(
                Nodes::Table,
                Nodes::InstanceTypeId,
                InstanceTypes::Table,
                InstanceTypes::Id,
                ForeignKeyAction::SetNull,
            ));
        timestamps(&mut nodes, Nodes::CreatedAt, Nodes::UpdatedAt);
        manager.create_table(nodes).await?;

        manager
            .create_table(
                Table::create()
                    .table(Gpus::Table)
                    .col(pk_uuid(Gpus::Id))
                    .col(uuid(Gpus::NodeId))
                    .col(integer(Gpus::Index))
                    .col(uuid(Gpus::GpuModelId))
                    .col(string_len(Gpus::HardwareUuid, 64))
                    .col(big_integer(Gpus::MemoryMib))
                    .col(integer(Gpus::NvlinkDomain))
                    .col(boolean(Gpus::Healthy))
                    .col(boolean(Gpus::MigEnabled))
                    .foreign_key(&mut fk(
                        Gpus::Table,
                        Gpus::NodeId,
                        Nodes::Table,
                        Nodes::Id,
                        ForeignKeyAction::Cascade,
                    ))
                    .foreign_key(&mut fk(
                        Gpus::Table,
                        Gpus::GpuModelId,
                        GpuModels::Table,
                        GpuModels::Id,
                        ForeignKeyAction::Restrict,
                    ))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("uq_gpus_node_index")
                    .table(Gpus::Table)
                    .col(Gpus::NodeId)
                    .col(Gpus::Index)
                    .unique()
                    .to_owned(),
            )
            .await?;

        let mut quotas = Table::create();
        quotas
            .table(Quotas::Table)
            .col(pk_uuid(Quotas::Id))
            .col(uuid(Quotas::OrgId))
            .col(uuid_null(Quotas::ProjectId))
            .col(uuid(Quotas::GpuModelId))
            .col(uuid_null(Quotas::RegionId))
            .col(integer(Quotas::GuaranteedGpus).check(Expr::col(Quotas::GuaranteedGpus).gte(0)))
            .col(integer_null(Quotas::MaxGpus))
            .foreign_key(&mut fk(
                Quotas::Table,
                Quotas::OrgId,
                Organizations::Table,
                Organizations::Id,
                ForeignKeyAction::Cascade,
            ))
            .foreign_key(&mut fk(
                Quotas::Table,
                Quotas::ProjectId,
                Projects::Table,
                Projects::Id,
                ForeignKeyAction::Cascade,
            ))
            .foreign_key(&mut fk(
                Quotas::Table,
                Quotas::GpuModelId,
                GpuModels::Table,
                GpuModels::Id,
                ForeignKeyAction::Cascade,
            ))
            .foreign_key(&mut fk(
                Quotas::Table,
                Quotas::RegionId,
                Regions::Table,
                Regions::Id,
                ForeignKeyAction::Cascade,
            ));
        timestamps(&mut quotas, Quotas::CreatedAt, Quotas::UpdatedAt);
        manager.create_table(quotas).await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_quotas_org")
                    .table(Quotas::Table)
                    .col(Quotas::OrgId)
                    .to_owned(),
            )
            .await?;

        let mut orders = Table::create();
        orders
            .table(Orders::Table)
            .col(pk_uuid(Orders::Id))
            .col(uuid(Orders::OrgId))
            .col(uuid_null(Orders::ProjectId))
            .col(string_len(Orders::CreatedByKind, 16))
            .col(uuid_null(Orders::CreatedBy))
            .col(string_len(Orders::Kind, 16))
            .col(uuid(Orders::InstanceTypeId))
            .col(uuid(Orders::GpuModelId))
            .col(integer(Orders::GpusPerNode))
            .col(integer(Orders::NodeCount).check(Expr::col(Orders::NodeCount).gte(1)))
            .col(uuid_null(Orders::RegionId))
            .col(
                string_len(Orders::PriorityClass, 16)
                    .check(Expr::col(Orders::PriorityClass).is_in(PRIORITY_CLASSES)),
            )
            .col(
                string_len(Orders::PricingClass, 16)
                    .check(Expr::col(Orders::PricingClass).is_in(PRICING_CLASSES)),
            )
            .col(
                string_len(Orders::WorkloadClass, 16)
                    .check(Expr::col(Orders::WorkloadClass).is_in(WORKLOAD_CLASSES)),
            )
            .col(big_integer_null(Orders::DurationSeconds))
            .col(timestamp_with_time_zone_null(Orders::Deadline))
            .col(
                string_len(Orders::Status, 16)
                    .check(Expr::col(Orders::Status).is_in(ORDER_STATUSES)),
            )
            .col(text_null(Orders::PendingReason))
            .col(timestamp_with_time_zone_null(Orders::EstimatedStart))
            .col(text_null(Orders::FailureReason))
            .col(text_null(Orders::Access))
            .col(integer(Orders::Attempts).default(0))
            .col(string_len_null(Orders::IdempotencyKey, 400))
            .col(timestamp_with_time_zone_null(Orders::StartedAt))
            .col(timestamp_with_time_zone_null(Orders::EndedAt))
            .foreign_key(&mut fk(
                Orders::Table,
                Orders::OrgId,
                Organizations::Table,
                Organizations::Id,
                ForeignKeyAction::Cascade,
            ))
            .foreign_key(&mut fk(
                Orders::Table,
                Orders::ProjectId,
                Projects::Table,
                Projects::Id,
                ForeignKeyAction::SetNull,
            ))
            .foreign_key(&mut fk(
                Orders::Table,
                Orders::InstanceTypeId,
                InstanceTypes::Table,
                InstanceTypes::Id,
                ForeignKeyAction::Restrict,
            ))
            .foreign_key(&mut fk(
                Orders::Table,
                Orders::GpuModelId,
                GpuModels::Table,
                GpuModels::Id,
                ForeignKeyAction::Restrict,
            ))
            .foreign_key(&mut fk(
                Orders::Table,
                Orders::RegionId,
                Regions::Table,
                Regions::Id,
                ForeignKeyAction::Restrict,
            ));
        timestamps(&mut orders, Orders::CreatedAt, Orders::UpdatedAt);
        manager.create_table(orders).await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_orders_org")
                    .table(Orders::Table)
                    .col(Orders::OrgId)
                    .col(Orders::Id)
                    .to_owned(),
            )
            .await?;
        // A retried create finds the order its first attempt committed, even
        // when the server died before it could answer.
        manager
            .create_index(
                Index::create()
                    .name("uq_orders_org_idempotency_key")
                    .table(Orders::Table)
                    .col(Orders::OrgId)
                    .col(Orders::IdempotencyKey)
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_orders_status")
                    .table(Orders::Table)
                    .col(Orders::Status)
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(Allocations::Table)
                    .col(pk_uuid(Allocations::Id))
                    .col(uuid(Allocations::OrderId))
                    .col(uuid(Allocations::OrgId))
                    .col(uuid(Allocations::NodeId))
                    .col(text(Allocations::GpuIndices))
                    .col(
                        string_len(Allocations::State, 16)
                            .check(Expr::col(Allocations::State).is_in(ALLOCATION_STATES)),
                    )
                    .col(timestamp_with_time_zone_null(Allocations::StopAt))
                    .col(timestamp_with_time_zone(Allocations::CreatedAt))
                    .col(timestamp_with_time_zone_null(Allocations::ReleasedAt))
                    .foreign_key(&mut fk(
                        Allocations::Table,
                        Allocations::OrderId,
                        Orders::Table,
                        Orders::Id,
                        ForeignKeyAction::Cascade,
                    ))
                    .foreign_key(&mut fk(
                        Allocations::Table,
                        Allocations::NodeId,
                        Nodes::Table,
                        Nodes::Id,
                        ForeignKeyAction::Cascade,
                    ))
                    .to_owned(),
            )
            .await?;
        for (name, column) in [
            ("idx_allocations_order", Allocations::OrderId),
            ("idx_allocations_state", Allocations::State),
        ] {
            manager
                .create_index(
                    Index::create()
                        .name(name)
                        .table(Allocations::Table)
                        .col(column)
                        .to_owned(),
                )
                .await?;
        }

        // One row per GPU held by a live allocation, keyed by the GPU: the
        // primary key is what makes a double allocation impossible, whatever
        // the code above it does.
        manager
            .create_table(
                Table::create()
                    .table(GpuClaims::Table)
                    .col(pk_uuid(GpuClaims::GpuId))
                    .col(uuid(GpuClaims::AllocationId))
                    .col(uuid(GpuClaims::OrderId))
                    .foreign_key(&mut fk(
                        GpuClaims::Table,
                        GpuClaims::GpuId,
                        Gpus::Table,
                        Gpus::Id,
                        ForeignKeyAction::Cascade,
                    ))
                    .foreign_key(&mut fk(
                        GpuClaims::Table,
                        GpuClaims::AllocationId,
                        Allocations::Table,
                        Allocations::Id,
                        ForeignKeyAction::Cascade,
                    ))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_gpu_claims_allocation")
                    .table(GpuClaims::Table)
                    .col(GpuClaims::AllocationId)
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(Leases::Table)
                    .col(string_len(Leases::Name, 32).primary_key())
                    .col(string_len(Leases::Holder, 64))
                    .col(timestamp_with_time_zone(Leases::ExpiresAt))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            Leases::Table.into_iden(),
            GpuClaims::Table.into_iden(),
            Allocations::Table.into_iden(),
            Orders::Table.into_iden(),
            Quotas::Table.into_iden(),
            Gpus::Table.into_iden(),
            Nodes::Table.into_iden(),
            Prices::Table.into_iden(),
            InstanceTypes::Table.into_iden(),
            GpuModels::Table.into_iden(),
            Regions::Table.into_iden(),
        ] {
            manager
                .drop_table(Table::drop().table(table).to_owned())
                .await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden)]
enum Organizations {
    Table,
    Id,
}

#[derive(DeriveIden)]
enum Projects {
    Table,
    Id,
}

#[derive(DeriveIden)]
enum Regions {
    Table,
    Id,
    Name,
    DisplayName,
    TimeZone,
    ComplianceTags,
    OffPeakStartHour,
    OffPeakEndHour,
    OffPeakMultiplierPermille,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum GpuModels {
    Table,
    Id,
    Name,
    Vendor,
    MemoryGib,
    Interconnect,
    MigCapable,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum InstanceTypes {
    Table,
    Id,
    Name,
    GpuModelId,
    GpusPerNode,
    Vcpus,
    MemoryGib,
    DiskGib,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum Prices {
    Table,
    Id,
    InstanceTypeId,
    RegionId,
    PricingClass,
    HourlyMicros,
    EffectiveFrom,
    CreatedAt,
}

#[derive(DeriveIden)]
enum Nodes {
    Table,
    Id,
    Name,
    RegionId,
    Rack,
    InstanceTypeId,
    CpuMilli,
    MemoryMib,
    Labels,
    State,
    Driver,
    CredentialHash,
    LastHeartbeatAt,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum Gpus {
    Table,
    Id,
    NodeId,
    Index,
    GpuModelId,
    HardwareUuid,
    MemoryMib,
    NvlinkDomain,
    Healthy,
    MigEnabled,
}

#[derive(DeriveIden)]
enum Quotas {
    Table,
    Id,
    OrgId,
    ProjectId,
    GpuModelId,
    RegionId,
    GuaranteedGpus,
    MaxGpus,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum Orders {
    Table,
    Id,
    OrgId,
    ProjectId,
    CreatedByKind,
    CreatedBy,
    Kind,
    InstanceTypeId,
    GpuModelId,
    GpusPerNode,
    NodeCount,
    RegionId,
    PriorityClass,
    PricingClass,
    WorkloadClass,
    DurationSeconds,
    Deadline,
    Status,
    PendingReason,
    EstimatedStart,
    FailureReason,
    Access,
    Attempts,
    IdempotencyKey,
    StartedAt,
    EndedAt,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum Allocations {
    Table,
    Id,
    OrderId,
    OrgId,
    NodeId,
    GpuIndices,
    State,
    StopAt,
    CreatedAt,
    ReleasedAt,
}

#[derive(DeriveIden)]
enum GpuClaims {
    Table,
    GpuId,
    AllocationId,
    OrderId,
}

#[derive(DeriveIden)]
enum Leases {
    Table,
    Name,
    Holder,
    ExpiresAt,
}
