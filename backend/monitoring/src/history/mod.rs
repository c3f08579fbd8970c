//! The fleet over time, kept by the server so the console can chart the
//! last hour, day or week without a Prometheus. The scheduling leader
//! folds what it publishes to `/metrics` (every few seconds) into one mean
//! per series and interval, writes it when the interval closes, and drops
//! rows past the retention. Reading sums the intervals into the steps a
//! chart needs.

pub mod api;

use std::collections::HashMap;

use chrono::{DateTime, TimeDelta, Utc};
use gantry_scheduler as engine;
use sea_orm::sea_query::{Expr, OnConflict};
use sea_orm::{ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QuerySelect, Set};
use serde::Serialize;
use utoipa::ToSchema;
use uuid::Uuid;

use gantry_entities::{gpu_telemetry, history_sample, order};
use gantry_types::classes::{AllocationState, HistoryMetric, OrderStatus};
use gantry_world::world::World;

/// How the intervals of `metric` inside one chart step combine.
fn combine(metric: HistoryMetric, sum: f64, max: f64, count: i64) -> f64 {
    match metric {
        HistoryMetric::GpuHours => sum,
        HistoryMetric::AdmissionWaitP95Seconds => max,
        _ => sum / count.max(1) as f64,
    }
}

/// What one publish saw, for the interval being folded.
pub struct Observation<'a> {
    pub world: &'a World,
    pub capacity: &'a engine::CapacityReport,
    pub pending: usize,
}

/// The leader's fold of the current interval.
#[derive(Default)]
pub struct Recorder {
    /// The interval being folded, as its start in Unix seconds.
    interval: Option<i64>,
    sums: HashMap<(HistoryMetric, String), f64>,
    observations: u32,
}

impl Recorder {
    /// Folds one publish in; when it falls in a later interval than the
    /// one being folded, that one is written first.
    pub async fn observe(
        &mut self,
        db: &impl ConnectionTrait,
        seen: &Observation<'_>,
        now: DateTime<Utc>,
        every: i64,
        retention: TimeDelta,
    ) -> Result<(), DbErr> {
        let every = every.max(1);
        let interval = now.timestamp().div_euclid(every) * every;
        if let Some(open) = self.interval.filter(|open| *open != interval) {
            let result = self.write(db, seen.world, open, every).await;
            self.interval = None;
            self.sums.clear();
            self.observations = 0;
            result?;
            history_sample::Entity::delete_many()
                .filter(history_sample::Column::At.lt((now - retention).timestamp()))
                .exec(db)
                .await?;
        }
        self.interval = Some(interval);
        self.observations += 1;
        for model in &seen.capacity.models {
            let schedulable = u64::from(model.free)
                * u64::from(1000 - model.fragmentation_permille.min(1000))
                / 1000;
            for (metric, value) in [
                (HistoryMetric::GpusAllocated, f64::from(model.allocated)),
                (HistoryMetric::GpusFree, f64::from(model.free)),
                (HistoryMetric::GpusSchedulable, schedulable as f64),
            ] {
                *self.sums.entry((metric, model.model.clone())).or_default() += value;
            }
        }
        *self
            .sums
            .entry((HistoryMetric::PendingOrders, String::new()))
            .or_default() += seen.pending as f64;
        // Running as its order's status says: the leader's copy of the rows
        // follows statuses, not each allocation's metering start.
        let running = |a: &&gantry_entities::allocation::Model| {
            a.state != AllocationState::Released
                && seen
                    .world
                    .orders
                    .get(&a.order_id)
                    .is_some_and(|o| o.status == OrderStatus::Running)
        };
        for allocation in seen.world.allocations.values().filter(running) {
            let gpus = allocation.gpu_count() as f64 * f64::from(allocation.gpu_milli) / 1000.0;
            *self
                .sums
                .entry((HistoryMetric::GpuHours, allocation.org_id.to_string()))
                .or_default() += gpus;
        }
        Ok(())
    }

    /// Writes the folded interval: means of what was observed (a series
    /// missing from some publishes counts 0 there), and what only the
    /// database knows of the interval, waits and telemetry.
    async fn write(
        &self,
        db: &impl ConnectionTrait,
        world: &World,
        interval: i64,
        every: i64,
    ) -> Result<(), DbErr> {
        let observations = f64::from(self.observations.max(1));
        let mut rows: Vec<(HistoryMetric, String, f64)> = self
            .sums
            .iter()
            .map(|((metric, subject), sum)| {
                let mean = sum / observations;
                let value = if *metric == HistoryMetric::GpuHours {
                    mean * every as f64 / 3600.0
                } else {
                    mean
                };
                (*metric, subject.clone(), value)
            })
            .collect();
        let (from, to) = (
            DateTime::from_timestamp(interval, 0).unwrap_or_default(),
            DateTime::from_timestamp(interval + every, 0).unwrap_or_default(),
        );
        if let Some(p95) = admission_wait_p95(db, from, to).await? {
            rows.push((HistoryMetric::AdmissionWaitP95Seconds, String::new(), p95));
        }
        rows.extend(
            utilization_by_model(db, world, from, to)
                .await?
                .into_iter()
                .map(|(model, ratio)| (HistoryMetric::GpuUtilizationRatio, model, ratio)),
        );
        if rows.is_empty() {
            return Ok(());
        }
        // A replica that takes over the lead mid-interval writes the same
        // interval again: its fold replaces the first one's.
        history_sample::Entity::insert_many(rows.into_iter().map(|(metric, subject, value)| {
            history_sample::ActiveModel {
                metric: Set(metric),
                subject: Set(subject),
                at: Set(interval),
                value: Set(value),
            }
        }))
        .on_conflict(
            OnConflict::columns([
                history_sample::Column::Metric,
                history_sample::Column::Subject,
                history_sample::Column::At,
            ])
            .update_column(history_sample::Column::Value)
            .to_owned(),
        )
        .exec_without_returning(db)
        .await?;
        Ok(())
    }
}

/// The nearest-rank 95th percentile of the waits of orders that first
/// came up in `[from, to)`, in seconds.
async fn admission_wait_p95(
    db: &impl ConnectionTrait,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Option<f64>, DbErr> {
    let started: Vec<(DateTime<Utc>, Option<DateTime<Utc>>)> = order::Entity::find()
        .select_only()
        .columns([order::Column::CreatedAt, order::Column::StartedAt])
        .filter(order::Column::StartedAt.gte(from))
        .filter(order::Column::StartedAt.lt(to))
        .into_tuple()
        .all(db)
        .await?;
    let mut waits: Vec<f64> = started
        .into_iter()
        .filter_map(|(created, started)| started.map(|s| (s - created).num_milliseconds()))
        .map(|ms| ms.max(0) as f64 / 1000.0)
        .collect();
    if waits.is_empty() {
        return Ok(None);
    }
    waits.sort_by(f64::total_cmp);
    let rank = (waits.len() * 95).div_ceil(100).max(1);
    Ok(waits.get(rank - 1).copied())
}

/// The mean busy share per GPU model of the GPUs that reported in
/// `[from, to)`: each GPU's mean first, so a GPU that reports more often
/// weighs no more.
async fn utilization_by_model(
    db: &impl ConnectionTrait,
    world: &World,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<Vec<(String, f64)>, DbErr> {
    let per_gpu: Vec<(Uuid, i32, Option<i64>, i64)> = gpu_telemetry::Entity::find()
        .select_only()
        .column(gpu_telemetry::Column::NodeId)
        .column(gpu_telemetry::Column::GpuIndex)
        .column_as(Expr::cust("CAST(SUM(utilization_pct) AS BIGINT)"), "total")
        .column_as(gpu_telemetry::Column::SampledAt.count(), "readings")
        .filter(gpu_telemetry::Column::SampledAt.gte(from))
        .filter(gpu_telemetry::Column::SampledAt.lt(to))
        .group_by(gpu_telemetry::Column::NodeId)
        .group_by(gpu_telemetry::Column::GpuIndex)
        .into_tuple()
        .all(db)
        .await?;
    if per_gpu.is_empty() {
        return Ok(Vec::new());
    }
    let models: HashMap<(Uuid, i32), &str> = world
        .gpus
        .values()
        .filter_map(|g| {
            let model = world.gpu_models.get(&g.gpu_model_id)?;
            Some(((g.node_id, g.index), model.name.as_str()))
        })
        .collect();
    let mut by_model: HashMap<&str, (f64, u32)> = HashMap::new();
    for (node, index, total, readings) in per_gpu {
        let Some(model) = models.get(&(node, index)) else {
            continue;
        };
        let mean = total.unwrap_or(0) as f64 / readings.max(1) as f64 / 100.0;
        let entry = by_model.entry(model).or_default();
        entry.0 += mean;
        entry.1 += 1;
    }
    Ok(by_model
        .into_iter()
        .map(|(model, (sum, gpus))| (model.to_owned(), sum / f64::from(gpus.max(1))))
        .collect())
}

/// How far back a chart looks and how wide its steps are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Range {
    Hour,
    Day,
    Week,
}

impl Range {
    fn span(self) -> i64 {
        match self {
            Self::Hour => 3600,
            Self::Day => 86_400,
            Self::Week => 7 * 86_400,
        }
    }

    /// A step a chart draws well (60, 96 or 168 points), never finer than
    /// the intervals history is written at.
    pub fn step(self, every: i64) -> i64 {
        let step = match self {
            Self::Hour => 60,
            Self::Day => 900,
            Self::Week => 3600,
        };
        step.max(every)
    }
}

/// One point of a series: the step's start and value.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Point {
    pub at: DateTime<Utc>,
    pub value: f64,
}

/// One series over the range, oldest first. Steps with no history are
/// left out.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Series {
    pub metric: HistoryMetric,
    /// For series by GPU model.
    pub gpu_model: Option<String>,
    /// For series by organization.
    pub org_id: Option<Uuid>,
    pub organization: Option<String>,
    pub points: Vec<Point>,
}

/// Every series over a range.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct History {
    pub range: Range,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub step_seconds: i64,
    /// How often history is written: the newest step may hold fewer
    /// intervals than the others.
    pub interval_seconds: i64,
    pub series: Vec<Series>,
}

/// The history over `range` up to `now`, summed into chart steps.
pub async fn read(
    db: &impl ConnectionTrait,
    range: Range,
    now: DateTime<Utc>,
    every: i64,
) -> Result<History, DbErr> {
    let step = range.step(every);
    let to = now.timestamp();
    let from = (to - range.span()).div_euclid(step) * step;
    // The step is a server-chosen integer: safe to write into the SQL.
    let bucket = format!("(at / {step}) * {step}");
    let rows: Vec<(HistoryMetric, String, i64, f64, f64, i64)> = history_sample::Entity::find()
        .select_only()
        .column(history_sample::Column::Metric)
        .column(history_sample::Column::Subject)
        .column_as(Expr::cust(bucket.clone()), "bucket")
        .column_as(history_sample::Column::Value.sum(), "total")
        .column_as(history_sample::Column::Value.max(), "highest")
        .column_as(history_sample::Column::Value.count(), "intervals")
        .filter(history_sample::Column::At.gte(from))
        .group_by(history_sample::Column::Metric)
        .group_by(history_sample::Column::Subject)
        .group_by(Expr::cust(bucket))
        .into_tuple()
        .all(db)
        .await?;
    let mut grouped: HashMap<(HistoryMetric, String), Vec<Point>> = HashMap::new();
    for (metric, subject, at, sum, max, count) in rows {
        grouped.entry((metric, subject)).or_default().push(Point {
            at: DateTime::from_timestamp(at, 0).unwrap_or_default(),
            value: combine(metric, sum, max, count),
        });
    }
    let orgs: Vec<Uuid> = grouped
        .keys()
        .filter(|(m, _)| *m == HistoryMetric::GpuHours)
        .filter_map(|(_, s)| Uuid::try_parse(s).ok())
        .collect();
    let names = gantry_access::tenancy::orgs::names(db, orgs).await?;
    let mut series: Vec<Series> = grouped
        .into_iter()
        .map(|((metric, subject), mut points)| {
            points.sort_by_key(|p| p.at);
            let (gpu_model, org_id) = match metric {
                HistoryMetric::PendingOrders | HistoryMetric::AdmissionWaitP95Seconds => {
                    (None, None)
                }
                HistoryMetric::GpuHours => (None, Uuid::try_parse(&subject).ok()),
                _ => (Some(subject), None),
            };
            Series {
                metric,
                organization: org_id.and_then(|id| names.get(&id).cloned()),
                gpu_model,
                org_id,
                points,
            }
        })
        .collect();
    series.sort_by(|a, b| {
        (a.metric.as_str(), &a.gpu_model, &a.organization, a.org_id).cmp(&(
            b.metric.as_str(),
            &b.gpu_model,
            &b.organization,
            b.org_id,
        ))
    });
    Ok(History {
        range,
        from: DateTime::from_timestamp(from, 0).unwrap_or_default(),
        to: now,
        step_seconds: step,
        interval_seconds: every,
        series,
    })
}
