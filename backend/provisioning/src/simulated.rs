//! The simulated driver: in-process stand-ins for GPU servers, for the
//! demo, tests and benchmarks. Bringing work up takes a configurable
//! delay (half "provisioning"), stopping takes another, and a configurable
//! share of starts fails, as real machines sometimes do.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{ActiveModelTrait, ColumnTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter};
use uuid::Uuid;

use super::Driver;
use gantry_core::handles::scheduler::SchedulerHandle;
use gantry_entities::{allocation, node, order};
use gantry_types::classes::{AllocationState, OrderStatus, StopCause};
use gantry_types::clock::Clock;
use gantry_workload::jobs::logs::Stream;
use gantry_workload::orders::lifecycle;
use gantry_workload::orders::{HostAccess, OrderAccess, SshAccess};

#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub provision: Duration,
    pub stop: Duration,
    /// The share of starts that fail, 0 to 1.
    pub failure_rate: f64,
}

pub struct SimulatedDriver {
    db: DatabaseConnection,
    scheduler: SchedulerHandle,
    clock: Clock,
    timing: Timing,
}

impl SimulatedDriver {
    pub fn new(
        db: DatabaseConnection,
        scheduler: SchedulerHandle,
        clock: Clock,
        timing: Timing,
    ) -> Self {
        Self {
            db,
            scheduler,
            clock,
            timing,
        }
    }
}

impl Driver for SimulatedDriver {
    fn start(&self, order_id: Uuid) {
        let db = self.db.clone();
        let scheduler = self.scheduler.clone();
        let clock = self.clock.clone();
        let timing = self.timing;
        tokio::spawn(async move {
            match bring_up(&db, &clock, &scheduler, order_id, timing).await {
                Ok(true) => scheduler.wake(),
                Ok(false) => {}
                Err(error) => tracing::warn!(%error, %order_id, "simulated start failed"),
            }
        });
    }

    fn stop(&self, order_id: Uuid, stop_at: DateTime<Utc>) {
        let db = self.db.clone();
        let scheduler = self.scheduler.clone();
        let clock = self.clock.clone();
        // Work is given until its stop time, then stopping takes its time.
        let until_stop = (stop_at - clock.now()).to_std().unwrap_or_default();
        let delay = until_stop.min(self.timing.stop) + self.timing.stop;
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let done = async {
                let txn = gantry_core::db::write(&db).await?;
                lifecycle::stopped(&txn, order_id, None, clock.now()).await?;
                txn.commit().await
            };
            match done.await {
                Ok(()) => scheduler.wake(),
                Err(error) => tracing::warn!(%error, %order_id, "simulated stop failed"),
            }
        });
    }
}

/// Walks an order from scheduled through provisioning to running (or to a
/// simulated failure), and a job on to its end after its length.
/// `Ok(true)` when GPUs were freed by a failure.
async fn bring_up(
    db: &DatabaseConnection,
    clock: &Clock,
    scheduler: &SchedulerHandle,
    order_id: Uuid,
    timing: Timing,
) -> Result<bool, DbErr> {
    let half = timing.provision / 2;
    tokio::time::sleep(half).await;
    let now = clock.now();
    // With no delay there is no provisioning to show: one write less.
    if !timing.provision.is_zero() {
        order::Entity::update_many()
            .col_expr(
                order::Column::Status,
                Expr::value(OrderStatus::Provisioning),
            )
            .col_expr(order::Column::UpdatedAt, Expr::value(now))
            .filter(order::Column::Id.eq(order_id))
            .filter(order::Column::Status.eq(OrderStatus::Scheduled))
            .exec(db)
            .await?;
    }
    tokio::time::sleep(timing.provision - half).await;
    let now = clock.now();
    let coming_up = [OrderStatus::Scheduled, OrderStatus::Provisioning];
    if timing.failure_rate > 0.0 && rand::random::<f64>() < timing.failure_rate {
        let txn = gantry_core::db::write(db).await?;
        let failed = order::Entity::update_many()
            .col_expr(order::Column::Status, Expr::value(OrderStatus::Failed))
            .col_expr(
                order::Column::FailureReason,
                Expr::value(Some(
                    "the node failed to start the instance (simulated fault)",
                )),
            )
            .col_expr(order::Column::EndedAt, Expr::value(Some(now)))
            .col_expr(order::Column::UpdatedAt, Expr::value(now))
            .filter(order::Column::Id.eq(order_id))
            .filter(order::Column::Status.is_in(coming_up))
            .exec(&txn)
            .await?;
        if failed.rows_affected == 1 {
            lifecycle::release(&txn, order_id, None, now).await?;
        }
        txn.commit().await?;
        return Ok(failed.rows_affected == 1);
    }
    let access = access_details(db, order_id).await?;
    let txn = gantry_core::db::write(db).await?;
    let up = lifecycle::came_up(&txn, order_id, access, now).await?;
    txn.commit().await?;
    // A job runs for its length from the start it recorded (one that gave
    // none, as long as a short command takes), then ends by itself, as its
    // command would.
    if up
        && let Some(job) = order::Entity::find_by_id(order_id).one(db).await?
        && job.kind == gantry_workload::jobs::KIND
    {
        let seconds = job.duration_seconds.unwrap_or(JOB_SECONDS_UNSTATED);
        let end = now + chrono::Duration::seconds(seconds);
        let length = (end - clock.now()).to_std().unwrap_or_default();
        let (db, clock, scheduler) = (db.clone(), clock.clone(), scheduler.clone());
        tokio::spawn(async move {
            tokio::time::sleep(length).await;
            match complete(&db, order_id, clock.now()).await {
                Ok(true) => scheduler.wake(),
                Ok(false) => {}
                Err(error) => tracing::warn!(%error, %order_id, "simulated job end failed"),
            }
        });
    }
    Ok(false)
}

/// How long a simulated job that states no duration runs.
pub const JOB_SECONDS_UNSTATED: i64 = 20;

/// A simulated job's command exits 0: it completes and its GPUs are free
/// at once, and its output says that no command ran. False when it was no
/// longer running (cancelled, timed out).
pub async fn complete(
    db: &DatabaseConnection,
    order_id: Uuid,
    now: DateTime<Utc>,
) -> Result<bool, DbErr> {
    let txn = gantry_core::db::write(db).await?;
    let ended = order::Entity::update_many()
        .col_expr(order::Column::Status, Expr::value(OrderStatus::Completed))
        .col_expr(order::Column::ExitCode, Expr::value(Some(0)))
        .col_expr(order::Column::UpdatedAt, Expr::value(now))
        .filter(order::Column::Id.eq(order_id))
        .filter(order::Column::Status.eq(OrderStatus::Running))
        .exec(&txn)
        .await?;
    if ended.rows_affected == 1 {
        let held = allocation::Entity::find()
            .filter(allocation::Column::OrderId.eq(order_id))
            .filter(allocation::Column::State.ne(AllocationState::Released))
            .one(&txn)
            .await?;
        let job = order::Entity::find_by_id(order_id).one(&txn).await?;
        if let (Some(job), Some(held)) = (job, held) {
            let node = node::Entity::find_by_id(held.node_id).one(&txn).await?;
            let line = format!(
                "[gantry] simulated node {}: the command was not run; it exits 0 after {} s",
                node.map(|n| n.name).unwrap_or_default(),
                job.duration_seconds.unwrap_or(JOB_SECONDS_UNSTATED)
            );
            gantry_workload::jobs::logs::row(&job, held.node_id, Stream::Stderr, line, now)
                .insert(&txn)
                .await?;
        }
        // Its attempt ends with the exit code, as an agent reports one.
        allocation::Entity::update_many()
            .col_expr(allocation::Column::ExitCode, Expr::value(Some(0)))
            .filter(allocation::Column::OrderId.eq(order_id))
            .filter(allocation::Column::State.ne(AllocationState::Released))
            .exec(&txn)
            .await?;
        lifecycle::stop(&txn, order_id, now, StopCause::Exited).await?;
        lifecycle::stopped(&txn, order_id, None, now).await?;
    }
    txn.commit().await?;
    Ok(ended.rows_affected == 1)
}

/// How a tenant reaches a simulated instance: one host per node.
async fn access_details(db: &DatabaseConnection, order_id: Uuid) -> Result<String, DbErr> {
    let allocations = allocation::Entity::find()
        .filter(allocation::Column::OrderId.eq(order_id))
        .filter(allocation::Column::State.eq(AllocationState::Active))
        .all(db)
        .await?;
    let nodes = node::Entity::find()
        .filter(node::Column::Id.is_in(allocations.iter().map(|a| a.node_id)))
        .all(db)
        .await?;
    let hosts = nodes
        .iter()
        .map(|n| {
            let host = format!("{}.sim.gantry.internal", n.name);
            HostAccess {
                node: n.name.clone(),
                private_address: None,
                ssh: Some(SshAccess {
                    command: format!("ssh root@{host}"),
                    user: "root".into(),
                    port: 22,
                    host_key_fingerprint: None,
                }),
                host,
                ports: Vec::new(),
            }
        })
        .collect();
    let access = OrderAccess {
        driver: "simulated".into(),
        runtime: None,
        hosts,
        slurm: None,
    };
    Ok(serde_json::to_string(&access).unwrap_or_default())
}
