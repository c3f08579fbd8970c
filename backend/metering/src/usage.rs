//! The usage API: metered GPU-seconds of an organization (or, for
//! operators, of all of them) over a period, and the GiB-seconds its
//! volumes held, grouped and totalled, as JSON or CSV.
//!
//! A record belongs to the period its span starts in. Spans never cross an
//! hour (UTC), so any period on whole hours, and every day, is exact.

use std::collections::HashMap;

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Datelike, TimeDelta, TimeZone, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QuerySelect, Select, TryGetableMany,
};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use gantry_access::tenancy::access::{OrgAccess, need};
use gantry_core::auth::principal::Operator;
use gantry_core::error::{ApiError, ApiResult, ProblemResponses};
use gantry_core::http::csv::{Format, Table};
use gantry_core::http::extract::ApiQuery;
use gantry_core::state::AppState;
use gantry_entities::{allocation, gpu_telemetry, order, project, usage_record};
use gantry_types::classes::PricingClass;

/// The longest period one request may cover.
const PERIOD_MAX_DAYS: i64 = 400;

/// How usage is grouped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum GroupBy {
    /// The UTC day the usage started in.
    #[default]
    Day,
    Order,
    GpuModel,
    Project,
    Region,
    InstanceType,
    PricingClass,
    /// Operators only.
    Organization,
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct UsageQuery {
    /// Start of the period (inclusive, RFC 3339); the first of this month
    /// (UTC) when absent.
    pub from: Option<DateTime<Utc>>,
    /// End of the period (exclusive); now when absent. At most 400 days
    /// after `from`.
    pub to: Option<DateTime<Utc>>,
    /// `day` when absent.
    pub group_by: Option<GroupBy>,
    /// `json` when absent; `csv` answers `text/csv`.
    pub format: Option<Format>,
}

#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct OrgFilter {
    /// Only this organization.
    pub org_id: Option<Uuid>,
}

/// GPU-seconds, measured and billable: time a provider fault had an
/// allocation down is measured but excluded from billing.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
pub struct UsageFigures {
    /// GPUs × seconds held while running.
    pub gpu_seconds: i64,
    /// `gpu_seconds` less `excluded_gpu_seconds`: what is billed.
    pub billable_gpu_seconds: i64,
    /// GPUs × seconds down through a provider fault.
    pub excluded_gpu_seconds: i64,
    /// Nodes × seconds held while running.
    pub node_seconds: i64,
    /// GiB × seconds volumes held at the size sold, as invoiced; counted
    /// in groups by day, project, region and organization, and in totals.
    pub storage_gib_seconds: i64,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct UsageGroup {
    /// The day (`YYYY-MM-DD`), or the id of the order, GPU model, project,
    /// region, instance type or organization; the pricing class; empty for
    /// usage outside any project.
    pub key: String,
    /// A readable name for `key`.
    pub label: String,
    #[serde(flatten)]
    pub figures: UsageFigures,
    /// With `group_by=order`: the mean GPU utilization its node agents
    /// reported for its GPUs while it held them (allocation is not
    /// utilization); null without samples (simulated nodes send none).
    pub mean_gpu_utilization_percent: Option<f64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Usage {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    pub group_by: GroupBy,
    pub groups: Vec<UsageGroup>,
    pub totals: UsageFigures,
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(org_usage))
        .routes(routes!(all_usage))
}

/// The organization's metered usage over a period, grouped and totalled.
#[utoipa::path(
    get,
    path = "/orgs/{org_id}/usage",
    tag = "usage",
    params(("org_id" = Uuid, Path, description = "Organization id"), UsageQuery),
    responses(
        (status = 200, description = "Usage with totals, as JSON or (`format=csv`) CSV",
         content((Usage = "application/json"), (String = "text/csv"))),
        ProblemResponses,
    ),
    security(("bearer" = []))
)]
async fn org_usage(
    State(state): State<AppState>,
    access: OrgAccess<need::Billing>,
    ApiQuery(query): ApiQuery<UsageQuery>,
) -> ApiResult<Response> {
    let group_by = query.group_by.unwrap_or_default();
    if group_by == GroupBy::Organization {
        return Err(ApiError::unprocessable(
            "invalid_group_by",
            "group_by=organization is for operators; an organization's usage is its own",
        ));
    }
    let (from, to) = period(query.from, query.to, state.clock.now())?;
    let usage = summarize(
        &state.db,
        access.scope.select::<usage_record::Entity>(),
        Some(access.scope.org_id),
        from,
        to,
        group_by,
    )
    .await?;
    Ok(respond(usage, query.format.unwrap_or_default()))
}

/// Metered usage across organizations, for operators.
#[utoipa::path(
    get,
    path = "/admin/usage",
    tag = "admin",
    params(UsageQuery, OrgFilter),
    responses(
        (status = 200, description = "Usage with totals, as JSON or (`format=csv`) CSV",
         content((Usage = "application/json"), (String = "text/csv"))),
        ProblemResponses,
    ),
    security(("bearer" = []))
)]
async fn all_usage(
    State(state): State<AppState>,
    _operator: Operator,
    ApiQuery(query): ApiQuery<UsageQuery>,
    ApiQuery(filter): ApiQuery<OrgFilter>,
) -> ApiResult<Response> {
    let (from, to) = period(query.from, query.to, state.clock.now())?;
    let mut select = usage_record::Entity::find();
    if let Some(org_id) = filter.org_id {
        select = select.filter(usage_record::Column::OrgId.eq(org_id));
    }
    let usage = summarize(
        &state.db,
        select,
        filter.org_id,
        from,
        to,
        query.group_by.unwrap_or_default(),
    )
    .await?;
    Ok(respond(usage, query.format.unwrap_or_default()))
}

/// The period asked for, checked: from the first of this month (UTC) to
/// now unless told otherwise.
pub fn period(
    from: Option<DateTime<Utc>>,
    to: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> ApiResult<(DateTime<Utc>, DateTime<Utc>)> {
    let from = match from {
        Some(from) => from,
        None => Utc
            .with_ymd_and_hms(now.year(), now.month(), 1, 0, 0, 0)
            .single()
            .unwrap_or(now),
    };
    let to = to.unwrap_or(now);
    if from >= to {
        return Err(ApiError::unprocessable(
            "invalid_period",
            format!("`from` ({from}) must be before `to` ({to})"),
        ));
    }
    if to - from > TimeDelta::days(PERIOD_MAX_DAYS) {
        return Err(ApiError::unprocessable(
            "invalid_period",
            format!("a period may cover at most {PERIOD_MAX_DAYS} days; ask for several"),
        ));
    }
    Ok((from, to))
}

/// Sums over SQL; the products are cast so that PostgreSQL answers a
/// BIGINT, as SQLite does, rather than a NUMERIC. GPU-seconds are weighted
/// by each record's share of its GPUs, in thousandths, and rounded down
/// once per group by [`Sums::figures`].
fn sums(select: Select<usage_record::Entity>) -> Select<usage_record::Entity> {
    select
        .column_as(
            Expr::cust("CAST(SUM(gpus * seconds * gpu_milli) AS BIGINT)"),
            "gpu_milli_seconds",
        )
        .column_as(
            Expr::cust("CAST(SUM(gpus * excluded_seconds * gpu_milli) AS BIGINT)"),
            "excluded_gpu_milli_seconds",
        )
        .column_as(Expr::cust("CAST(SUM(seconds) AS BIGINT)"), "node_seconds")
}

/// Usage before rounding: what groups add up to for the period's total,
/// which must not depend on how the period is grouped (by day, a period
/// across midnight would otherwise lose a second to rounding).
#[derive(Default)]
struct Sums {
    gpu_milli_seconds: i64,
    excluded_gpu_milli_seconds: i64,
    node_seconds: i64,
}

impl Sums {
    fn add(&mut self, other: &Self) {
        self.gpu_milli_seconds += other.gpu_milli_seconds;
        self.excluded_gpu_milli_seconds += other.excluded_gpu_milli_seconds;
        self.node_seconds += other.node_seconds;
    }

    fn figures(&self) -> UsageFigures {
        let gpu_seconds = self.gpu_milli_seconds / 1000;
        let excluded_gpu_seconds = self.excluded_gpu_milli_seconds / 1000;
        UsageFigures {
            gpu_seconds,
            billable_gpu_seconds: gpu_seconds - excluded_gpu_seconds,
            excluded_gpu_seconds,
            node_seconds: self.node_seconds,
            storage_gib_seconds: 0,
        }
    }
}

/// Grouped sums of `records` whose span starts in `[from, to)`, with the
/// storage organization `org_id`'s volumes (or everyone's) held then.
pub async fn summarize(
    db: &impl ConnectionTrait,
    records: Select<usage_record::Entity>,
    org_id: Option<Uuid>,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    group_by: GroupBy,
) -> ApiResult<Usage> {
    use usage_record::Column as C;
    let records = records
        .filter(C::PeriodStart.gte(from))
        .filter(C::PeriodStart.lt(to))
        .select_only();
    let mut total = Sums::default();
    let mut groups: Vec<UsageGroup> = match group_by {
        GroupBy::Day => grouped::<String>(db, records, C::UsageDay, &mut total)
            .await?
            .into_iter()
            .map(|(day, figures)| UsageGroup {
                label: day.clone(),
                key: day,
                figures,
                mean_gpu_utilization_percent: None,
            })
            .collect(),
        GroupBy::PricingClass => grouped::<PricingClass>(db, records, C::PricingClass, &mut total)
            .await?
            .into_iter()
            .map(|(class, figures)| UsageGroup {
                key: class.as_str().to_owned(),
                label: class.as_str().to_owned(),
                figures,
                mean_gpu_utilization_percent: None,
            })
            .collect(),
        GroupBy::Project => {
            let rows = grouped::<Option<Uuid>>(db, records, C::ProjectId, &mut total).await?;
            let names = project_names(db, rows.iter().filter_map(|(id, _)| *id)).await?;
            rows.into_iter()
                .map(|(id, figures)| UsageGroup {
                    key: id.map(|id| id.to_string()).unwrap_or_default(),
                    label: id
                        .and_then(|id| names.get(&id).cloned())
                        .unwrap_or_else(|| "(no project)".into()),
                    figures,
                    mean_gpu_utilization_percent: None,
                })
                .collect()
        }
        by_id => {
            let column = match by_id {
                GroupBy::Order => C::OrderId,
                GroupBy::GpuModel => C::GpuModelId,
                GroupBy::Region => C::RegionId,
                GroupBy::InstanceType => C::InstanceTypeId,
                _ => C::OrgId,
            };
            let rows = grouped::<Uuid>(db, records, column, &mut total).await?;
            let names = names_of(db, by_id, rows.iter().map(|(id, _)| *id)).await?;
            rows.into_iter()
                .map(|(id, figures)| UsageGroup {
                    key: id.to_string(),
                    label: names.get(&id).cloned().unwrap_or_else(|| id.to_string()),
                    figures,
                    mean_gpu_utilization_percent: None,
                })
                .collect()
        }
    };
    if group_by == GroupBy::Order {
        let ids: Vec<Uuid> = groups.iter().filter_map(|g| g.key.parse().ok()).collect();
        let means = utilization(db, &ids, from, to).await?;
        for g in &mut groups {
            g.mean_gpu_utilization_percent = g
                .key
                .parse()
                .ok()
                .and_then(|id: Uuid| means.get(&id).copied());
        }
    }
    let (stored, stored_total) = crate::stored::gib_seconds(db, org_id, from, to, group_by).await?;
    let unlabelled: Vec<Uuid> = stored
        .keys()
        .filter(|key| !groups.iter().any(|g| &g.key == *key))
        .filter_map(|key| key.parse().ok())
        .collect();
    let labels = match group_by {
        GroupBy::Project => project_names(db, unlabelled.into_iter()).await?,
        _ => names_of(db, group_by, unlabelled.into_iter()).await?,
    };
    for (key, gib_seconds) in stored {
        match groups.iter_mut().find(|g| g.key == key) {
            Some(group) => group.figures.storage_gib_seconds = gib_seconds,
            None => groups.push(UsageGroup {
                label: match group_by {
                    GroupBy::Day => key.clone(),
                    GroupBy::Project if key.is_empty() => "(no project)".into(),
                    _ => key
                        .parse()
                        .ok()
                        .and_then(|id: Uuid| labels.get(&id).cloned())
                        .unwrap_or_else(|| key.clone()),
                },
                key,
                figures: UsageFigures {
                    storage_gib_seconds: gib_seconds,
                    ..UsageFigures::default()
                },
                mean_gpu_utilization_percent: None,
            }),
        }
    }
    groups.sort_by(|a, b| a.key.cmp(&b.key));
    let totals = UsageFigures {
        storage_gib_seconds: stored_total,
        ..total.figures()
    };
    Ok(Usage {
        from,
        to,
        group_by,
        groups,
        totals,
    })
}

/// Sums of `records` per value of `column`, each also added to `total`.
async fn grouped<K>(
    db: &impl ConnectionTrait,
    records: Select<usage_record::Entity>,
    column: usage_record::Column,
    total: &mut Sums,
) -> ApiResult<Vec<(K, UsageFigures)>>
where
    K: sea_orm::TryGetable,
    (K, i64, i64, i64): TryGetableMany,
{
    let rows: Vec<(K, i64, i64, i64)> = sums(records.column_as(column, "key"))
        .group_by(column)
        .into_tuple()
        .all(db)
        .await?;
    Ok(rows
        .into_iter()
        .map(
            |(key, gpu_milli_seconds, excluded_gpu_milli_seconds, node_seconds)| {
                let group = Sums {
                    gpu_milli_seconds,
                    excluded_gpu_milli_seconds,
                    node_seconds,
                };
                total.add(&group);
                (key, group.figures())
            },
        )
        .collect())
}

/// The mean utilization agents reported for each order's GPUs while it
/// held them within `[from, to)`.
async fn utilization(
    db: &impl ConnectionTrait,
    orders: &[Uuid],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> ApiResult<HashMap<Uuid, f64>> {
    let mut sums: HashMap<Uuid, (i64, i64)> = HashMap::new();
    for a in allocation::Entity::find()
        .filter(allocation::Column::OrderId.is_in(orders.iter().copied()))
        .filter(allocation::Column::RunningSince.is_not_null())
        .all(db)
        .await?
    {
        let gpus = a.gpu_list();
        let start = a.running_since.map_or(from, |r| r.max(from));
        let end = a.released_at.map_or(to, |r| r.min(to));
        if start >= end || gpus.is_empty() {
            continue;
        }
        let (sum, count): (Option<i64>, i64) = gpu_telemetry::Entity::find()
            .filter(gpu_telemetry::Column::NodeId.eq(a.node_id))
            .filter(gpu_telemetry::Column::GpuIndex.is_in(gpus))
            .filter(gpu_telemetry::Column::SampledAt.gte(start))
            .filter(gpu_telemetry::Column::SampledAt.lt(end))
            .select_only()
            .column_as(Expr::cust("CAST(SUM(utilization_pct) AS BIGINT)"), "total")
            .column_as(Expr::cust("CAST(COUNT(*) AS BIGINT)"), "samples")
            .into_tuple()
            .one(db)
            .await?
            .unwrap_or((None, 0));
        let entry = sums.entry(a.order_id).or_default();
        entry.0 += sum.unwrap_or(0);
        entry.1 += count;
    }
    Ok(sums
        .into_iter()
        .filter(|(_, (_, samples))| *samples > 0)
        .map(|(id, (total, samples))| (id, total as f64 / samples as f64))
        .collect())
}

/// Readable names for the ids a grouping by `by` produced.
async fn names_of(
    db: &impl ConnectionTrait,
    by: GroupBy,
    ids: impl Iterator<Item = Uuid>,
) -> ApiResult<HashMap<Uuid, String>> {
    Ok(match by {
        GroupBy::GpuModel => gantry_catalog::gpu_model_names(db).await?,
        GroupBy::Region => gantry_catalog::region_names(db).await?,
        GroupBy::InstanceType => gantry_catalog::instance_type_names(db).await?,
        GroupBy::Organization => gantry_access::tenancy::orgs::names(db, ids).await?,
        GroupBy::Order => {
            let types = gantry_catalog::instance_type_names(db).await?;
            order::Entity::find()
                .filter(order::Column::Id.is_in(ids))
                .all(db)
                .await?
                .into_iter()
                .map(|o| {
                    let shape = types.get(&o.instance_type_id).map_or("?", String::as_str);
                    let name = o
                        .name
                        .clone()
                        .unwrap_or_else(|| gantry_workload::orders::names::generated(shape, o.id));
                    (o.id, name)
                })
                .collect()
        }
        GroupBy::Day | GroupBy::Project | GroupBy::PricingClass => HashMap::new(),
    })
}

async fn project_names(
    db: &impl ConnectionTrait,
    ids: impl Iterator<Item = Uuid>,
) -> ApiResult<HashMap<Uuid, String>> {
    Ok(project::Entity::find()
        .filter(project::Column::Id.is_in(ids))
        .all(db)
        .await?
        .into_iter()
        .map(|p| (p.id, p.name))
        .collect())
}

fn respond(usage: Usage, format: Format) -> Response {
    match format {
        Format::Json => Json(usage).into_response(),
        Format::Csv => to_csv(&usage).download("usage.csv"),
    }
}

/// One row per group, then the totals.
fn to_csv(usage: &Usage) -> Table {
    let mut table = Table::new(&[
        "group",
        "key",
        "label",
        "gpu_seconds",
        "billable_gpu_seconds",
        "excluded_gpu_seconds",
        "node_seconds",
        "storage_gib_seconds",
    ]);
    let group_by = serde_json::to_value(usage.group_by)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let rows = usage
        .groups
        .iter()
        .map(|g| {
            (
                group_by.as_str(),
                g.key.as_str(),
                g.label.as_str(),
                g.figures,
            )
        })
        .chain(std::iter::once(("total", "", "", usage.totals)));
    for (group, key, label, f) in rows {
        let figures = [
            f.gpu_seconds,
            f.billable_gpu_seconds,
            f.excluded_gpu_seconds,
            f.node_seconds,
            f.storage_gib_seconds,
        ]
        .map(|n| n.to_string());
        table.row(
            [group, key, label]
                .into_iter()
                .chain(figures.iter().map(String::as_str)),
        );
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quotes_labels_and_ends_with_the_totals() {
        let figures = UsageFigures {
            gpu_seconds: 7_200,
            billable_gpu_seconds: 7_000,
            excluded_gpu_seconds: 200,
            node_seconds: 900,
            storage_gib_seconds: 3_600,
        };
        let usage = Usage {
            from: DateTime::UNIX_EPOCH,
            to: DateTime::UNIX_EPOCH + TimeDelta::days(1),
            group_by: GroupBy::Project,
            groups: vec![UsageGroup {
                key: "p".into(),
                label: "the \"big\" run, again".into(),
                figures,
                mean_gpu_utilization_percent: None,
            }],
            totals: figures,
        };
        assert_eq!(
            to_csv(&usage).text().expect("CSV as text"),
            "group,key,label,gpu_seconds,billable_gpu_seconds,excluded_gpu_seconds,node_seconds,storage_gib_seconds\n\
             project,p,\"the \"\"big\"\" run, again\",7200,7000,200,900,3600\n\
             total,,,7200,7000,200,900,3600\n"
        );
    }

    #[test]
    fn a_period_must_be_ordered_and_bounded() {
        let now = Utc
            .with_ymd_and_hms(2026, 12, 3, 10, 0, 0)
            .single()
            .expect("time");
        let (from, to) = period(None, None, now).expect("default period");
        assert_eq!(
            from,
            Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0)
                .single()
                .expect("time")
        );
        assert_eq!(to, now);
        assert!(period(Some(now), Some(now - TimeDelta::hours(1)), now).is_err());
        assert!(period(Some(now - TimeDelta::days(500)), None, now).is_err());
    }
}
