//! The Slurm driver: a region whose nodes are a partition of a Slurm
//! cluster that Gantry fronts. Gantry keeps deciding who runs where
//! (quotas, fair share, priorities, gangs, estimates); Slurm executes each
//! decision as a job pinned to the chosen nodes, and what Slurm reports
//! (nodes, states, bound GPUs, exit codes, accounting times) flows back.
//!
//! Gantry talks to Slurm only through its command-line tools (`sinfo`,
//! `scontrol`, `sbatch`, `sacct`, `scancel`) with explicit plain-text
//! formats: they read the same on Slurm 22.05 and on 24.x–26.x, where
//! `slurmrestd`'s API versions do not overlap. One sync per cycle reads
//! every node and job of the partition in one call each.

pub mod api;
pub mod command;
mod inventory;
mod jobs;
mod output;
pub mod parse;
pub mod script;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{ColumnTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter};
use uuid::Uuid;

use super::Driver;
use command::{Slurm, SlurmError};
use gantry_core::handles::scheduler::SchedulerHandle;
use gantry_core::sealing::Sealer;
use gantry_entities::slurm_cluster;
use gantry_types::classes::SlurmUsers;
use gantry_types::clock::Clock;

/// How often Slurm regions' nodes and jobs are read: one `sinfo`, one
/// `scontrol` and, for jobs the controller no longer lists, one `sacct`
/// per region each time. A job's GPUs are free for the next only once a
/// read has seen it end.
const SYNC_EVERY: Duration = Duration::from_secs(1);
/// How often running jobs' output files are read into their logs.
const OUTPUT_EVERY: Duration = Duration::from_secs(5);

/// What went wrong talking to Slurm or keeping its answer.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error(transparent)]
    Slurm(#[from] SlurmError),
    #[error("the database: {0}")]
    Db(#[from] DbErr),
}

/// The Slurm driver of every Slurm region.
#[derive(Clone)]
pub struct SlurmDriver {
    db: DatabaseConnection,
    scheduler: SchedulerHandle,
    clock: Clock,
    sealer: Sealer,
    /// The most bytes of output kept per job.
    log_limit: i64,
    /// Whether a sync runs now: one at a time, beside the loop.
    syncing: Arc<AtomicBool>,
    /// The organizations' users this process has readied on each cluster.
    readied: Arc<Readied>,
    /// When each region's running jobs' output was last read.
    output_read: Arc<Mutex<HashMap<Uuid, Instant>>>,
}

/// Each region's Unix users whose output directory and Slurm association
/// exist.
pub type Readied = Mutex<HashSet<(Uuid, String)>>;

impl SlurmDriver {
    pub fn new(
        db: DatabaseConnection,
        scheduler: SchedulerHandle,
        clock: Clock,
        sealer: Sealer,
        log_limit: i64,
    ) -> Self {
        Self {
            db,
            scheduler,
            clock,
            sealer,
            log_limit,
            syncing: Arc::new(AtomicBool::new(false)),
            readied: Arc::new(Mutex::new(HashSet::new())),
            output_read: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Keeps every Slurm region in step for as long as this process
    /// leads: each read moves Gantry's inventory and orders on and wakes
    /// the loop when something changed. The reads run beside the loop, at
    /// their own pace (a Slurm that does not answer never holds placement
    /// up, and a quiet loop that waits for its interval does not space
    /// them out). The loop calls this every cycle; reads already running
    /// are let be.
    pub fn keep_in_step(&self) {
        if self.syncing.swap(true, Ordering::AcqRel) {
            return;
        }
        let driver = self.clone();
        tokio::spawn(async move {
            while driver.scheduler.is_leader() {
                let began = Instant::now();
                match driver.sync_all().await {
                    Ok(true) => driver.scheduler.wake(),
                    Ok(false) => {}
                    Err(error) => tracing::warn!(%error, "Slurm sync failed; retrying"),
                }
                tokio::time::sleep(SYNC_EVERY.saturating_sub(began.elapsed())).await;
            }
            driver.syncing.store(false, Ordering::Release);
        });
    }

    /// True when something changed that the loop should see.
    async fn sync_all(&self) -> Result<bool, DbErr> {
        let mut changed = false;
        for cluster in slurm_cluster::Entity::find().all(&self.db).await? {
            let region_id = cluster.region_id;
            let now = self.clock.now();
            let problem = match self.sync_one(&cluster, now).await {
                Ok(moved) => {
                    changed |= moved;
                    None
                }
                Err(SyncError::Db(error)) => return Err(error),
                Err(SyncError::Slurm(error)) => Some(error.to_string()),
            };
            if let Some(problem) = &problem {
                tracing::warn!(%problem, %region_id, "Slurm did not answer as expected");
            }
            slurm_cluster::Entity::update_many()
                .col_expr(slurm_cluster::Column::Problem, Expr::value(problem))
                .col_expr(slurm_cluster::Column::SyncedAt, Expr::value(Some(now)))
                .filter(slurm_cluster::Column::RegionId.eq(region_id))
                .exec(&self.db)
                .await?;
        }
        Ok(changed)
    }

    async fn sync_one(
        &self,
        cluster: &slurm_cluster::Model,
        now: DateTime<Utc>,
    ) -> Result<bool, SyncError> {
        let slurm = Slurm::of(cluster);
        let nodes = slurm
            .run(
                "sinfo",
                &[
                    "--noheader".into(),
                    "--Node".into(),
                    format!("--partition={}", cluster.partition),
                    format!("--format={}", parse::SINFO_FORMAT),
                ],
                &[],
                None,
            )
            .await?;
        let nodes = parse::nodes(&nodes);
        let mut changed = inventory::keep(&self.db, cluster, &nodes, now).await?;
        let read_output = self.output_read.lock().is_ok_and(|mut read| {
            let due = read
                .get(&cluster.region_id)
                .is_none_or(|at| at.elapsed() >= OUTPUT_EVERY);
            if due {
                read.insert(cluster.region_id, Instant::now());
            }
            due
        });
        changed |= jobs::follow(
            &self.db,
            &self.sealer,
            &self.readied,
            self.log_limit,
            jobs::Read {
                slurm: &slurm,
                cluster,
                now,
                output: read_output,
            },
        )
        .await?;
        Ok(changed)
    }
}

impl Driver for SlurmDriver {
    fn start(&self, order_id: Uuid) {
        let driver = self.clone();
        tokio::spawn(async move {
            if let Err(error) =
                jobs::submit(&driver.db, &driver.sealer, &driver.readied, order_id).await
            {
                tracing::warn!(%error, %order_id, "Slurm submission failed; retrying next sync");
            }
        });
    }

    /// Slurm's own cancel gives the grace: see [`jobs::cancel`].
    fn stop(&self, order_id: Uuid, _stop_at: DateTime<Utc>) {
        let driver = self.clone();
        tokio::spawn(async move {
            match jobs::cancel(&driver.db, &driver.clock, order_id).await {
                Ok(true) => driver.scheduler.wake(),
                Ok(false) => {}
                Err(error) => tracing::warn!(%error, %order_id, "Slurm cancel failed"),
            }
        });
    }
}

/// The Unix user organization `org_id`'s jobs run as on `cluster`, where
/// each organization has its own.
pub fn user_of(cluster: &slurm_cluster::Model, org_id: Uuid) -> Option<String> {
    (cluster.users == SlurmUsers::PerOrganization).then(|| {
        let hex = org_id.simple().to_string();
        format!("{}{}", cluster.user_prefix, &hex[hex.len() - 12..])
    })
}

/// Where the output files of `user`'s jobs go on `cluster`.
fn output_dir(cluster: &slurm_cluster::Model, user: Option<&str>) -> String {
    let dir = cluster.output_dir.trim_end_matches('/');
    match user {
        Some(user) => format!("{dir}/{user}"),
        None => dir.to_owned(),
    }
}

/// The GRES type of each catalog GPU model a cluster names.
fn gres_types(cluster: &slurm_cluster::Model) -> HashMap<String, String> {
    serde_json::from_str(&cluster.gres_types).unwrap_or_default()
}
