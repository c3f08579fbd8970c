//! Orders as Slurm jobs: submitted pinned to the nodes Gantry chose,
//! followed through Slurm's states, and ended from Slurm's accounting.
//!
//! An attempt's row is written before `sbatch` runs, under a job name that
//! carries the order and the attempt; a submission that finds the row
//! without a job id looks for that name in Slurm first, so a crash between
//! the two never submits twice. Start and end times come from `sacct`, so
//! what Gantry meters equals what Slurm accounts, to the second.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DatabaseConnection, DbErr, EntityTrait,
    QueryFilter, QueryOrder, QuerySelect, QueryTrait, Set,
};
use uuid::Uuid;

use super::command::Slurm;
use super::output;
use super::parse::{self, Accounted, ShownJob};
use super::script::{self, Pinned};
use super::{Readied, SyncError};
use gantry_core::sealing::Sealer;
use gantry_entities::{
    allocation, gpu, gpu_claim, gpu_model, node, order, slurm_cluster, slurm_job,
};
use gantry_types::classes::{AllocationState, DriverKind, OrderStatus, SlurmAccess, StopCause};
use gantry_types::clock::Clock;
use gantry_workload::jobs::logs::Stream;
use gantry_workload::orders::lifecycle::{self, Ending};
use gantry_workload::orders::{HostAccess, OrderAccess, SlurmJobAccess, SshAccess};

/// A submission that has no job id this long after its last try, and no
/// retry time (the process stopped mid-try), is tried again: longer than
/// one command may take, so a try still running is never overlapped.
const RESUBMIT_AFTER_SECONDS: i64 = 40;
/// The wait before trying a submission Slurm refused or did not answer
/// again, doubled with each try up to the longest.
const RETRY_FIRST_SECONDS: i64 = 5;
const RETRY_LONGEST_SECONDS: i64 = 300;
/// The most jobs one `sacct` call asks for.
const SACCT_JOBS_MAX: usize = 1000;

/// An order's live allocations on Slurm nodes, in rank order, with the
/// cluster they are on; none where the order is not (or no longer) there.
async fn placed(
    db: &impl ConnectionTrait,
    order_id: Uuid,
) -> Result<
    Option<(
        Vec<allocation::Model>,
        Vec<node::Model>,
        slurm_cluster::Model,
    )>,
    DbErr,
> {
    let mut allocations = allocation::Entity::find()
        .filter(allocation::Column::OrderId.eq(order_id))
        .filter(allocation::Column::State.eq(AllocationState::Active))
        .all(db)
        .await?;
    allocations.sort_by_key(|a| a.id);
    let nodes = node::Entity::find()
        .filter(node::Column::Id.is_in(allocations.iter().map(|a| a.node_id)))
        .all(db)
        .await?;
    let Some(first) = nodes.first() else {
        return Ok(None);
    };
    if nodes.iter().any(|n| n.driver != DriverKind::Slurm) {
        return Ok(None);
    }
    let Some(cluster) = slurm_cluster::Entity::find_by_id(first.region_id)
        .one(db)
        .await?
    else {
        return Ok(None);
    };
    let ranked = allocations
        .iter()
        .filter_map(|a| nodes.iter().find(|n| n.id == a.node_id).cloned())
        .collect();
    Ok(Some((allocations, ranked, cluster)))
}

/// Submits the attempt of `order_id` that the loop placed, once. Where
/// Slurm does not take it, the order says why while it waits for the
/// next try.
pub async fn submit(
    db: &DatabaseConnection,
    sealer: &Sealer,
    readied: &Readied,
    order_id: Uuid,
) -> Result<(), SyncError> {
    let submitted = submit_once(db, sealer, readied, order_id).await;
    if let Err(SyncError::Slurm(error)) = &submitted {
        let row = slurm_job::Entity::find()
            .filter(slurm_job::Column::OrderId.eq(order_id))
            .filter(slurm_job::Column::JobId.is_null())
            .filter(slurm_job::Column::Finished.eq(false))
            .order_by_desc(slurm_job::Column::Attempt)
            .one(db)
            .await?;
        if let Some(row) = row {
            let wait = retry_wait(row.tries);
            slurm_job::Entity::update_many()
                .col_expr(
                    slurm_job::Column::RetryAt,
                    Expr::value(Some(Utc::now() + wait)),
                )
                .filter(slurm_job::Column::OrderId.eq(order_id))
                .filter(slurm_job::Column::Attempt.eq(row.attempt))
                .filter(slurm_job::Column::JobId.is_null())
                .exec(db)
                .await?;
            waits_because(
                db,
                order_id,
                format!(
                    "Slurm has not taken it yet: {error}; try {} failed, the next in {} s",
                    row.tries,
                    wait.num_seconds()
                ),
            )
            .await?;
        }
    }
    submitted
}

/// How long after its `tries`-th failed try a submission is tried again.
fn retry_wait(tries: i32) -> chrono::Duration {
    let doublings = u32::try_from(tries.saturating_sub(1)).unwrap_or(0).min(16);
    chrono::Duration::seconds((RETRY_FIRST_SECONDS << doublings).min(RETRY_LONGEST_SECONDS))
}

/// Whether an attempt's submission that has no job id is due another try:
/// its retry time has come, or (with none) its last try's time is up.
fn due_again(row: &slurm_job::Model, now: DateTime<Utc>) -> bool {
    match row.retry_at {
        Some(at) => at <= now,
        None => (now - row.submitted_at).num_seconds() >= RESUBMIT_AFTER_SECONDS,
    }
}

/// Says why an order handed to Slurm is not running yet.
async fn waits_because(
    db: &impl ConnectionTrait,
    order_id: Uuid,
    reason: String,
) -> Result<(), DbErr> {
    order::Entity::update_many()
        .col_expr(order::Column::PendingReason, Expr::value(Some(reason)))
        .filter(order::Column::Id.eq(order_id))
        .filter(order::Column::Status.is_in([OrderStatus::Scheduled, OrderStatus::Provisioning]))
        .exec(db)
        .await?;
    Ok(())
}

async fn submit_once(
    db: &DatabaseConnection,
    sealer: &Sealer,
    readied: &Readied,
    order_id: Uuid,
) -> Result<(), SyncError> {
    let Some(current) = order::Entity::find_by_id(order_id).one(db).await? else {
        return Ok(());
    };
    if !matches!(
        current.status,
        OrderStatus::Scheduled | OrderStatus::Provisioning
    ) {
        return Ok(());
    }
    let Some((allocations, nodes, cluster)) = placed(db, order_id).await? else {
        return Ok(());
    };
    let attempt = current.attempts;
    let name = script::job_name(order_id, attempt);
    let now = Utc::now();
    let tried_before = match slurm_job::Entity::find_by_id((order_id, attempt))
        .one(db)
        .await?
    {
        Some(row) if row.job_id.is_some() => return Ok(()),
        // Tried before: this try takes the row over once it is due (the
        // same condition in the update, so of two tries at once only one
        // takes it).
        Some(row) => {
            use sea_orm::sea_query::ExprTrait;
            if !due_again(&row, now) {
                return Ok(());
            }
            let taken = slurm_job::Entity::update_many()
                .col_expr(slurm_job::Column::SubmittedAt, Expr::value(now))
                .col_expr(
                    slurm_job::Column::Tries,
                    Expr::col(slurm_job::Column::Tries).add(1),
                )
                .col_expr(
                    slurm_job::Column::RetryAt,
                    Expr::value(Option::<DateTime<Utc>>::None),
                )
                .filter(slurm_job::Column::OrderId.eq(order_id))
                .filter(slurm_job::Column::Attempt.eq(attempt))
                .filter(slurm_job::Column::JobId.is_null())
                .filter(slurm_job::Column::SubmittedAt.eq(row.submitted_at))
                .exec(db)
                .await?;
            if taken.rows_affected == 0 {
                return Ok(());
            }
            true
        }
        None => {
            slurm_job::ActiveModel {
                order_id: Set(order_id),
                attempt: Set(attempt),
                region_id: Set(cluster.region_id),
                name: Set(name.clone()),
                job_id: Set(None),
                state: Set(None),
                bound: Set(None),
                submitted_at: Set(now),
                tries: Set(1),
                retry_at: Set(None),
                out_read: Set(0),
                err_read: Set(0),
                started_at: Set(None),
                ended_at: Set(None),
                finished: Set(false),
            }
            .insert(db)
            .await?;
            false
        }
    };
    let whole = current.gpu_milli.is_none_or(|m| m >= 1000) && current.mig_profile.is_none();
    if !whole {
        let txn = gantry_core::db::write(db).await?;
        lifecycle::ended(
            &txn,
            &current,
            None,
            Ending::NotStarted,
            Some(
                "a Slurm region runs whole GPUs only: GPU shares and MIG are not offered there"
                    .into(),
            ),
            now,
        )
        .await?;
        finished(&txn, order_id, attempt, "NOT_SUBMITTED").await?;
        txn.commit().await?;
        return Ok(());
    }
    let slurm = Slurm::of(&cluster);
    let user = super::user_of(&cluster, current.org_id);
    if let Some(user) = &user {
        ready(&slurm, &cluster, readied, user).await?;
    }
    // Only a try after an earlier one may find its job already in Slurm.
    let found = if tried_before {
        let since = (now - current.created_at).num_seconds().max(0) + 60;
        found_again(&slurm, &name, since).await?
    } else {
        None
    };
    let job_id = match found {
        Some(id) => id,
        None => {
            let model = gpu_model::Entity::find_by_id(current.gpu_model_id)
                .one(db)
                .await?
                .map(|m| m.name)
                .unwrap_or_default();
            let gres_type = super::gres_types(&cluster)
                .remove(&model)
                .unwrap_or_default();
            let node_gpus = gpu::Entity::find()
                .filter(gpu::Column::NodeId.eq(nodes[0].id))
                .all(db)
                .await?
                .len();
            let per_node = allocations[0].gpu_list().len();
            let names: Vec<String> = nodes.iter().map(|n| n.name.clone()).collect();
            let gang: Vec<(Uuid, &str)> = allocations
                .iter()
                .zip(&nodes)
                .map(|(a, n)| (a.id, n.name.as_str()))
                .collect();
            let launch = (current.kind == gantry_workload::jobs::KIND)
                .then(|| gantry_workload::jobs::launch(&current, allocations[0].id, &gang, sealer))
                .flatten();
            let submission = script::submission(
                &Pinned {
                    name: &name,
                    order_id,
                    partition: &cluster.partition,
                    account: cluster.account.as_deref(),
                    nodes: &names,
                    gres_type: &gres_type,
                    gpus_per_node: u32::try_from(per_node).unwrap_or(0),
                    exclusive: per_node >= node_gpus,
                    time_limit_seconds: current.max_runtime_seconds.or(current.duration_seconds),
                    user: user.as_deref(),
                    output_dir: &super::output_dir(&cluster, user.as_deref()),
                },
                launch.as_ref(),
            );
            let out = slurm
                .run("sbatch", &submission.args, &[], Some(&submission.script))
                .await?;
            // `--parsable` prints `id` or `id;cluster`.
            out.trim()
                .split(';')
                .next()
                .and_then(|id| id.parse().ok())
                .ok_or_else(|| super::command::SlurmError {
                    program: "sbatch".into(),
                    problem: format!("answered {:?}, not a job id", out.trim()),
                })?
        }
    };
    let txn = gantry_core::db::write(db).await?;
    let recorded = slurm_job::Entity::update_many()
        .col_expr(slurm_job::Column::JobId, Expr::value(Some(job_id)))
        .col_expr(slurm_job::Column::State, Expr::value(Some("PENDING")))
        .filter(slurm_job::Column::OrderId.eq(order_id))
        .filter(slurm_job::Column::Attempt.eq(attempt))
        .filter(slurm_job::Column::Finished.eq(false))
        .exec(&txn)
        .await?;
    // Stopped while `sbatch` ran: the job it made is nobody's.
    if recorded.rows_affected == 0 {
        txn.commit().await?;
        slurm
            .run("scancel", &[job_id.to_string()], &[], None)
            .await?;
        return Ok(());
    }
    order::Entity::update_many()
        .col_expr(
            order::Column::Status,
            Expr::value(OrderStatus::Provisioning),
        )
        .col_expr(
            order::Column::PendingReason,
            Expr::value(Option::<String>::None),
        )
        .col_expr(order::Column::UpdatedAt, Expr::value(now))
        .filter(order::Column::Id.eq(order_id))
        .filter(order::Column::Status.eq(OrderStatus::Scheduled))
        .exec(&txn)
        .await?;
    txn.commit().await?;
    Ok(())
}

/// The job an earlier try submitted under `name`, submitted in the last
/// `since` seconds: from the controller while it still lists the job, else
/// from accounting, where a finished job stays after the controller
/// forgets it (`MinJobAge`).
async fn found_again(slurm: &Slurm, name: &str, since: i64) -> Result<Option<i64>, SyncError> {
    let first_id = |out: String| {
        out.lines()
            .find_map(|l| l.trim().split(['|', ';']).next()?.parse::<i64>().ok())
    };
    let listed = slurm
        .run(
            "squeue",
            &[
                "--noheader".into(),
                "--all".into(),
                "--states=all".into(),
                format!("--name={name}"),
                "--format=%i".into(),
            ],
            &[],
            None,
        )
        .await?;
    if let Some(id) = first_id(listed) {
        return Ok(Some(id));
    }
    let accounted = slurm
        .run(
            "sacct",
            &[
                "--allocations".into(),
                "--allusers".into(),
                "--noheader".into(),
                "--parsable2".into(),
                format!("--starttime=now-{since}"),
                format!("--name={name}"),
                "--format=JobID".into(),
            ],
            &[],
            None,
        )
        .await?;
    Ok(first_id(accounted))
}

/// Readies organization user `user` on `cluster` once per process: its
/// own output directory (mode 0700), and where jobs are charged to an
/// account, its association with it.
async fn ready(
    slurm: &Slurm,
    cluster: &slurm_cluster::Model,
    readied: &Readied,
    user: &str,
) -> Result<(), SyncError> {
    let key = (cluster.region_id, user.to_owned());
    if readied.lock().is_ok_and(|r| r.contains(&key)) {
        return Ok(());
    }
    let dir = super::output_dir(cluster, Some(user));
    slurm
        .run(
            "install",
            &[
                "-d".into(),
                "-m".into(),
                "0700".into(),
                "-o".into(),
                user.to_owned(),
                "-g".into(),
                user.to_owned(),
                "--".into(),
                dir,
            ],
            &[],
            None,
        )
        .await?;
    if let Some(account) = &cluster.account {
        let added = slurm
            .run(
                "sacctmgr",
                &[
                    "--immediate".into(),
                    "add".into(),
                    "user".into(),
                    format!("name={user}"),
                    format!("account={account}"),
                ],
                &[],
                None,
            )
            .await;
        match added {
            Ok(_) => {}
            Err(error) if error.problem.contains("Nothing new added") => {}
            Err(error) => return Err(error.into()),
        }
    }
    if let Ok(mut readied) = readied.lock() {
        readied.insert(key);
    }
    Ok(())
}

/// Cancels the order's Slurm job. Slurm's cancel signals its processes
/// at once and kills what is left after the cluster's `KillWait`: on a
/// Slurm region that is the grace period. The sync records the stop once
/// Slurm's accounting has the job's end; an attempt never submitted stops
/// at once (true then).
pub async fn cancel(
    db: &DatabaseConnection,
    clock: &Clock,
    order_id: Uuid,
) -> Result<bool, SyncError> {
    let row = slurm_job::Entity::find()
        .filter(slurm_job::Column::OrderId.eq(order_id))
        .filter(slurm_job::Column::Finished.eq(false))
        .order_by_desc(slurm_job::Column::Attempt)
        .one(db)
        .await?;
    let cluster = match &row {
        Some(row) => {
            slurm_cluster::Entity::find_by_id(row.region_id)
                .one(db)
                .await?
        }
        None => None,
    };
    let (Some(cluster), Some(job_id)) = (cluster, row.as_ref().and_then(|r| r.job_id)) else {
        let txn = gantry_core::db::write(db).await?;
        if let Some(row) = &row {
            finished(&txn, order_id, row.attempt, "NOT_SUBMITTED").await?;
        }
        lifecycle::stopped(&txn, order_id, None, clock.now()).await?;
        txn.commit().await?;
        return Ok(true);
    };
    // A job that ended meanwhile answers with an error: its end is read
    // back all the same.
    if let Err(error) = Slurm::of(&cluster)
        .run("scancel", &[job_id.to_string()], &[], None)
        .await
    {
        tracing::info!(%error, %order_id, "Slurm job not cancelled");
    }
    Ok(false)
}

/// Marks an attempt's Slurm job as read to its end.
async fn finished(
    db: &impl ConnectionTrait,
    order_id: Uuid,
    attempt: i32,
    state: &str,
) -> Result<(), DbErr> {
    slurm_job::Entity::update_many()
        .col_expr(slurm_job::Column::Finished, Expr::value(true))
        .col_expr(
            slurm_job::Column::State,
            Expr::value(Some(state.to_owned())),
        )
        .filter(slurm_job::Column::OrderId.eq(order_id))
        .filter(slurm_job::Column::Attempt.eq(attempt))
        .exec(db)
        .await?;
    Ok(())
}

/// One read of a region.
#[derive(Clone, Copy)]
pub struct Read<'a> {
    pub slurm: &'a Slurm,
    pub cluster: &'a slurm_cluster::Model,
    pub now: DateTime<Utc>,
    /// Whether running jobs' output is due to be read into their logs.
    pub output: bool,
}

/// Reads the partition's jobs once and moves every unfinished attempt on:
/// running ones come up with the GPUs Slurm bound, ended ones end as
/// Slurm's accounting says. Also counts the GPUs jobs Gantry did not
/// submit hold. True when an order moved.
pub async fn follow(
    db: &DatabaseConnection,
    sealer: &Sealer,
    readied: &Readied,
    log_limit: i64,
    read: Read<'_>,
) -> Result<bool, SyncError> {
    let Read {
        slurm,
        cluster,
        now,
        output: read_output,
    } = read;
    let rows = slurm_job::Entity::find()
        .filter(slurm_job::Column::RegionId.eq(cluster.region_id))
        .filter(slurm_job::Column::Finished.eq(false))
        .all(db)
        .await?;
    let shown = slurm
        .run(
            "scontrol",
            &[
                "--details".into(),
                "--oneliner".into(),
                "show".into(),
                "job".into(),
            ],
            &[("SLURM_TIME_FORMAT", "%s")],
            None,
        )
        .await;
    // With no job at all, older releases answer with an error.
    let shown = match shown {
        Ok(out) => parse::shown_jobs(&out),
        Err(error) if error.problem.contains("No jobs in the system") => Vec::new(),
        Err(error) => return Err(error.into()),
    };
    let ours: HashSet<i64> = rows.iter().filter_map(|r| r.job_id).collect();
    let names: HashSet<&str> = rows.iter().map(|r| r.name.as_str()).collect();
    record_outside(db, cluster, &shown, &ours, &names).await?;
    let by_id: HashMap<i64, &ShownJob> = shown.iter().map(|j| (j.id, j)).collect();
    let mut changed = false;
    let mut known = Vec::new();
    let mut to_read = Vec::new();
    let mut running = Vec::new();
    for row in &rows {
        let Some(job_id) = row.job_id else {
            if !due_again(row, now) {
                continue;
            }
            let coming_up = order::Entity::find_by_id(row.order_id)
                .one(db)
                .await?
                .is_some_and(|o| {
                    o.attempts == row.attempt
                        && matches!(o.status, OrderStatus::Scheduled | OrderStatus::Provisioning)
                });
            if coming_up {
                tracing::info!(order_id = %row.order_id, "submitting to Slurm again");
                // One job Slurm refuses (its user missing on the cluster,
                // say) holds up none of the others: its order says why.
                match submit(db, sealer, readied, row.order_id).await {
                    Ok(()) => {}
                    Err(SyncError::Db(error)) => return Err(error.into()),
                    Err(SyncError::Slurm(error)) => {
                        tracing::info!(%error, order_id = %row.order_id, "Slurm refused a submission again");
                    }
                }
            } else {
                // Its order moved on before Slurm ever took the job.
                finished(db, row.order_id, row.attempt, "NOT_SUBMITTED").await?;
            }
            continue;
        };
        match by_id.get(&job_id) {
            Some(job) if job.state == "PENDING" => {
                let state = match &job.reason {
                    Some(reason) => format!("PENDING ({reason})"),
                    None => "PENDING".to_owned(),
                };
                if row.state.as_deref() != Some(state.as_str()) {
                    slurm_job::Entity::update_many()
                        .col_expr(slurm_job::Column::State, Expr::value(Some(state.clone())))
                        .filter(slurm_job::Column::OrderId.eq(row.order_id))
                        .filter(slurm_job::Column::Attempt.eq(row.attempt))
                        .exec(db)
                        .await?;
                    waits_because(
                        db,
                        row.order_id,
                        format!("in Slurm's queue as job {job_id}: {state}"),
                    )
                    .await?;
                }
            }
            Some(job) if !parse::is_final(&job.state) && row.started_at.is_some() => {
                running.push(row);
            }
            // The controller says at once what accounting records a moment
            // later; accounting is read for the jobs it no longer lists.
            Some(job) => match job.accounted() {
                Some(record) => known.push((row, record)),
                None => to_read.push(row),
            },
            None => to_read.push(row),
        }
    }
    let ids: Vec<String> = to_read
        .iter()
        .filter_map(|r| r.job_id.map(|id| id.to_string()))
        .collect();
    let mut accounted: HashMap<i64, Accounted> = HashMap::new();
    // Command lines have a limit: a long backlog is read in parts.
    for part in ids.chunks(SACCT_JOBS_MAX) {
        let out = slurm
            .run(
                "sacct",
                &[
                    "--allocations".into(),
                    "--noheader".into(),
                    "--parsable2".into(),
                    format!("--jobs={}", part.join(",")),
                    format!("--format={}", parse::SACCT_FORMAT),
                ],
                &[("SLURM_TIME_FORMAT", "%s")],
                None,
            )
            .await?;
        accounted.extend(parse::accounted(&out).into_iter().map(|a| (a.id, a)));
    }
    // Only jobs that still run: one that ended is read to its end below,
    // from the offsets this read loaded.
    // Output not read now (a file the commands' host does not see) is
    // read at the job's end or on a later read; it holds nothing else up.
    if read_output
        && !running.is_empty()
        && let Err(error) = output::follow(db, slurm, cluster, &running, log_limit, now).await
    {
        tracing::info!(%error, region_id = %cluster.region_id, "running jobs' output not read");
    }
    known.extend(
        to_read
            .into_iter()
            .filter_map(|row| Some((row, accounted.remove(&row.job_id?)?))),
    );
    for (row, record) in &known {
        let job_id = record.id;
        if record.is_final() {
            end(
                db,
                log_limit,
                slurm,
                cluster,
                row,
                record,
                by_id.get(&job_id).copied(),
            )
            .await?;
            changed = true;
        } else if let (Some(start), Some(job)) = (record.start, by_id.get(&job_id)) {
            let txn = gantry_core::db::write(db).await?;
            changed |= came_up(&txn, cluster, row, job_id, start, job).await?;
            txn.commit().await?;
        }
    }
    Ok(changed)
}

/// Records the GPUs of each node that running jobs Gantry did not submit
/// hold: counted per node for the operator, and marked on the GPUs' rows
/// so the scheduler plans around them.
async fn record_outside(
    db: &impl ConnectionTrait,
    cluster: &slurm_cluster::Model,
    shown: &[ShownJob],
    ours: &HashSet<i64>,
    names: &HashSet<&str>,
) -> Result<(), DbErr> {
    let mut outside: BTreeMap<&str, usize> = BTreeMap::new();
    let mut held: HashSet<(&str, i32)> = HashSet::new();
    // A job of ours found again after a crash has our name before its id
    // is written.
    for job in shown.iter().filter(|j| {
        j.partition == cluster.partition
            && matches!(j.state.as_str(), "RUNNING" | "COMPLETING" | "SUSPENDED")
            && !ours.contains(&j.id)
            && !names.contains(j.name.as_str())
    }) {
        for (node, gpus) in &job.gpus {
            *outside.entry(node.as_str()).or_default() += gpus.len();
            held.extend(
                gpus.iter()
                    .filter_map(|i| Some((node.as_str(), i32::try_from(*i).ok()?))),
            );
        }
    }
    let stored = serde_json::to_string(&outside).ok();
    if cluster.outside == stored && held.is_empty() {
        // No outside work, before or now: no GPU is marked.
        return Ok(());
    }
    // The marks first, only of GPUs whose mark changes; the counts are
    // written last, so a read cut short between the two is done again.
    let held_nodes: HashMap<Uuid, String> = if held.is_empty() {
        HashMap::new()
    } else {
        node::Entity::find()
            .filter(node::Column::RegionId.eq(cluster.region_id))
            .filter(node::Column::Driver.eq(DriverKind::Slurm))
            .filter(node::Column::Name.is_in(held.iter().map(|(name, _)| *name)))
            .all(db)
            .await?
            .into_iter()
            .map(|n| (n.id, n.name))
            .collect()
    };
    let held_ids: Vec<Uuid> = gpu::Entity::find()
        .filter(gpu::Column::NodeId.is_in(held_nodes.keys().copied()))
        .all(db)
        .await?
        .into_iter()
        .filter(|g| {
            held_nodes
                .get(&g.node_id)
                .is_some_and(|name| held.contains(&(name.as_str(), g.index)))
        })
        .map(|g| g.id)
        .collect();
    if !held_ids.is_empty() {
        gpu::Entity::update_many()
            .col_expr(gpu::Column::HeldOutside, Expr::value(true))
            .filter(gpu::Column::Id.is_in(held_ids.iter().copied()))
            .filter(gpu::Column::HeldOutside.eq(false))
            .exec(db)
            .await?;
    }
    gpu::Entity::update_many()
        .col_expr(gpu::Column::HeldOutside, Expr::value(false))
        .filter(gpu::Column::HeldOutside.eq(true))
        .filter(gpu::Column::Id.is_not_in(held_ids))
        .filter(
            gpu::Column::NodeId.in_subquery(
                node::Entity::find()
                    .select_only()
                    .column(node::Column::Id)
                    .filter(node::Column::RegionId.eq(cluster.region_id))
                    .filter(node::Column::Driver.eq(DriverKind::Slurm))
                    .into_query(),
            ),
        )
        .exec(db)
        .await?;
    if cluster.outside != stored {
        slurm_cluster::Entity::update_many()
            .col_expr(slurm_cluster::Column::Outside, Expr::value(stored))
            .filter(slurm_cluster::Column::RegionId.eq(cluster.region_id))
            .exec(db)
            .await?;
    }
    Ok(())
}

/// The attempt runs: its allocations take the GPU indices Slurm bound,
/// and its order comes up at Slurm's start time.
async fn came_up(
    db: &impl ConnectionTrait,
    cluster: &slurm_cluster::Model,
    row: &slurm_job::Model,
    job_id: i64,
    start: DateTime<Utc>,
    job: &ShownJob,
) -> Result<bool, DbErr> {
    let allocations = allocation::Entity::find()
        .filter(allocation::Column::OrderId.eq(row.order_id))
        .filter(allocation::Column::State.ne(AllocationState::Released))
        .all(db)
        .await?;
    let nodes: HashMap<Uuid, node::Model> = node::Entity::find()
        .filter(node::Column::Id.is_in(allocations.iter().map(|a| a.node_id)))
        .all(db)
        .await?
        .into_iter()
        .map(|n| (n.id, n))
        .collect();
    for a in &allocations {
        let Some(node) = nodes.get(&a.node_id) else {
            continue;
        };
        if let Some((_, bound)) = job.gpus.iter().find(|(name, _)| *name == node.name) {
            rebind(db, a, bound).await?;
        }
    }
    let bound: BTreeMap<&str, &Vec<u32>> = job.gpus.iter().map(|(n, g)| (n.as_str(), g)).collect();
    slurm_job::Entity::update_many()
        .col_expr(
            slurm_job::Column::State,
            Expr::value(Some(job.state.clone())),
        )
        .col_expr(
            slurm_job::Column::Bound,
            Expr::value(serde_json::to_string(&bound).ok()),
        )
        .col_expr(slurm_job::Column::StartedAt, Expr::value(Some(start)))
        .filter(slurm_job::Column::OrderId.eq(row.order_id))
        .filter(slurm_job::Column::Attempt.eq(row.attempt))
        .exec(db)
        .await?;
    let mut names: Vec<&str> = nodes.values().map(|n| n.name.as_str()).collect();
    names.sort_unstable();
    let access = OrderAccess {
        driver: "slurm".into(),
        runtime: None,
        hosts: names
            .iter()
            .map(|name| HostAccess {
                node: (*name).to_owned(),
                host: (*name).to_owned(),
                private_address: None,
                ssh: (cluster.access == SlurmAccess::Ssh).then(|| SshAccess {
                    command: format!("ssh {name}"),
                    user: String::new(),
                    port: 22,
                    host_key_fingerprint: None,
                }),
                ports: Vec::new(),
            })
            .collect(),
        slurm: Some(SlurmJobAccess {
            job_id,
            command: format!("srun --jobid={job_id} --overlap --pty bash"),
        }),
    };
    let access = serde_json::to_string(&access).unwrap_or_default();
    lifecycle::came_up(db, row.order_id, access, start).await
}

/// Gives allocation `a` the GPU indices Slurm bound on its node: a GPU
/// Gantry had given another allocation there (one Slurm has not started
/// yet) trades places with the one `a` leaves, so every GPU stays held
/// once.
async fn rebind(
    db: &impl ConnectionTrait,
    a: &allocation::Model,
    bound: &[u32],
) -> Result<(), DbErr> {
    let held = a.gpu_list();
    let mut sorted = held.clone();
    sorted.sort_unstable();
    if sorted == bound || held.len() != bound.len() {
        return Ok(());
    }
    let gpus: HashMap<u32, Uuid> = gpu::Entity::find()
        .filter(gpu::Column::NodeId.eq(a.node_id))
        .all(db)
        .await?
        .into_iter()
        .filter_map(|g| Some((u32::try_from(g.index).ok()?, g.id)))
        .collect();
    let freed: Vec<u32> = held
        .iter()
        .copied()
        .filter(|i| !bound.contains(i))
        .collect();
    let wanted: Vec<u32> = bound
        .iter()
        .copied()
        .filter(|i| !held.contains(i))
        .collect();
    let id_of = |index: &u32| gpus.get(index).copied();
    gpu_claim::Entity::delete_many()
        .filter(gpu_claim::Column::AllocationId.eq(a.id))
        .filter(gpu_claim::Column::GpuId.is_in(freed.iter().filter_map(id_of)))
        .exec(db)
        .await?;
    for (want, free) in wanted.iter().zip(&freed) {
        let (Some(want_id), Some(free_id)) = (id_of(want), id_of(free)) else {
            continue;
        };
        let Some(claim) = gpu_claim::Entity::find_by_id(want_id).one(db).await? else {
            continue;
        };
        gpu_claim::Entity::delete_by_id(want_id).exec(db).await?;
        gpu_claim::ActiveModel {
            gpu_id: Set(free_id),
            allocation_id: Set(claim.allocation_id),
            order_id: Set(claim.order_id),
        }
        .insert(db)
        .await?;
        if let Some(other) = allocation::Entity::find_by_id(claim.allocation_id)
            .one(db)
            .await?
        {
            let traded: Vec<u32> = other
                .gpu_list()
                .into_iter()
                .map(|i| if i == *want { *free } else { i })
                .collect();
            allocation::Entity::update_many()
                .col_expr(
                    allocation::Column::GpuIndices,
                    Expr::value(serde_json::to_string(&traded).unwrap_or_default()),
                )
                .filter(allocation::Column::Id.eq(other.id))
                .exec(db)
                .await?;
        }
    }
    let claims: Vec<gpu_claim::ActiveModel> = wanted
        .iter()
        .filter_map(id_of)
        .map(|gpu_id| gpu_claim::ActiveModel {
            gpu_id: Set(gpu_id),
            allocation_id: Set(a.id),
            order_id: Set(a.order_id),
        })
        .collect();
    if !claims.is_empty() {
        gpu_claim::Entity::insert_many(claims).exec(db).await?;
    }
    allocation::Entity::update_many()
        .col_expr(
            allocation::Column::GpuIndices,
            Expr::value(serde_json::to_string(bound).unwrap_or_default()),
        )
        .filter(allocation::Column::Id.eq(a.id))
        .exec(db)
        .await?;
    Ok(())
}

/// The attempt ended in Slurm: its output joins the job's log, and its
/// order ends as Slurm's final state says, at Slurm's end time.
async fn end(
    db: &DatabaseConnection,
    log_limit: i64,
    slurm: &Slurm,
    cluster: &slurm_cluster::Model,
    row: &slurm_job::Model,
    record: &Accounted,
    shown: Option<&ShownJob>,
) -> Result<(), SyncError> {
    let Some(current) = order::Entity::find_by_id(row.order_id).one(db).await? else {
        return Ok(());
    };
    // What the job wrote since the last read while it ran, up to what its
    // log still takes (one byte more, so an overflow is marked).
    let files = output::files(cluster, current.org_id, row);
    let room = (log_limit - current.log_bytes).max(0) + 1;
    let mut lines = Vec::new();
    for (stream, (path, offset)) in [(Stream::Stdout, &files.out), (Stream::Stderr, &files.err)] {
        match output::read_from(slurm, path, *offset, room).await {
            Ok(bytes) => lines.extend(
                output::lines(&bytes, true)
                    .1
                    .into_iter()
                    .map(|l| (stream, l)),
            ),
            Err(error) => tracing::info!(%error, order_id = %row.order_id, "no Slurm output read"),
        }
    }
    let end_at = record.end.unwrap_or_else(Utc::now);
    let txn = gantry_core::db::write(db).await?;
    // Work that ran between two syncs comes up first, so its time is
    // metered from Slurm's start.
    if let (Some(start), Some(job_id)) = (record.start, row.job_id)
        && row.started_at.is_none()
    {
        let job = shown.cloned().unwrap_or_default();
        came_up(&txn, cluster, row, job_id, start, &job).await?;
    }
    let current = order::Entity::find_by_id(current.id)
        .one(&txn)
        .await?
        .unwrap_or(current);
    let log_node = output::log_node(&txn, row).await?;
    if current.kind == gantry_workload::jobs::KIND
        && let Some(node_id) = log_node
    {
        gantry_workload::jobs::logs::keep(&txn, &current, node_id, lines, log_limit, end_at)
            .await?;
    }
    slurm_job::Entity::update_many()
        .col_expr(slurm_job::Column::Finished, Expr::value(true))
        .col_expr(
            slurm_job::Column::State,
            Expr::value(Some(record.state.clone())),
        )
        .col_expr(slurm_job::Column::StartedAt, Expr::value(record.start))
        .col_expr(slurm_job::Column::EndedAt, Expr::value(record.end))
        .filter(slurm_job::Column::OrderId.eq(row.order_id))
        .filter(slurm_job::Column::Attempt.eq(row.attempt))
        .exec(&txn)
        .await?;
    let asked_to_stop = allocation::Entity::find()
        .filter(allocation::Column::OrderId.eq(current.id))
        .filter(allocation::Column::State.eq(AllocationState::Stopping))
        .one(&txn)
        .await?
        .is_some();
    let status_to = |status: OrderStatus, reason: String| {
        order::Entity::update_many()
            .col_expr(order::Column::Status, Expr::value(status))
            .col_expr(
                if status == OrderStatus::Preempted {
                    order::Column::PendingReason
                } else {
                    order::Column::FailureReason
                },
                Expr::value(Some(reason)),
            )
            .col_expr(order::Column::UpdatedAt, Expr::value(end_at))
            .filter(order::Column::Id.eq(current.id))
            .filter(order::Column::Status.is_in([
                OrderStatus::Scheduled,
                OrderStatus::Provisioning,
                OrderStatus::Running,
            ]))
    };
    if asked_to_stop {
        lifecycle::stopped(&txn, current.id, None, end_at).await?;
    } else {
        match record.state.as_str() {
            "COMPLETED" | "FAILED" | "OUT_OF_MEMORY" => {
                // A signal's death reads as a shell would show it.
                let code = if record.signal > 0 {
                    128 + record.signal
                } else {
                    record.exit_code
                };
                let message = (record.state == "OUT_OF_MEMORY")
                    .then(|| "Slurm stopped it: out of memory".to_owned());
                lifecycle::ended(
                    &txn,
                    &current,
                    None,
                    Ending::Exited(Some(code)),
                    message,
                    end_at,
                )
                .await?;
            }
            "TIMEOUT" => {
                status_to(
                    OrderStatus::TimedOut,
                    "Slurm stopped it at its time limit".into(),
                )
                .exec(&txn)
                .await?;
                lifecycle::stop(&txn, current.id, end_at, StopCause::Walltime).await?;
                lifecycle::stopped(&txn, current.id, None, end_at).await?;
            }
            "NODE_FAIL" | "BOOT_FAIL" | "PREEMPTED" => {
                status_to(
                    OrderStatus::Preempted,
                    format!(
                        "its Slurm job {} ended with {}; queued again",
                        row.job_id.unwrap_or_default(),
                        record.state
                    ),
                )
                .exec(&txn)
                .await?;
                lifecycle::stop(&txn, current.id, end_at, StopCause::NodeUnhealthy).await?;
                lifecycle::stopped(&txn, current.id, None, end_at).await?;
            }
            other => {
                let message = format!(
                    "its Slurm job {} ended with {other}, outside Gantry",
                    row.job_id.unwrap_or_default()
                );
                lifecycle::ended(
                    &txn,
                    &current,
                    None,
                    Ending::Exited(None),
                    Some(message),
                    end_at,
                )
                .await?;
            }
        }
    }
    txn.commit().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(submitted_at: DateTime<Utc>, retry_at: Option<DateTime<Utc>>) -> slurm_job::Model {
        slurm_job::Model {
            order_id: Uuid::nil(),
            attempt: 1,
            region_id: Uuid::nil(),
            name: "gantry-0-1".into(),
            job_id: None,
            state: None,
            bound: None,
            submitted_at,
            tries: 1,
            retry_at,
            out_read: 0,
            err_read: 0,
            started_at: None,
            ended_at: None,
            finished: false,
        }
    }

    #[test]
    fn refused_submissions_back_off_to_five_minutes() {
        let waits: Vec<i64> = (1..=9).map(|t| retry_wait(t).num_seconds()).collect();
        assert_eq!(waits, [5, 10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(retry_wait(i32::MAX).num_seconds(), 300);
        assert_eq!(retry_wait(0).num_seconds(), 5);
    }

    #[test]
    fn a_try_is_due_at_its_retry_time_or_once_an_unfinished_one_is_over() {
        let now = Utc::now();
        let second = chrono::Duration::seconds(1);
        // Refused: due at its retry time, however recent the try.
        assert!(!due_again(&row(now, Some(now + second)), now));
        assert!(due_again(&row(now, Some(now)), now));
        // No answer recorded (the process died mid-try): due once no try
        // could still run.
        assert!(!due_again(&row(now - second * 39, None), now));
        assert!(due_again(&row(now - second * 40, None), now));
    }
}
