//! Jobs: run-to-completion orders with a command, a walltime, a retry
//! policy, array membership and dependencies; each attempt's exit code on
//! its allocations; captured output.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

fn order_columns() -> Vec<ColumnDef> {
    vec![
        text_null(Orders::Job),
        big_integer_null(Orders::MaxRuntimeSeconds),
        boolean(Orders::RetryOnFailure).default(false).to_owned(),
        integer(Orders::MaxRetries).default(0).to_owned(),
        uuid_null(Orders::ArrayId),
        integer_null(Orders::ArrayIndex),
        integer_null(Orders::ExitCode),
        big_integer(Orders::LogBytes).default(0).to_owned(),
    ]
}

fn allocation_columns() -> Vec<ColumnDef> {
    vec![
        integer(Allocations::Attempt).default(1).to_owned(),
        integer_null(Allocations::ExitCode),
        string_len_null(Allocations::Outcome, 16),
    ]
}

const STATUSES_BEFORE: &str = "'queued', 'scheduled', 'provisioning', 'running', 'completed', 'failed', 'cancelled', 'preempted'";
const STATUSES_AFTER: &str = "'queued', 'scheduled', 'provisioning', 'running', 'completed', 'failed', 'cancelled', 'preempted', 'timed_out'";

/// Replaces the check on `orders.status` with one allowing `to`.
async fn allow_statuses(manager: &SchemaManager<'_>, from: &str, to: &str) -> Result<(), DbErr> {
    crate::checks::allow(manager, "orders", "status", "preempted", from, to).await
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for mut column in order_columns() {
            manager
                .alter_table(
                    Table::alter()
                        .table(Orders::Table)
                        .add_column(&mut column)
                        .to_owned(),
                )
                .await?;
        }
        for mut column in allocation_columns() {
            manager
                .alter_table(
                    Table::alter()
                        .table(Allocations::Table)
                        .add_column(&mut column)
                        .to_owned(),
                )
                .await?;
        }
        manager
            .create_index(
                Index::create()
                    .name("idx_orders_array")
                    .table(Orders::Table)
                    .col(Orders::ArrayId)
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(OrderDependencies::Table)
                    .col(uuid(OrderDependencies::OrderId))
                    .col(uuid(OrderDependencies::DependsOn))
                    .col(string_len(OrderDependencies::Condition, 16))
                    .primary_key(
                        Index::create()
                            .col(OrderDependencies::OrderId)
                            .col(OrderDependencies::DependsOn),
                    )
                    .foreign_key(
                        ForeignKey::create()
                            .from(OrderDependencies::Table, OrderDependencies::OrderId)
                            .to(Orders::Table, Orders::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .foreign_key(
                        ForeignKey::create()
                            .from(OrderDependencies::Table, OrderDependencies::DependsOn)
                            .to(Orders::Table, Orders::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_order_dependencies_target")
                    .table(OrderDependencies::Table)
                    .col(OrderDependencies::DependsOn)
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(JobLogs::Table)
                    .col(big_pk_auto(JobLogs::Id))
                    .col(uuid(JobLogs::OrderId))
                    .col(integer(JobLogs::Attempt))
                    .col(uuid_null(JobLogs::NodeId))
                    .col(string_len(JobLogs::Stream, 8))
                    .col(text(JobLogs::Line))
                    .col(timestamp_with_time_zone(JobLogs::At))
                    .foreign_key(
                        ForeignKey::create()
                            .from(JobLogs::Table, JobLogs::OrderId)
                            .to(Orders::Table, Orders::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_job_logs_order")
                    .table(JobLogs::Table)
                    .col(JobLogs::OrderId)
                    .col(JobLogs::Id)
                    .to_owned(),
            )
            .await?;
        // Last, so a rebuilt SQLite table has every column above.
        allow_statuses(manager, STATUSES_BEFORE, STATUSES_AFTER).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        allow_statuses(manager, STATUSES_AFTER, STATUSES_BEFORE).await?;
        manager
            .drop_table(Table::drop().table(JobLogs::Table).to_owned())
            .await?;
        manager
            .drop_table(Table::drop().table(OrderDependencies::Table).to_owned())
            .await?;
        manager
            .drop_index(
                Index::drop()
                    .name("idx_orders_array")
                    .table(Orders::Table)
                    .to_owned(),
            )
            .await?;
        for column in [
            Allocations::Outcome,
            Allocations::ExitCode,
            Allocations::Attempt,
        ] {
            manager
                .alter_table(
                    Table::alter()
                        .table(Allocations::Table)
                        .drop_column(column)
                        .to_owned(),
                )
                .await?;
        }
        for column in [
            Orders::LogBytes,
            Orders::ExitCode,
            Orders::ArrayIndex,
            Orders::ArrayId,
            Orders::MaxRetries,
            Orders::RetryOnFailure,
            Orders::MaxRuntimeSeconds,
            Orders::Job,
        ] {
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
    Id,
    /// JSON: command, args, env, working directory, image.
    Job,
    /// Walltime: a job running longer is stopped as timed out.
    MaxRuntimeSeconds,
    /// Whether a non-zero exit is retried.
    RetryOnFailure,
    /// Retries allowed after the first attempt (node loss, preemption and,
    /// when asked, failure).
    MaxRetries,
    /// The array it was submitted in, and its index there.
    ArrayId,
    ArrayIndex,
    /// The last attempt's exit code.
    ExitCode,
    /// Output kept so far, against the per-job limit.
    LogBytes,
}

#[derive(DeriveIden)]
enum Allocations {
    Table,
    /// Which attempt of its order it served (1, 2, …).
    Attempt,
    ExitCode,
    /// How its attempt ended: completed, failed, timed_out, cancelled,
    /// preempted, node_lost.
    Outcome,
}

#[derive(DeriveIden)]
enum OrderDependencies {
    Table,
    OrderId,
    DependsOn,
    /// `after_ok` or `after_any`.
    Condition,
}

#[derive(DeriveIden)]
enum JobLogs {
    Table,
    Id,
    OrderId,
    Attempt,
    NodeId,
    /// `stdout` or `stderr`.
    Stream,
    Line,
    At,
}
