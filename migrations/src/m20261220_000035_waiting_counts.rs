//! Orders waiting per organization and project, for the intake's limit on
//! waiting orders. The intake counted them in its transaction, a pass over
//! every waiting order of the organization per batch: at 100,000 waiting it
//! was most of what an order's creation cost. Every change into or out of
//! a waiting status now appends a move (±1) by trigger, as the status moves
//! do; the scheduling leader folds them into one row per organization and
//! project when it publishes, and the intake reads the folded rows and the
//! moves not folded yet in one statement.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

use crate::triggers::define_function;

#[derive(DeriveMigrationName)]
pub struct Migration;

const FUNCTION: &str = "gantry_order_waiting_move";
const WAITING: &str = "('queued', 'preempted')";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(WaitingMoves::Table)
                    .col(big_pk_auto(WaitingMoves::Id))
                    .col(uuid(WaitingMoves::OrgId))
                    .col(uuid_null(WaitingMoves::ProjectId))
                    .col(integer(WaitingMoves::Delta))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_waiting_moves_org")
                    .table(WaitingMoves::Table)
                    .col(WaitingMoves::OrgId)
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(WaitingCounts::Table)
                    .col(big_pk_auto(WaitingCounts::Id))
                    .col(uuid(WaitingCounts::OrgId))
                    .col(uuid_null(WaitingCounts::ProjectId))
                    .col(big_integer(WaitingCounts::Orders))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_waiting_counts_org")
                    .table(WaitingCounts::Table)
                    .col(WaitingCounts::OrgId)
                    .to_owned(),
            )
            .await?;
        let db = manager.get_connection();
        match manager.get_database_backend() {
            DbBackend::Postgres => {
                define_function(
                    db,
                    FUNCTION,
                    &format!(
                        "IF TG_OP <> 'INSERT' AND OLD.status IN {WAITING} THEN \
                           INSERT INTO waiting_moves (org_id, project_id, delta) \
                           VALUES (OLD.org_id, OLD.project_id, -1); \
                         END IF; \
                         IF TG_OP <> 'DELETE' AND NEW.status IN {WAITING} THEN \
                           INSERT INTO waiting_moves (org_id, project_id, delta) \
                           VALUES (NEW.org_id, NEW.project_id, 1); \
                         END IF"
                    ),
                )
                .await?;
                // Creating the trigger locks out writers to orders until the
                // migration commits, so the count below misses none and
                // counts none twice.
                db.execute_unprepared(&format!(
                    "CREATE TRIGGER orders_waiting_moves AFTER INSERT OR UPDATE OF status OR DELETE \
                     ON orders FOR EACH ROW EXECUTE FUNCTION {FUNCTION}()"
                ))
                .await?;
            }
            _ => {
                let leaving = format!(
                    "INSERT INTO waiting_moves (org_id, project_id, delta) \
                     SELECT OLD.org_id, OLD.project_id, -1 WHERE OLD.status IN {WAITING};"
                );
                let entering = format!(
                    "INSERT INTO waiting_moves (org_id, project_id, delta) \
                     SELECT NEW.org_id, NEW.project_id, 1 WHERE NEW.status IN {WAITING};"
                );
                for (suffix, event, body) in [
                    ("insert", "INSERT", entering.clone()),
                    (
                        "update",
                        "UPDATE OF status",
                        format!("{leaving} {entering}"),
                    ),
                    ("delete", "DELETE", leaving),
                ] {
                    db.execute_unprepared(&format!(
                        "CREATE TRIGGER orders_waiting_moves_{suffix} AFTER {event} ON orders \
                         BEGIN {body} END"
                    ))
                    .await?;
                }
            }
        }
        db.execute_unprepared(&format!(
            "INSERT INTO waiting_counts (org_id, project_id, orders) \
             SELECT org_id, project_id, COUNT(*) FROM orders WHERE status IN {WAITING} \
             GROUP BY org_id, project_id"
        ))
        .await
        .map(drop)
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let db = manager.get_connection();
        match manager.get_database_backend() {
            DbBackend::Postgres => {
                db.execute_unprepared("DROP TRIGGER orders_waiting_moves ON orders")
                    .await?;
                db.execute_unprepared(&format!("DROP FUNCTION {FUNCTION}()"))
                    .await?;
            }
            _ => {
                for suffix in ["insert", "update", "delete"] {
                    db.execute_unprepared(&format!("DROP TRIGGER orders_waiting_moves_{suffix}"))
                        .await?;
                }
            }
        }
        manager
            .drop_table(Table::drop().table(WaitingCounts::Table).to_owned())
            .await?;
        manager
            .drop_table(Table::drop().table(WaitingMoves::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum WaitingMoves {
    Table,
    Id,
    OrgId,
    ProjectId,
    Delta,
}

#[derive(DeriveIden)]
enum WaitingCounts {
    Table,
    Id,
    OrgId,
    ProjectId,
    Orders,
}
