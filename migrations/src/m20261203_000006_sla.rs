//! SLA: availability targets and credit tiers per priority class, and the
//! service credits each month's measurement grants, until an invoice takes
//! them.

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
                    .table(SlaPolicies::Table)
                    .col(string_len(SlaPolicies::PriorityClass, 16).primary_key())
                    .col(integer(SlaPolicies::AvailabilityTargetPermyriad))
                    .col(big_integer_null(SlaPolicies::QueueWaitTargetSeconds))
                    .col(text(SlaPolicies::CreditTiers))
                    .col(timestamp_with_time_zone(SlaPolicies::UpdatedAt))
                    .to_owned(),
            )
            .await?;
        // Production work, never preempted for priority, is promised 99.9 %
        // and a start within five minutes, with credits of 10, 25 and 100 %
        // of its charges below 99.9, 99 and 95 %.
        let tiers = r#"[{"below_permyriad":9990,"credit_percent":10},{"below_permyriad":9900,"credit_percent":25},{"below_permyriad":9500,"credit_percent":100}]"#;
        manager
            .exec_stmt(
                Query::insert()
                    .into_table(SlaPolicies::Table)
                    .columns([
                        SlaPolicies::PriorityClass,
                        SlaPolicies::AvailabilityTargetPermyriad,
                        SlaPolicies::QueueWaitTargetSeconds,
                        SlaPolicies::CreditTiers,
                        SlaPolicies::UpdatedAt,
                    ])
                    .values_panic([
                        "production".into(),
                        9990.into(),
                        Some(300_i64).into(),
                        tiers.into(),
                        Expr::current_timestamp(),
                    ])
                    .to_owned(),
            )
            .await?;

        manager
            .create_table(
                Table::create()
                    .table(SlaCredits::Table)
                    .col(pk_uuid(SlaCredits::Id))
                    .col(uuid(SlaCredits::OrgId))
                    .col(timestamp_with_time_zone(SlaCredits::MonthStart))
                    .col(uuid(SlaCredits::OrderId))
                    .col(string_len(SlaCredits::PriorityClass, 16))
                    .col(integer(SlaCredits::AvailabilityPermyriad))
                    .col(big_integer(SlaCredits::DowntimeSeconds))
                    .col(integer(SlaCredits::CreditPercent))
                    .col(big_integer(SlaCredits::ChargesMicros))
                    .col(big_integer(SlaCredits::CreditMicros))
                    .col(text(SlaCredits::Evidence))
                    .col(uuid_null(SlaCredits::AppliedInvoiceId))
                    .col(timestamp_with_time_zone(SlaCredits::CreatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .from(SlaCredits::Table, SlaCredits::OrgId)
                            .to(Organizations::Table, Organizations::Id)
                            .on_delete(ForeignKeyAction::Restrict),
                    )
                    .to_owned(),
            )
            .await?;
        // One credit per order and month, whoever measures it.
        manager
            .create_index(
                Index::create()
                    .name("ux_sla_credits_order_month")
                    .table(SlaCredits::Table)
                    .col(SlaCredits::OrgId)
                    .col(SlaCredits::MonthStart)
                    .col(SlaCredits::OrderId)
                    .unique()
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            SlaCredits::Table.into_iden(),
            SlaPolicies::Table.into_iden(),
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
enum SlaPolicies {
    Table,
    PriorityClass,
    /// In hundredths of a percent: 9990 is 99.90 %.
    AvailabilityTargetPermyriad,
    QueueWaitTargetSeconds,
    /// JSON: `[{below_permyriad, credit_percent}]`.
    CreditTiers,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum SlaCredits {
    Table,
    Id,
    OrgId,
    MonthStart,
    OrderId,
    PriorityClass,
    AvailabilityPermyriad,
    DowntimeSeconds,
    CreditPercent,
    ChargesMicros,
    CreditMicros,
    /// JSON: the node events that hit the order that month.
    Evidence,
    AppliedInvoiceId,
    CreatedAt,
}
