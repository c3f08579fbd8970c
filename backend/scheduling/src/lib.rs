//! The scheduling loop inside the server. The process holding the
//! scheduler lease keeps the cluster and queue in memory (`world`, kept up
//! to date from the change log), asks the engine for decisions, writes them
//! in one transaction and hands starts and stops to the provisioning
//! driver. It wakes on every new order,
//! release or inventory change, and at least every `scheduler_interval_ms`.

pub mod apply;
mod defrag;
mod plan;
pub mod status;
pub mod what_if;

use gantry_world::gate::Gate;
use gantry_world::input::Input;
use gantry_world::{lease, load, world};

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{ColumnTrait, DbErr, EntityTrait, QueryFilter};
use tokio::sync::watch;
use uuid::Uuid;

use gantry_core::state::AppState;
use gantry_entities::{allocation, change_log, order};
use gantry_monitoring::{fleet, history};
use gantry_provisioning::Driver;
use gantry_provisioning::simulated::{SimulatedDriver, Timing};
use gantry_provisioning::slurm::SlurmDriver;
use gantry_types::classes::{AllocationState, DriverKind, NodeState, OrderStatus, StopCause};
use gantry_workload::orders::lifecycle;
use world::{Followed, World};

/// The name of the scheduler's lease row.
pub const LEASE: &str = "scheduler";

/// How often the leader meters: spans end on whole seconds, so a cycle woken
/// by every order need not meter again within one.
const METER_EVERY: chrono::TimeDelta = chrono::TimeDelta::seconds(1);
/// How often the leader looks for last month's usage still to invoice and
/// brings budgeted organizations' spend up to date.
const MONTH_CHECK_EVERY: chrono::TimeDelta = chrono::TimeDelta::minutes(1);

/// How often the leader publishes fleet, queue and order gauges: a
/// Prometheus scrape interval or faster, without a grouped count of every
/// order on each cycle.
const PUBLISH_EVERY: chrono::TimeDelta = chrono::TimeDelta::seconds(5);
/// How late a publish may get while arrivals keep coming, each planned
/// before it.
const PUBLISH_OVERDUE: chrono::TimeDelta = chrono::TimeDelta::seconds(10);

/// How often at most the leader works out launch room for every instance
/// type while the fleet or the queue changes (and in the cycle after one
/// that started or preempted work, which the room it worked out before
/// deciding does not show); while nothing changes, it does so with each
/// publish.
const ROOMS_EVERY: chrono::TimeDelta = chrono::TimeDelta::seconds(1);

/// How often the leader looks for GPUs still held by ended orders.
const RECLAIM_EVERY: chrono::TimeDelta = chrono::TimeDelta::seconds(10);
/// How often the leader compares its copy of the rows with a full read,
/// and trims the change log it has followed.
const CHECK_EVERY: Duration = Duration::from_secs(60);

/// The longest a woken cycle waits after the last one; see `run`.
const REST_MAX: Duration = Duration::from_millis(500);

/// How many change log rows are kept behind the leader's position, for
/// diagnosis; older ones are deleted.
const LOG_KEPT: i64 = 100_000;

/// When the leader last metered, looked for a month to close and for GPUs
/// to reclaim (domain time, so tests that move the clock see them happen).
#[derive(Default)]
struct Due {
    metered: Option<DateTime<Utc>>,
    month_checked: Option<DateTime<Utc>>,
    reclaimed: Option<DateTime<Utc>>,
    checked: Option<Instant>,
    /// Whether the last month-end and budget pass still runs.
    closing: Arc<AtomicBool>,
    /// Up to when usage was last metered as final.
    metered_to: Option<DateTime<Utc>>,
    /// When the fleet and order gauges were last published, and what they
    /// held.
    published_at: Option<DateTime<Utc>>,
    published: fleet::Published,
    /// When launch room was last worked out, and the change log's position
    /// then.
    rooms_at: Option<DateTime<Utc>>,
    rooms_cursor: i64,
    /// The fleet history interval being folded.
    history: history::Recorder,
    /// Defragmentation moves of the past hour.
    defrag: defrag::Ledger,
    /// Whether the copy checked this cycle differed from a full read; the
    /// cycle checks its kept engine input too and records both.
    copy_checked: Option<bool>,
    /// What the last whole plan kept for blocked work.
    plan: plan::KeptPlan,
    /// Queued jobs' dependencies, read once each.
    dependencies: gantry_world::gate::Dependencies,
}

/// The drivers that bring work up on nodes the control plane runs for
/// them; agents fetch their own work.
struct Drivers<'a> {
    simulated: &'a SimulatedDriver,
    slurm: &'a SlurmDriver,
}

impl Drivers<'_> {
    fn of(&self, kind: DriverKind) -> Option<&dyn Driver> {
        match kind {
            DriverKind::Simulated => Some(self.simulated),
            DriverKind::Slurm => Some(self.slurm),
            DriverKind::Agent => None,
        }
    }
}

/// Orders already handed to the driver by this process, so each is handed
/// once per process (and again after a restart).
#[derive(Default)]
struct Handed {
    starts: HashSet<Uuid>,
    stops: HashSet<Uuid>,
}

/// Runs the loop until `stop` turns true, then gives the lease up.
pub async fn run(state: AppState, mut stop: watch::Receiver<bool>) {
    let config = &state.config;
    let interval = Duration::from_millis(config.scheduler_interval_ms);
    let driver = SimulatedDriver::new(
        state.db.clone(),
        state.scheduler.clone(),
        state.clock.clone(),
        Timing {
            provision: Duration::from_millis(config.simulated_provision_ms),
            stop: Duration::from_millis(config.simulated_stop_ms),
            failure_rate: config.simulated_failure_rate,
        },
    );
    let slurm = SlurmDriver::new(
        state.db.clone(),
        state.scheduler.clone(),
        state.clock.clone(),
        state.secret_env_sealer.clone(),
        i64::try_from(config.job_log_limit_bytes).unwrap_or(i64::MAX),
    );
    let drivers = Drivers {
        simulated: &driver,
        slurm: &slurm,
    };
    let keeper = tokio::spawn(keep_lease(state.clone(), stop.clone()));
    let mut handed = Handed::default();
    let mut due = Due::default();
    let mut world: Option<World> = None;
    let mut input = Input::default();
    loop {
        let began = Instant::now();
        if state.scheduler.is_leader() {
            let kept = (&mut world, &mut input);
            if let Err(error) = cycle(&state, &drivers, kept, &mut handed, &mut due).await {
                tracing::warn!(%error, "scheduling cycle failed; reading everything again");
                world = None;
                input.forget();
                due.plan.forget();
            }
            // Only the agents whose work the cycle's changes touched look
            // again; after a full read, or a failed cycle, all of them do.
            match world.as_mut().and_then(World::take_touched) {
                Some(nodes) => state.scheduler.assignments_changed_on(&nodes),
                None => state.scheduler.assignments_may_have_changed(),
            }
        } else {
            // A replica that does not lead keeps its copy warm from the
            // change log, so taking over costs the lease and a catch-up,
            // not a full read. What it handed as leader, it hands again;
            // it plans the whole queue first.
            handed = Handed::default();
            due.plan.forget();
            due.dependencies = gantry_world::gate::Dependencies::default();
            match follow(&state, &mut world, &mut due, Role::Follower).await {
                // The engine's input is kept warm too; the gate and the
                // plan are the leader's to work out.
                Ok(kept) => {
                    let changed = kept.take_changed();
                    let now = state.clock.now();
                    let (loaded, _) = input.prepare(kept, changed.as_ref(), Gate::default(), now);
                    input.keep(loaded);
                }
                Err(error) => {
                    tracing::warn!(%error, "following the change log failed; reading everything again");
                    world = None;
                    input.forget();
                }
            }
        }
        // Woken cycles coalesce under load: the next one starts no sooner
        // than the last one took after it ended, so the loop uses at most
        // half a core and each cycle takes in what arrived meanwhile. A
        // quiet loop's last cycle ended long ago, so an arrival there is
        // planned at once. A long cycle (a full read) holds the next one
        // back by at most `REST_MAX`.
        let rested = tokio::time::Instant::now() + began.elapsed().min(REST_MAX);
        tokio::select! {
            () = state.scheduler.woken() => {
                tokio::select! {
                    () = tokio::time::sleep_until(rested) => {}
                    _ = stop.changed() => break,
                }
            }
            () = tokio::time::sleep(interval) => {}
            _ = stop.changed() => break,
        }
    }
    keeper.await.ok();
    if state.scheduler.is_leader() {
        state.scheduler.set_leader(false);
        if let Err(error) = lease::release(&state.db, LEASE, state.scheduler.holder()).await {
            tracing::warn!(%error, "could not give the scheduler lease up");
        }
    }
}

/// Takes and renews the scheduler lease four times per lease life, apart
/// from the cycles: a long cycle never lets the lease lapse, so the lease
/// can be short and a dead leader is replaced within about one lease life.
async fn keep_lease(state: AppState, mut stop: watch::Receiver<bool>) {
    let seconds = state.config.scheduler_lease_seconds;
    let ttl = chrono::Duration::seconds(i64::try_from(seconds).unwrap_or(10));
    let renew_every = Duration::from_secs(seconds) / 4;
    let holder = state.scheduler.holder().to_owned();
    loop {
        let leading = match lease::hold(&state.db, LEASE, &holder, ttl).await {
            Ok(held) => held,
            Err(error) => {
                tracing::warn!(%error, "could not take or renew the scheduler lease");
                false
            }
        };
        let was = state.scheduler.set_leader(leading);
        fleet::set_leader(leading);
        if leading && !was {
            tracing::info!(%holder, "this process now runs the scheduling loop");
            state.scheduler.wake();
        }
        tokio::select! {
            () = tokio::time::sleep(renew_every) => {}
            _ = stop.changed() => break,
        }
    }
}

/// One pass: ends work that reached its duration, moves work off draining
/// and unhealthy nodes, places what waits, and hands the results to the
/// driver.
async fn cycle(
    state: &AppState,
    drivers: &Drivers<'_>,
    (world, input): (&mut Option<World>, &mut Input),
    handed: &mut Handed,
    due: &mut Due,
) -> anyhow::Result<()> {
    let began = Instant::now();
    let now = state.clock.now();
    let deadline = chrono::Duration::seconds(
        i64::try_from(state.config.agent_heartbeat_deadline_seconds).unwrap_or(30),
    );
    gantry_agents::health::mark_silent(&state.db, deadline, now).await?;
    let loading = Instant::now();
    // Marks in milliseconds since the cycle began, for the cycle log: where
    // a slow load went, and when the starts reached the driver.
    let mark = || began.elapsed().as_secs_f64() * 1000.0;
    let silent_ms = mark();
    let world = follow(state, world, due, Role::Leader).await?;
    let follow_ms = mark();
    let placed = placed(world);
    end_expired(state, &placed, now).await?;
    let placed_orders: Vec<&order::Model> = placed.iter().map(|p| p.order).collect();
    gantry_workload::jobs::time_out(&state.db, placed_orders, now).await?;
    let timeout_ms = mark();
    gantry_workload::reservations::service::end_windows(&state.db, world, now).await?;
    evacuate(state, world, now).await?;
    follow_log(state, world).await?;
    let changed = world.take_changed();
    let gate = due
        .dependencies
        .gate(&state.db, world, changed.as_ref())
        .await?;
    let gate_ms = mark();
    let (mut loaded, mut delta) = input.prepare(world, changed.as_ref(), gate.clone(), now);
    if let Some(copy_differed) = due.copy_checked.take() {
        // The kept input is checked beside the copy: it must equal one
        // built whole from the same copy.
        let mut fresh = Input::default();
        let (whole, whole_delta) = fresh.prepare(world, None, gate, now);
        let differences = gantry_world::input::differences(&loaded, &whole);
        if !differences.is_empty() {
            tracing::error!(
                ?differences,
                "the engine's kept input differed from one built whole; using the whole one"
            );
            *input = fresh;
            loaded = whole;
            delta = whole_delta;
        }
        state
            .scheduler
            .record_check(copy_differed, !differences.is_empty());
    }
    // The engine never sees them; they can never run.
    gantry_workload::jobs::dependencies::fail_broken(&state.db, &loaded.broken, now).await?;
    let load_ms = loading.elapsed().as_secs_f64() * 1000.0;
    let pending = loaded.snapshot.pending.len();
    let deciding = Instant::now();
    let per_hour = state.config.defrag_budget_gpu_seconds_per_org_hour;
    let ledger = std::mem::take(&mut due.defrag);
    let publishing = match due.published_at.map(|at| now - at) {
        Some(since) if since < PUBLISH_EVERY => plan::Publishing::No,
        Some(since) if since < PUBLISH_OVERDUE => plan::Publishing::Due,
        _ => plan::Publishing::Overdue,
    };
    let scope = due.plan.scope(
        &delta,
        &loaded.snapshot,
        publishing,
        state.config.scheduler_whole_plan_below,
        now,
    );
    fleet::record_cycle_scope(scope.name());
    if matches!(scope, plan::Scope::Arrivals(_)) {
        state.scheduler.record_arrival_plan();
    }
    // Launch room reads the whole queue: it waits for a whole plan, and so
    // does the publish.
    let whole = matches!(scope, plan::Scope::Whole);
    let publish_due = whole && publishing != plan::Publishing::No;
    let rooms = if whole
        && (publish_due
            || (due.rooms_at.is_none_or(|at| now - at >= ROOMS_EVERY)
                && due.rooms_cursor != world.cursor()))
    {
        due.rooms_at = Some(now);
        due.rooms_cursor = world.cursor();
        launch_shapes(world)
    } else {
        (Vec::new(), Vec::new())
    };
    let (types, shapes) = rooms;
    let holds = due.plan.holds().to_vec();
    let (planned, scope) = tokio::task::spawn_blocking(move || {
        let asked = gantry_scheduler::Asked {
            capacity: publish_due,
            launch: &shapes,
        };
        let planned = plan::decide(loaded, &scope, &holds, &asked, ledger, per_hour);
        (planned, scope)
    })
    .await?;
    let plan::Planned {
        loaded,
        decisions,
        reports,
        ledger,
    } = planned;
    due.defrag = ledger;
    due.plan.keep(&scope, &decisions, &loaded.snapshot);
    let decide_ms = deciding.elapsed().as_secs_f64() * 1000.0;
    let writing = Instant::now();
    let applied = apply::apply(&state.db, &world.orders, &loaded, &decisions, now).await?;
    let write_ms = writing.elapsed().as_secs_f64() * 1000.0;
    fleet::record_preemptions(&decisions);
    // Only starts and preemptions give the driver something new to hand,
    // and it gets them before anything else the cycle does; launch room,
    // worked out before them, is worked out again next cycle.
    if applied.started + applied.preempted > 0 {
        follow_log(state, world).await?;
        due.rooms_at = None;
    }
    hand_over(world, drivers, handed);
    let handed_ms = mark();
    drivers.slurm.keep_in_step();
    if !types.is_empty() {
        let regions: HashMap<&str, Uuid> = world
            .regions
            .values()
            .map(|r| (r.name.as_str(), r.id))
            .collect();
        let rooms: Vec<_> = types.into_iter().zip(reports.launch).collect();
        if let Err(error) =
            gantry_catalog::availability::record(&state.db, &rooms, &regions, now).await
        {
            tracing::warn!(%error, "could not write launch room; retrying");
            due.rooms_at = None;
        }
    }
    if let Some(capacity) = reports.capacity {
        due.published_at = Some(now);
        publish(state, world, &loaded, &decisions, &capacity, due, now).await;
    }
    keep_house(state, due, now, deadline).await;
    let total_ms = mark();
    for (phase, ms) in [
        ("load", load_ms),
        ("engine", decide_ms),
        ("write", write_ms),
        ("total", total_ms),
    ] {
        fleet::record_phase(phase, ms / 1000.0);
    }
    let changed = applied.started + applied.preempted + applied.rejected > 0;
    if changed {
        tracing::info!(
            pending,
            started = applied.started,
            preempted = applied.preempted,
            rejected = applied.rejected,
            total_ms,
            "scheduling cycle"
        );
    }
    tracing::debug!(
        pending,
        planned = scope.name(),
        arrived = delta.arrived.len(),
        running = loaded.snapshot.running.len(),
        nodes = loaded.snapshot.cluster.nodes.len(),
        queued = world.orders.len(),
        started = applied.started,
        reasons_written = applied.waiting,
        load_ms,
        decide_ms,
        write_ms,
        silent_ms,
        follow_ms,
        timeout_ms,
        gate_ms,
        handed_ms,
        total_ms,
        "cycle timing"
    );
    input.keep(loaded);
    Ok(())
}

/// Metering, volumes on simulated nodes, the month's close and GPUs held
/// by ended orders: after the cycle's decisions are handed over, so that
/// none of it stands between an order and its start. The silent nodes were
/// marked at the cycle's start: every fault before `now − deadline` is
/// known, so spans up to there are final. Billing trouble is logged and
/// retried next cycle; it never holds placement up.
async fn keep_house(
    state: &AppState,
    due: &mut Due,
    now: DateTime<Utc>,
    deadline: chrono::Duration,
) {
    let interval = i64::try_from(state.config.metering_interval_seconds).unwrap_or(60);
    if due.metered.is_none_or(|at| now - at >= METER_EVERY) {
        due.metered = Some(now);
        match gantry_metering::meter(&state.db, now - deadline, interval).await {
            Ok(_) => due.metered_to = Some(now - deadline),
            Err(error) => tracing::warn!(%error, "metering failed; retrying next cycle"),
        }
    }
    if let Err(error) = gantry_volumes::nodes::keep_on_simulated_nodes(&state.db, now).await {
        tracing::warn!(%error, "simulated nodes could not keep their volumes");
    }
    if let Some(to) = due.metered_to {
        fleet::set_metering_lag((now - to).num_milliseconds() as f64 / 1000.0);
    }
    if due
        .month_checked
        .is_none_or(|at| now - at >= MONTH_CHECK_EVERY)
    {
        due.month_checked = Some(now);
        // Rating whole months takes seconds for large tenants: it runs
        // beside the loop, one pass at a time, so placement never waits.
        if !due.closing.swap(true, Ordering::AcqRel) {
            let (state, closing) = (state.clone(), due.closing.clone());
            tokio::spawn(async move {
                close_month_and_budgets(&state, now).await;
                closing.store(false, Ordering::Release);
            });
        }
    }
    if due.reclaimed.is_none_or(|at| now - at >= RECLAIM_EVERY) {
        due.reclaimed = Some(now);
        match gantry_workload::orders::reconcile::reclaim(&state.db, now).await {
            Ok(gpus) => fleet::set_held_by_ended(gpus),
            Err(error) => {
                tracing::warn!(%error, "looking for GPUs held by ended orders failed; retrying");
            }
        }
    }
}

/// The fleet, queue, order and SLA gauges, and the fleet history; a
/// failed read is logged and tried again at the next publish, never
/// failing the cycle.
async fn publish(
    state: &AppState,
    world: &World,
    loaded: &load::Loaded,
    decisions: &gantry_scheduler::Decisions,
    (capacity, by_region): &(
        gantry_scheduler::CapacityReport,
        BTreeMap<String, gantry_scheduler::CapacityReport>,
    ),
    due: &mut Due,
    now: DateTime<Utc>,
) {
    let published = &mut due.published;
    fleet::publish_fleet(published, world, capacity, by_region);
    let pending = match fleet::publish_pending(published, &state.db, world, loaded, decisions).await
    {
        Ok(pending) => pending,
        Err(error) => {
            tracing::warn!(%error, "could not publish waiting orders");
            decisions.waiting.len() + loaded.held.len()
        }
    };
    if let Err(error) = fleet::publish_orders(published, &state.db).await {
        tracing::warn!(%error, "could not publish orders by status");
    }
    if let Err(error) = gantry_core::handles::waiting::fold(&state.db).await {
        tracing::warn!(%error, "could not fold the waiting moves; retrying at the next publish");
    }
    if let Err(error) = fleet::publish_storage(published, &state.db, world).await {
        tracing::warn!(%error, "could not publish storage");
    }
    if let Err(error) = fleet::publish_sla_risk(published, &state.db, world, now).await {
        tracing::warn!(%error, "could not publish orders whose SLA is at risk");
    }
    let seen = history::Observation {
        world,
        capacity,
        pending,
    };
    let every = i64::try_from(state.config.history_interval_seconds).unwrap_or(60);
    let retention =
        chrono::TimeDelta::days(i64::try_from(state.config.history_retention_days).unwrap_or(8));
    if let Err(error) = due
        .history
        .observe(&state.db, &seen, now, every, retention)
        .await
    {
        tracing::warn!(%error, "could not write fleet history; the interval is lost");
    }
}

/// Every instance type with a known GPU model, and beside it, in the same
/// order, the shape a launch of it asks for.
fn launch_shapes(world: &World) -> (Vec<Uuid>, Vec<gantry_scheduler::LaunchShape>) {
    world
        .instance_types
        .values()
        .filter_map(|t| {
            let model = world.gpu_models.get(&t.gpu_model_id)?;
            Some((
                t.id,
                gantry_catalog::availability::launch_shape(t, &model.name),
            ))
        })
        .unzip()
}

/// Invoices last month once it is final, and brings budgets up to date.
async fn close_month_and_budgets(state: &AppState, now: DateTime<Utc>) {
    let settle = gantry_billing::invoices::settle_time(
        state.config.agent_heartbeat_deadline_seconds,
        state.config.metering_interval_seconds,
    );
    match gantry_billing::invoices::close_month(&state.db, &state.config.currency, now, settle)
        .await
    {
        Ok(0) => {}
        Ok(invoiced) => tracing::info!(invoiced, "finalized last month's invoices"),
        Err(error) => tracing::warn!(%error, "could not close last month; retrying"),
    }
    if let Err(error) = gantry_billing::budgets::refresh(&state.db, now).await {
        tracing::warn!(?error, "could not bring budgets up to date; retrying");
    }
    if let Err(error) = gantry_billing::prepaid::draw(state, now).await {
        tracing::warn!(?error, "could not draw from prepaid balances; retrying");
    }
}

/// Whether this process runs the loop or keeps a copy for when it will.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Leader,
    Follower,
}

/// This process's copy of the rows, read whole when it has none and
/// brought up to date from the change log otherwise; compared with a full
/// read every `CHECK_EVERY` or when asked (asks are the leader's).
async fn follow<'w>(
    state: &AppState,
    world: &'w mut Option<World>,
    due: &mut Due,
    role: Role,
) -> Result<&'w mut World, DbErr> {
    let asked = role == Role::Leader && state.scheduler.take_consistency_request();
    let Some(kept) = world.take() else {
        due.checked = Some(Instant::now());
        state.scheduler.record_full_read();
        return Ok(world.insert(World::load(&state.db).await?));
    };
    let kept = world.insert(kept);
    follow_log(state, kept).await?;
    if asked || due.checked.is_none_or(|at| at.elapsed() >= CHECK_EVERY) {
        due.checked = Some(Instant::now());
        let differed = check_consistency(state, kept, role).await?;
        if role == Role::Leader {
            due.copy_checked = Some(differed);
        }
    }
    Ok(kept)
}

/// Applies the changes logged since the last call, or reads everything
/// again when the log cannot be followed from where the copy stands.
async fn follow_log(state: &AppState, world: &mut World) -> Result<(), DbErr> {
    if let Followed::Lost = world.follow(&state.db).await? {
        tracing::warn!("too many changes missing from the log; reading everything again");
        state.scheduler.record_full_read();
        *world = World::load(&state.db).await?;
    }
    Ok(())
}

/// How many times a check reads again before it calls a difference real:
/// a change that lands between the full read and the copy's own following
/// differs for a moment without being wrong.
const CHECK_ROUNDS: usize = 3;

/// Compares the copy with a full read; a real difference (a write the log
/// missed) is reported loudly and the full read replaces the copy. The
/// leader also trims the change log behind its copy's position.
async fn check_consistency(state: &AppState, world: &mut World, role: Role) -> Result<bool, DbErr> {
    let mut fresh = World::load(&state.db).await?;
    let mut differences = Vec::new();
    for _ in 0..CHECK_ROUNDS {
        follow_log(state, world).await?;
        follow_log(state, &mut fresh).await?;
        differences = world.differences(&fresh);
        if differences.is_empty() {
            break;
        }
    }
    let differed = !differences.is_empty();
    if differed {
        tracing::error!(
            ?differences,
            "the scheduler's copy of the cluster and queue differed from the database; \
             using a full read"
        );
        *world = fresh;
    }
    if role == Role::Follower {
        return Ok(differed);
    }
    change_log::Entity::delete_many()
        .filter(change_log::Column::Seq.lt(world.cursor() - LOG_KEPT))
        .exec(&state.db)
        .await?;
    Ok(differed)
}

/// Running orders whose duration has passed are completed and stopped. A
/// job's duration is only an estimate where an agent runs its command (the
/// command decides when it ends); on simulated nodes it is the job's length.
async fn end_expired(
    state: &AppState,
    placed: &[Placed<'_>],
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    let expired: Vec<&order::Model> = placed
        .iter()
        .filter(|p| !(p.order.kind == gantry_workload::jobs::KIND && p.on_agent))
        .map(|p| p.order)
        .filter(|o| o.status == OrderStatus::Running)
        .filter(|o| match (o.started_at, o.duration_seconds) {
            (Some(started), Some(duration)) => started + chrono::Duration::seconds(duration) <= now,
            _ => false,
        })
        .collect();
    for o in expired {
        let id = o.id;
        // A job on simulated nodes ends as its simulated command does,
        // whichever of the two sees its length pass first.
        if o.kind == gantry_workload::jobs::KIND {
            gantry_provisioning::simulated::complete(&state.db, id, now).await?;
            continue;
        }
        let txn = gantry_core::db::write(&state.db).await?;
        let ended = order::Entity::update_many()
            .col_expr(order::Column::Status, Expr::value(OrderStatus::Completed))
            .col_expr(order::Column::UpdatedAt, Expr::value(now))
            .filter(order::Column::Id.eq(id))
            .filter(order::Column::Status.eq(OrderStatus::Running))
            .exec(&txn)
            .await?;
        if ended.rows_affected == 1 {
            lifecycle::stop(&txn, id, now, StopCause::DurationReached).await?;
        }
        txn.commit().await?;
    }
    Ok(())
}

/// An order that holds allocations, and whether an agent runs any of it.
struct Placed<'a> {
    order: &'a order::Model,
    on_agent: bool,
}

/// The orders that hold allocations: every running one among them. The
/// copy's other orders wait, and a queue is far longer than a fleet.
fn placed(world: &World) -> Vec<Placed<'_>> {
    let mut on_agent: HashMap<Uuid, bool> = HashMap::new();
    for a in world.allocations.values() {
        let agent = world
            .nodes
            .get(&a.node_id)
            .is_some_and(|n| n.driver == DriverKind::Agent);
        *on_agent.entry(a.order_id).or_default() |= agent;
    }
    on_agent
        .into_iter()
        .filter_map(|(id, on_agent)| {
            world
                .orders
                .get(&id)
                .map(|order| Placed { order, on_agent })
        })
        .collect()
}

/// Work on draining nodes (and unhealthy simulated ones) is stopped and
/// queued again.
async fn evacuate(state: &AppState, world: &World, now: DateTime<Utc>) -> Result<(), DbErr> {
    let mut hit: HashMap<Uuid, Vec<Uuid>> = HashMap::new();
    for a in world.allocations.values() {
        let leaving = world
            .nodes
            .get(&a.node_id)
            .is_some_and(|n| matches!(n.state, NodeState::Draining | NodeState::Unhealthy));
        if leaving && a.state == AllocationState::Active {
            hit.entry(a.order_id).or_default().push(a.node_id);
        }
    }
    for (order_id, nodes) in hit {
        let names: Vec<&str> = nodes
            .iter()
            .filter_map(|id| world.nodes.get(id).map(|n| n.name.as_str()))
            .collect();
        // A drain is the operator's choice; any other node leaving is a fault.
        let drained = nodes.iter().any(|id| {
            world
                .nodes
                .get(id)
                .is_some_and(|n| n.state == NodeState::Draining)
        });
        let (cause, why) = if drained {
            (StopCause::NodeDrained, "drained for maintenance")
        } else {
            (StopCause::NodeUnhealthy, "unhealthy")
        };
        let reason = format!(
            "its node {} is leaving service ({why}); queued again",
            names.join(", ")
        );
        let txn = gantry_core::db::write(&state.db).await?;
        let moved = order::Entity::update_many()
            .col_expr(order::Column::Status, Expr::value(OrderStatus::Preempted))
            .col_expr(
                order::Column::PendingReason,
                Expr::value(Some(reason.clone())),
            )
            .col_expr(order::Column::UpdatedAt, Expr::value(now))
            .filter(order::Column::Id.eq(order_id))
            .filter(order::Column::Status.is_in([
                OrderStatus::Scheduled,
                OrderStatus::Provisioning,
                OrderStatus::Running,
            ]))
            .exec(&txn)
            .await?;
        // Evidence for SLA reports: maintenance interrupted this order.
        if moved.rows_affected > 0
            && let Some(o) = order::Entity::find_by_id(order_id).one(&txn).await?
        {
            for node_id in nodes {
                let details = serde_json::json!({ "reason": "node drained or unhealthy" });
                gantry_agents::health::record(&txn, node_id, "maintenance", Some(&o), details, now)
                    .await?;
            }
            // The tenant reads it in its own audit log, beside the order's reason.
            gantry_core::audit::record(
                &txn,
                gantry_core::audit::Change {
                    org_id: Some(o.org_id),
                    action: "order.moved_off_node",
                    target_type: "order",
                    target_id: Some(o.id.to_string()),
                    details: serde_json::json!({ "nodes": names, "reason": reason }),
                    actor: &gantry_core::auth::principal::Actor::system(),
                },
            )
            .await?;
        }
        lifecycle::stop(&txn, order_id, now, cause).await?;
        txn.commit().await?;
    }
    Ok(())
}

/// Hands each driver every order on its nodes being brought up or
/// stopped that this process has not handed yet. Agents fetch their own
/// work.
fn hand_over(world: &World, drivers: &Drivers<'_>, handed: &mut Handed) {
    // Every node of an order has one driver: its region's.
    let live: HashMap<Uuid, (&allocation::Model, &dyn Driver)> = world
        .allocations
        .values()
        .filter_map(|a| {
            let driver = world
                .nodes
                .get(&a.node_id)
                .and_then(|n| drivers.of(n.driver))?;
            Some((a.id, (a, driver)))
        })
        .collect();
    let coming_up: HashMap<Uuid, &dyn Driver> = live
        .values()
        .filter(|(a, _)| {
            world.orders.get(&a.order_id).is_some_and(|o| {
                matches!(o.status, OrderStatus::Scheduled | OrderStatus::Provisioning)
            })
        })
        .map(|(a, driver)| (a.order_id, *driver))
        .collect();
    let stopping: HashMap<Uuid, (DateTime<Utc>, &dyn Driver)> = live
        .values()
        .filter(|(a, _)| a.state == AllocationState::Stopping)
        .map(|(a, driver)| (a.order_id, (a.stop_at.unwrap_or_else(Utc::now), *driver)))
        .collect();
    handed.starts.retain(|id| coming_up.contains_key(id));
    handed.stops.retain(|id| stopping.contains_key(id));
    for (id, driver) in coming_up {
        if handed.starts.insert(id) {
            driver.start(id);
        }
    }
    for (id, (stop_at, driver)) in stopping {
        if handed.stops.insert(id) {
            driver.stop(id, stop_at);
        }
    }
}
