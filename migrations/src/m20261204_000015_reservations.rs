//! Capacity reservations: a tenant's exact GPUs held over a window of time,
//! the nodes and GPUs each holds, and the reservation an order runs in.
//! Reservations are logged for the scheduling leader like the other rows
//! it plans with.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

use crate::triggers::Triggers;

#[derive(DeriveMigrationName)]
pub struct Migration;

/// The change log's triggers on reservations, calling its function (which
/// also notifies other replicas): their window and status are what the
/// scheduler reads; their nodes are written with them, once.
const TRIGGERS: Triggers<'static> = Triggers {
    tables: &[("reservations", &["status", "starts_at", "ends_at"])],
    ..crate::m20261203_000012_change_log::TRIGGERS
};

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(Reservations::Table)
                    .col(pk_uuid(Reservations::Id))
                    .col(uuid(Reservations::OrgId))
                    .col(uuid_null(Reservations::ProjectId))
                    .col(string_len(Reservations::Name, 64))
                    .col(uuid(Reservations::InstanceTypeId))
                    .col(uuid(Reservations::GpuModelId))
                    .col(uuid(Reservations::RegionId))
                    .col(integer(Reservations::NodeCount))
                    .col(integer(Reservations::GpusPerNode))
                    .col(timestamp_with_time_zone(Reservations::StartsAt))
                    .col(timestamp_with_time_zone(Reservations::EndsAt))
                    .col(big_integer(Reservations::HourlyMicros))
                    .col(string_len(Reservations::Status, 16))
                    .col(timestamp_with_time_zone(Reservations::BilledUntil))
                    .col(timestamp_with_time_zone_null(Reservations::CancelledAt))
                    .col(big_integer(Reservations::CancellationFeeMicros).default(0))
                    .col(string_len(Reservations::CreatedByKind, 16))
                    .col(uuid_null(Reservations::CreatedBy))
                    .col(timestamp_with_time_zone(Reservations::CreatedAt))
                    .col(timestamp_with_time_zone(Reservations::UpdatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .from(Reservations::Table, Reservations::OrgId)
                            .to(Organizations::Table, Organizations::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .foreign_key(
                        ForeignKey::create()
                            .from(Reservations::Table, Reservations::ProjectId)
                            .to(Projects::Table, Projects::Id)
                            .on_delete(ForeignKeyAction::SetNull),
                    )
                    .foreign_key(
                        ForeignKey::create()
                            .from(Reservations::Table, Reservations::InstanceTypeId)
                            .to(InstanceTypes::Table, InstanceTypes::Id),
                    )
                    .foreign_key(
                        ForeignKey::create()
                            .from(Reservations::Table, Reservations::RegionId)
                            .to(Regions::Table, Regions::Id),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_reservations_org_starts")
                    .table(Reservations::Table)
                    .col(Reservations::OrgId)
                    .col(Reservations::StartsAt)
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_reservations_status_ends")
                    .table(Reservations::Table)
                    .col(Reservations::Status)
                    .col(Reservations::EndsAt)
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(ReservationNodes::Table)
                    .col(pk_uuid(ReservationNodes::Id))
                    .col(uuid(ReservationNodes::ReservationId))
                    .col(uuid(ReservationNodes::NodeId))
                    .col(text(ReservationNodes::GpuIndices))
                    .foreign_key(
                        ForeignKey::create()
                            .from(ReservationNodes::Table, ReservationNodes::ReservationId)
                            .to(Reservations::Table, Reservations::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .foreign_key(
                        ForeignKey::create()
                            .from(ReservationNodes::Table, ReservationNodes::NodeId)
                            .to(Nodes::Table, Nodes::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        for (name, column) in [
            (
                "idx_reservation_nodes_reservation",
                ReservationNodes::ReservationId,
            ),
            ("idx_reservation_nodes_node", ReservationNodes::NodeId),
        ] {
            manager
                .create_index(
                    Index::create()
                        .name(name)
                        .table(ReservationNodes::Table)
                        .col(column)
                        .to_owned(),
                )
                .await?;
        }
        manager
            .alter_table(
                Table::alter()
                    .table(Orders::Table)
                    .add_column(uuid_null(Orders::ReservationId))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_orders_reservation")
                    .table(Orders::Table)
                    .col(Orders::ReservationId)
                    .to_owned(),
            )
            .await?;
        TRIGGERS
            .attach(manager.get_connection(), manager.get_database_backend())
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // The reservations' triggers go with their table; the function they
        // call is the change log's and stays.
        manager
            .drop_index(
                Index::drop()
                    .name("idx_orders_reservation")
                    .table(Orders::Table)
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(Orders::Table)
                    .drop_column(Orders::ReservationId)
                    .to_owned(),
            )
            .await?;
        manager
            .drop_table(Table::drop().table(ReservationNodes::Table).to_owned())
            .await?;
        manager
            .drop_table(Table::drop().table(Reservations::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum Reservations {
    Table,
    Id,
    OrgId,
    ProjectId,
    Name,
    InstanceTypeId,
    GpuModelId,
    RegionId,
    NodeCount,
    GpusPerNode,
    StartsAt,
    EndsAt,
    HourlyMicros,
    Status,
    BilledUntil,
    CancelledAt,
    CancellationFeeMicros,
    CreatedByKind,
    CreatedBy,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum ReservationNodes {
    Table,
    Id,
    ReservationId,
    NodeId,
    GpuIndices,
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
enum InstanceTypes {
    Table,
    Id,
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
enum Orders {
    Table,
    ReservationId,
}
