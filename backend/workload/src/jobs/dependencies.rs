//! Jobs whose dependencies can no longer be met. Which queued jobs may be
//! placed is the read model's `gate`; a job whose `after_ok` dependency
//! ended any other way than completing fails here, and its own dependents
//! fail in turn on later cycles.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter};
use uuid::Uuid;

use gantry_entities::order;
use gantry_types::classes::OrderStatus;

/// Fails the queued jobs whose required dependency failed.
pub async fn fail_broken(
    db: &impl ConnectionTrait,
    broken: &HashMap<Uuid, String>,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    for (id, reason) in broken {
        order::Entity::update_many()
            .col_expr(order::Column::Status, Expr::value(OrderStatus::Failed))
            .col_expr(
                order::Column::FailureReason,
                Expr::value(Some(reason.clone())),
            )
            .col_expr(
                order::Column::PendingReason,
                Expr::value(Option::<String>::None),
            )
            .col_expr(order::Column::EndedAt, Expr::value(Some(now)))
            .col_expr(order::Column::UpdatedAt, Expr::value(now))
            .filter(order::Column::Id.eq(*id))
            .filter(order::Column::Status.eq(OrderStatus::Queued))
            .exec(db)
            .await?;
    }
    Ok(())
}
