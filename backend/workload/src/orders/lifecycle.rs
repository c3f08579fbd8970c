//! State changes of an order's allocations that several actors make (the
//! API on cancel, the scheduling loop on preemption and drains, drivers
//! when work stops), each inside the caller's transaction.

use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QuerySelect};
use uuid::Uuid;

use gantry_entities::{allocation, gpu_claim, gpu_share, order};
use gantry_types::classes::{AllocationState, OrderStatus, StopCause};

/// Reads an order for a change of its status, locking its row until the
/// transaction ends (PostgreSQL; SQLite's write transactions are serial
/// already). An actor that decides on what it read must lock it: the
/// scheduling loop may have started the order since, and a change written
/// from a stale read leaves its GPUs claimed for ever.
pub async fn lock(
    db: &impl ConnectionTrait,
    order_id: Uuid,
) -> Result<Option<order::Model>, sea_orm::DbErr> {
    order::Entity::find_by_id(order_id)
        .lock_exclusive()
        .one(db)
        .await
}

/// The order came up: it runs with `access`, and metering of its
/// allocations starts now. Answers false when it was no longer coming up
/// (cancelled meanwhile, or already running).
pub async fn came_up(
    db: &impl ConnectionTrait,
    order_id: Uuid,
    access: String,
    now: DateTime<Utc>,
) -> Result<bool, sea_orm::DbErr> {
    let updated = order::Entity::update_many()
        .col_expr(order::Column::Status, Expr::value(OrderStatus::Running))
        .col_expr(order::Column::StartedAt, Expr::value(Some(now)))
        .col_expr(order::Column::Access, Expr::value(Some(access)))
        .col_expr(
            order::Column::PendingReason,
            Expr::value(Option::<String>::None),
        )
        .col_expr(order::Column::UpdatedAt, Expr::value(now))
        .filter(order::Column::Id.eq(order_id))
        .filter(order::Column::Status.is_in([OrderStatus::Scheduled, OrderStatus::Provisioning]))
        .exec_with_returning(db)
        .await?;
    let Some(order) = updated.first() else {
        return Ok(false);
    };
    // Counted as the start is written: a start whose transaction then
    // fails is counted too, and again when it is retried.
    gantry_monitoring::fleet::record_admission(order, now);
    allocation::Entity::update_many()
        .col_expr(allocation::Column::RunningSince, Expr::value(Some(now)))
        .filter(allocation::Column::OrderId.eq(order_id))
        .filter(allocation::Column::State.eq(AllocationState::Active))
        .filter(allocation::Column::RunningSince.is_null())
        .exec(db)
        .await?;
    Ok(true)
}

/// Asks the order's running allocations to stop by `stop_at` because of
/// `cause`; their GPUs stay held until the driver reports the stop.
pub async fn stop(
    db: &impl ConnectionTrait,
    order_id: Uuid,
    stop_at: DateTime<Utc>,
    cause: StopCause,
) -> Result<u64, sea_orm::DbErr> {
    Ok(allocation::Entity::update_many()
        .col_expr(
            allocation::Column::State,
            Expr::value(AllocationState::Stopping),
        )
        .col_expr(allocation::Column::StopAt, Expr::value(Some(stop_at)))
        .col_expr(allocation::Column::StopCause, Expr::value(Some(cause)))
        .filter(allocation::Column::OrderId.eq(order_id))
        .filter(allocation::Column::State.eq(AllocationState::Active))
        .exec(db)
        .await?
        .rows_affected)
}

/// Frees the order's GPUs (on one node, or everywhere): its claims go,
/// its allocations become history.
pub async fn release(
    db: &impl ConnectionTrait,
    order_id: Uuid,
    node_id: Option<Uuid>,
    now: DateTime<Utc>,
) -> Result<(), sea_orm::DbErr> {
    let current = order::Entity::find_by_id(order_id).one(db).await?;
    free(db, order_id, current.as_ref(), node_id, now).await
}

/// [`release`] with the order already read: the attempt its allocations
/// served ends as the order stands now.
async fn free(
    db: &impl ConnectionTrait,
    order_id: Uuid,
    current: Option<&order::Model>,
    node_id: Option<Uuid>,
    now: DateTime<Utc>,
) -> Result<(), sea_orm::DbErr> {
    let mut live = allocation::Entity::find()
        .filter(allocation::Column::OrderId.eq(order_id))
        .filter(allocation::Column::State.ne(AllocationState::Released));
    if let Some(node_id) = node_id {
        live = live.filter(allocation::Column::NodeId.eq(node_id));
    }
    let ids: Vec<Uuid> = live.all(db).await?.into_iter().map(|a| a.id).collect();
    if ids.is_empty() {
        return Ok(());
    }
    let outcome = current.map_or("released", |o| match o.status {
        OrderStatus::Completed => "completed",
        OrderStatus::Failed => "failed",
        OrderStatus::Cancelled => "cancelled",
        OrderStatus::TimedOut => "timed_out",
        OrderStatus::Preempted => "preempted",
        _ => "released",
    });
    gpu_claim::Entity::delete_many()
        .filter(gpu_claim::Column::AllocationId.is_in(ids.iter().copied()))
        .exec(db)
        .await?;
    gpu_share::Entity::delete_many()
        .filter(gpu_share::Column::AllocationId.is_in(ids.iter().copied()))
        .exec(db)
        .await?;
    allocation::Entity::update_many()
        .col_expr(
            allocation::Column::State,
            Expr::value(AllocationState::Released),
        )
        .col_expr(allocation::Column::ReleasedAt, Expr::value(Some(now)))
        .col_expr(allocation::Column::Outcome, Expr::value(Some(outcome)))
        .filter(allocation::Column::Id.is_in(ids))
        .exec(db)
        .await?;
    Ok(())
}

/// Work has stopped on a node (or on all of them): its GPUs there are
/// freed, and once the order holds none, it moves on. A preempted order is
/// queued again; one that was cancelled, failed or completed records its
/// end.
pub async fn stopped(
    db: &impl ConnectionTrait,
    order_id: Uuid,
    node_id: Option<Uuid>,
    now: DateTime<Utc>,
) -> Result<(), sea_orm::DbErr> {
    let current = order::Entity::find_by_id(order_id).one(db).await?;
    free(db, order_id, current.as_ref(), node_id, now).await?;
    let holding = allocation::Entity::find()
        .filter(allocation::Column::OrderId.eq(order_id))
        .filter(allocation::Column::State.ne(AllocationState::Released))
        .one(db)
        .await?;
    if holding.is_some() {
        return Ok(());
    }
    // A job that has had all its retries fails instead of queueing again.
    if let Some(o) = current
        && o.status == OrderStatus::Preempted
        && o.kind == crate::jobs::KIND
        && o.attempts > o.max_retries
    {
        order::Entity::update_many()
            .col_expr(order::Column::Status, Expr::value(OrderStatus::Failed))
            .col_expr(
                order::Column::FailureReason,
                Expr::value(Some(format!(
                    "{}; no retries left after {} attempts",
                    o.pending_reason.as_deref().unwrap_or("preempted"),
                    o.attempts
                ))),
            )
            .col_expr(
                order::Column::PendingReason,
                Expr::value(Option::<String>::None),
            )
            .filter(order::Column::Id.eq(order_id))
            .filter(order::Column::Status.eq(OrderStatus::Preempted))
            .exec(db)
            .await?;
    }
    // The preempting actor's reason (a drain, a lost node, a retried exit)
    // stays; a plain preemption says so.
    order::Entity::update_many()
        .col_expr(order::Column::Status, Expr::value(OrderStatus::Queued))
        .col_expr(
            order::Column::PendingReason,
            Expr::cust("COALESCE(pending_reason, 'preempted; queued again')"),
        )
        .col_expr(order::Column::Access, Expr::value(Option::<String>::None))
        .col_expr(order::Column::UpdatedAt, Expr::value(now))
        .filter(order::Column::Id.eq(order_id))
        .filter(order::Column::Status.eq(OrderStatus::Preempted))
        .exec(db)
        .await?;
    order::Entity::update_many()
        .col_expr(order::Column::EndedAt, Expr::value(Some(now)))
        .col_expr(order::Column::Access, Expr::value(Option::<String>::None))
        .col_expr(order::Column::UpdatedAt, Expr::value(now))
        .filter(order::Column::Id.eq(order_id))
        .filter(order::Column::Status.is_in(OrderStatus::FINAL))
        .filter(order::Column::EndedAt.is_null())
        .exec(db)
        .await?;
    Ok(())
}

/// How a workload ended on a node (or on all of its nodes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// It ran and exited with the code, if one is known.
    Exited(Option<i32>),
    /// It could not be started.
    NotStarted,
}

/// The order's workload ended by itself on `node_id` (or everywhere):
/// a job records its exit code and completes, fails, or is queued again
/// while its retries last; its GPUs there are freed. `message` says why it
/// failed where the exit code alone would not.
pub async fn ended(
    db: &impl ConnectionTrait,
    current: &order::Model,
    node_id: Option<Uuid>,
    ending: Ending,
    message: Option<String>,
    now: DateTime<Utc>,
) -> Result<(), sea_orm::DbErr> {
    let alive = [
        OrderStatus::Scheduled,
        OrderStatus::Provisioning,
        OrderStatus::Running,
    ];
    let exit_code = match ending {
        Ending::Exited(code) => code,
        Ending::NotStarted => None,
    };
    let mut on_node = allocation::Entity::update_many()
        .col_expr(allocation::Column::ExitCode, Expr::value(exit_code))
        .filter(allocation::Column::OrderId.eq(current.id))
        .filter(allocation::Column::State.ne(AllocationState::Released));
    if let Some(node_id) = node_id {
        on_node = on_node.filter(allocation::Column::NodeId.eq(node_id));
    }
    on_node.exec(db).await?;
    if current.job.is_some() {
        order::Entity::update_many()
            .col_expr(order::Column::ExitCode, Expr::value(exit_code))
            .filter(order::Column::Id.eq(current.id))
            .exec(db)
            .await?;
    }
    let set_status = |status: OrderStatus| {
        order::Entity::update_many()
            .col_expr(order::Column::Status, Expr::value(status))
            .col_expr(order::Column::UpdatedAt, Expr::value(now))
            .filter(order::Column::Id.eq(current.id))
            .filter(order::Column::Status.is_in(alive))
    };
    // A job asked to retry failures runs again while retries last.
    let failed = ending != Ending::Exited(Some(0));
    let retry = failed
        && current.job.is_some()
        && current.retry_on_failure
        && current.attempts <= current.max_retries
        && alive.contains(&current.status);
    if retry {
        let why = match exit_code {
            Some(code) => format!("exited with code {code}"),
            None => message.unwrap_or_else(|| "could not start".into()),
        };
        // Preempted, so that once stopped it is queued again.
        set_status(OrderStatus::Preempted)
            .col_expr(
                order::Column::PendingReason,
                Expr::value(Some(format!(
                    "{}{} {why}; retry {} of {}",
                    gantry_types::job_spec::RETRY_REASON_PREFIX,
                    current.attempts,
                    current.attempts,
                    current.max_retries
                ))),
            )
            .exec(db)
            .await?;
    } else {
        let (status, reason) = match ending {
            Ending::Exited(Some(0)) => (OrderStatus::Completed, None),
            Ending::Exited(code) => (
                OrderStatus::Failed,
                Some(message.unwrap_or_else(|| {
                    format!(
                        "the workload exited with code {}",
                        code.map_or_else(|| "unknown".to_owned(), |c| c.to_string())
                    )
                })),
            ),
            Ending::NotStarted => (
                OrderStatus::Failed,
                Some(message.unwrap_or_else(|| "the node could not start it".into())),
            ),
        };
        set_status(status)
            .col_expr(order::Column::FailureReason, Expr::value(reason))
            .exec(db)
            .await?;
    }
    stop(db, current.id, now, StopCause::Exited).await?;
    stopped(db, current.id, node_id, now).await
}
