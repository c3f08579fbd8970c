//! Two figures read often that used to cost a pass over a whole table.
//!
//! Orders by status: every change of an order's status appends a move (the
//! old status −1, the new +1) by trigger, in the changing transaction; the
//! leader folds the moves into one row per status when it publishes. A move
//! is an insert of its own row, so order intake never waits on a shared
//! counter row, and the fold reads what changed, not every order.
//!
//! Launch room: what a launch of each instance type would meet per region,
//! worked out by the scheduling leader from the cycle it runs anyway and
//! read by every replica, instead of each request reading the whole fleet
//! and queue.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

use crate::triggers::define_function;

#[derive(DeriveMigrationName)]
pub struct Migration;

const FUNCTION: &str = "gantry_order_status_move";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(OrderStatusMoves::Table)
                    .col(big_pk_auto(OrderStatusMoves::Id))
                    .col(string_len(OrderStatusMoves::Status, 16))
                    .col(integer(OrderStatusMoves::Delta))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(OrderStatusCounts::Table)
                    .col(string_len(OrderStatusCounts::Status, 16).primary_key())
                    .col(big_integer(OrderStatusCounts::Orders))
                    .to_owned(),
            )
            .await?;
        let db = manager.get_connection();
        match manager.get_database_backend() {
            DbBackend::Postgres => {
                define_function(
                    db,
                    FUNCTION,
                    "IF TG_OP <> 'INSERT' THEN \
                       INSERT INTO order_status_moves (status, delta) VALUES (OLD.status, -1); \
                     END IF; \
                     IF TG_OP <> 'DELETE' THEN \
                       INSERT INTO order_status_moves (status, delta) VALUES (NEW.status, 1); \
                     END IF",
                )
                .await?;
                // Creating the trigger locks out writers to orders until the
                // migration commits, so the count below misses none and
                // counts none twice.
                db.execute_unprepared(&format!(
                    "CREATE TRIGGER orders_status_moves AFTER INSERT OR UPDATE OF status OR DELETE \
                     ON orders FOR EACH ROW EXECUTE FUNCTION {FUNCTION}()"
                ))
                .await?;
            }
            _ => {
                for (event, statement) in [
                    ("INSERT", "VALUES (NEW.status, 1)"),
                    (
                        "UPDATE OF status",
                        "VALUES (OLD.status, -1), (NEW.status, 1)",
                    ),
                    ("DELETE", "VALUES (OLD.status, -1)"),
                ] {
                    let suffix = event.split(' ').next().unwrap_or(event).to_lowercase();
                    db.execute_unprepared(&format!(
                        "CREATE TRIGGER orders_status_moves_{suffix} AFTER {event} ON orders \
                         BEGIN INSERT INTO order_status_moves (status, delta) {statement}; END"
                    ))
                    .await?;
                }
            }
        }
        db.execute_unprepared(
            "INSERT INTO order_status_counts (status, orders) \
             SELECT status, COUNT(*) FROM orders GROUP BY status",
        )
        .await?;
        manager
            .create_table(
                Table::create()
                    .table(LaunchRooms::Table)
                    .col(uuid(LaunchRooms::InstanceTypeId))
                    .col(uuid(LaunchRooms::RegionId))
                    .col(integer_null(LaunchRooms::InstancesNow))
                    .col(big_integer(LaunchRooms::WaitingGpus))
                    .col(timestamp_with_time_zone(LaunchRooms::AsOf))
                    .primary_key(
                        Index::create()
                            .col(LaunchRooms::InstanceTypeId)
                            .col(LaunchRooms::RegionId),
                    )
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(LaunchRooms::Table).to_owned())
            .await?;
        let db = manager.get_connection();
        match manager.get_database_backend() {
            DbBackend::Postgres => {
                db.execute_unprepared("DROP TRIGGER orders_status_moves ON orders")
                    .await?;
                db.execute_unprepared(&format!("DROP FUNCTION {FUNCTION}()"))
                    .await?;
            }
            _ => {
                for suffix in ["insert", "update", "delete"] {
                    db.execute_unprepared(&format!("DROP TRIGGER orders_status_moves_{suffix}"))
                        .await?;
                }
            }
        }
        manager
            .drop_table(Table::drop().table(OrderStatusCounts::Table).to_owned())
            .await?;
        manager
            .drop_table(Table::drop().table(OrderStatusMoves::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum OrderStatusMoves {
    Table,
    Id,
    Status,
    Delta,
}

#[derive(DeriveIden)]
enum OrderStatusCounts {
    Table,
    Status,
    Orders,
}

#[derive(DeriveIden)]
enum LaunchRooms {
    Table,
    InstanceTypeId,
    RegionId,
    InstancesNow,
    WaitingGpus,
    AsOf,
}
