//! Webhooks: an organization's endpoints, the outbox of events written in
//! the transaction of the change that caused them, and each delivery with
//! its attempts. An order's status changes reach the outbox through a
//! trigger, so every path that changes an order (the API, the scheduler,
//! agents, drivers, billing) emits its event without knowing of webhooks,
//! and a change that rolls back leaves no event behind.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;
use sea_orm_migration::sea_orm::DbBackend;

#[derive(DeriveMigrationName)]
pub struct Migration;

/// The outbox columns an order's trigger fills.
const COLUMNS: &str = "org_id, order_id, from_status, to_status, detail, occurred_at";

fn values(from: &str, now: &str) -> String {
    format!(
        "NEW.org_id, NEW.id, {from}, NEW.status, \
         COALESCE(NEW.failure_reason, NEW.pending_reason), {now}"
    )
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(WebhookEndpoints::Table)
                    .col(pk_uuid(WebhookEndpoints::Id))
                    .col(uuid(WebhookEndpoints::OrgId))
                    .col(string_len(WebhookEndpoints::Url, 2048))
                    .col(string_len(WebhookEndpoints::Description, 500))
                    .col(text(WebhookEndpoints::EventTypes))
                    .col(boolean(WebhookEndpoints::Enabled))
                    .col(string_len(WebhookEndpoints::Secret, 64))
                    .col(string_len_null(WebhookEndpoints::PreviousSecret, 64))
                    .col(timestamp_with_time_zone_null(
                        WebhookEndpoints::PreviousSecretUntil,
                    ))
                    .col(timestamp_with_time_zone_null(
                        WebhookEndpoints::FailingSince,
                    ))
                    .col(string_len_null(WebhookEndpoints::DisabledReason, 500))
                    .col(timestamp_with_time_zone(WebhookEndpoints::CreatedAt))
                    .col(timestamp_with_time_zone(WebhookEndpoints::UpdatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .from(WebhookEndpoints::Table, WebhookEndpoints::OrgId)
                            .to(Organizations::Table, Organizations::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_webhook_endpoints_org")
                    .table(WebhookEndpoints::Table)
                    .col(WebhookEndpoints::OrgId)
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(WebhookEvents::Table)
                    .col(big_pk_auto(WebhookEvents::Seq))
                    .col(uuid(WebhookEvents::OrgId))
                    .col(string_len_null(WebhookEvents::EventType, 64))
                    .col(uuid_null(WebhookEvents::OrderId))
                    .col(string_len_null(WebhookEvents::FromStatus, 32))
                    .col(string_len_null(WebhookEvents::ToStatus, 32))
                    .col(text_null(WebhookEvents::Detail))
                    .col(string_len(WebhookEvents::OccurredAt, 40))
                    .col(boolean(WebhookEvents::Dispatched).default(false))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_webhook_events_dispatched")
                    .table(WebhookEvents::Table)
                    .col(WebhookEvents::Dispatched)
                    .col(WebhookEvents::Seq)
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(WebhookDeliveries::Table)
                    .col(pk_uuid(WebhookDeliveries::Id))
                    .col(uuid(WebhookDeliveries::EndpointId))
                    .col(uuid(WebhookDeliveries::OrgId))
                    .col(string_len(WebhookDeliveries::MessageId, 64))
                    .col(big_integer_null(WebhookDeliveries::EventSeq))
                    .col(string_len(WebhookDeliveries::EventType, 64))
                    .col(text(WebhookDeliveries::Payload))
                    .col(string_len(WebhookDeliveries::Status, 16))
                    .col(integer(WebhookDeliveries::Attempts))
                    .col(timestamp_with_time_zone_null(
                        WebhookDeliveries::NextAttemptAt,
                    ))
                    .col(timestamp_with_time_zone(WebhookDeliveries::CreatedAt))
                    .col(timestamp_with_time_zone(WebhookDeliveries::UpdatedAt))
                    .foreign_key(
                        ForeignKey::create()
                            .from(WebhookDeliveries::Table, WebhookDeliveries::EndpointId)
                            .to(WebhookEndpoints::Table, WebhookEndpoints::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        for (name, columns) in [
            (
                "idx_webhook_deliveries_due",
                [WebhookDeliveries::Status, WebhookDeliveries::NextAttemptAt],
            ),
            (
                "idx_webhook_deliveries_endpoint",
                [WebhookDeliveries::EndpointId, WebhookDeliveries::CreatedAt],
            ),
        ] {
            let mut index = Index::create();
            index.name(name).table(WebhookDeliveries::Table);
            for column in columns {
                index.col(column);
            }
            manager.create_index(index.to_owned()).await?;
        }
        manager
            .create_table(
                Table::create()
                    .table(WebhookAttempts::Table)
                    .col(pk_uuid(WebhookAttempts::Id))
                    .col(uuid(WebhookAttempts::DeliveryId))
                    .col(timestamp_with_time_zone(WebhookAttempts::AttemptedAt))
                    .col(integer_null(WebhookAttempts::StatusCode))
                    .col(integer(WebhookAttempts::LatencyMs))
                    .col(text_null(WebhookAttempts::ResponseExcerpt))
                    .col(text_null(WebhookAttempts::Error))
                    .foreign_key(
                        ForeignKey::create()
                            .from(WebhookAttempts::Table, WebhookAttempts::DeliveryId)
                            .to(WebhookDeliveries::Table, WebhookDeliveries::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_webhook_attempts_delivery")
                    .table(WebhookAttempts::Table)
                    .col(WebhookAttempts::DeliveryId)
                    .to_owned(),
            )
            .await?;
        let db = manager.get_connection();
        match manager.get_database_backend() {
            DbBackend::Postgres => {
                let now = "to_char(clock_timestamp() AT TIME ZONE 'UTC', \
                           'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')";
                db.execute_unprepared(&format!(
                    "CREATE OR REPLACE FUNCTION orders_webhook_event() RETURNS trigger \
                     LANGUAGE plpgsql AS $$ BEGIN \
                     IF TG_OP = 'INSERT' THEN \
                       INSERT INTO webhook_events ({COLUMNS}) VALUES ({}); \
                     ELSIF NEW.status IS DISTINCT FROM OLD.status THEN \
                       INSERT INTO webhook_events ({COLUMNS}) VALUES ({}); \
                     END IF; RETURN NULL; END $$",
                    values("NULL", now),
                    values("OLD.status", now),
                ))
                .await?;
                db.execute_unprepared(
                    "CREATE TRIGGER orders_webhook AFTER INSERT OR UPDATE OF status ON orders \
                     FOR EACH ROW EXECUTE FUNCTION orders_webhook_event()",
                )
                .await?;
            }
            _ => {
                let now = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')";
                db.execute_unprepared(&format!(
                    "CREATE TRIGGER orders_webhook_insert AFTER INSERT ON orders BEGIN \
                     INSERT INTO webhook_events ({COLUMNS}) VALUES ({}); END",
                    values("NULL", now)
                ))
                .await?;
                db.execute_unprepared(&format!(
                    "CREATE TRIGGER orders_webhook_update AFTER UPDATE OF status ON orders \
                     WHEN NEW.status IS NOT OLD.status BEGIN \
                     INSERT INTO webhook_events ({COLUMNS}) VALUES ({}); END",
                    values("OLD.status", now)
                ))
                .await?;
            }
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        match manager.get_database_backend() {
            DbBackend::Postgres => {
                db.execute_unprepared("DROP TRIGGER orders_webhook ON orders")
                    .await?;
                db.execute_unprepared("DROP FUNCTION orders_webhook_event()")
                    .await?;
            }
            _ => {
                db.execute_unprepared("DROP TRIGGER orders_webhook_insert")
                    .await?;
                db.execute_unprepared("DROP TRIGGER orders_webhook_update")
                    .await?;
            }
        }
        for table in [
            WebhookAttempts::Table.into_iden(),
            WebhookDeliveries::Table.into_iden(),
            WebhookEvents::Table.into_iden(),
            WebhookEndpoints::Table.into_iden(),
        ] {
            manager
                .drop_table(Table::drop().table(table).to_owned())
                .await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden)]
enum WebhookEndpoints {
    Table,
    Id,
    OrgId,
    Url,
    Description,
    EventTypes,
    Enabled,
    Secret,
    PreviousSecret,
    PreviousSecretUntil,
    FailingSince,
    DisabledReason,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum WebhookEvents {
    Table,
    Seq,
    OrgId,
    EventType,
    OrderId,
    FromStatus,
    ToStatus,
    Detail,
    OccurredAt,
    Dispatched,
}

#[derive(DeriveIden)]
enum WebhookDeliveries {
    Table,
    Id,
    EndpointId,
    OrgId,
    MessageId,
    EventSeq,
    EventType,
    Payload,
    Status,
    Attempts,
    NextAttemptAt,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum WebhookAttempts {
    Table,
    Id,
    DeliveryId,
    AttemptedAt,
    StatusCode,
    LatencyMs,
    ResponseExcerpt,
    Error,
}

#[derive(DeriveIden)]
enum Organizations {
    Table,
    Id,
}
