//! What agents report of their workloads: each report moves its order on
//! (running, ended, stopped). The reports of one agent round travel in one
//! call and are written in one transaction, so a node where eight jobs end
//! together commits once and wakes the scheduler once.

use axum::Json;
use axum::extract::State;
use chrono::{DateTime, Utc};
use sea_orm::sea_query::Expr;
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, TransactionTrait};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::api::NodeRuntime;
use super::node_auth::NodeAgent;
use gantry_core::error::{ApiError, ApiResult, Problem, ProblemResponses, Resource};
use gantry_core::http::extract::ApiJson;
use gantry_core::state::AppState;
use gantry_core::validate::Fields;
use gantry_entities::{allocation, node, order};
use gantry_types::classes::{AllocationState, OrderStatus};
use gantry_workload::orders::{HostAccess, OrderAccess, SshAccess, lifecycle};

const MESSAGE_MAX: usize = 1000;
/// The most reports one call carries: more workloads than a node has GPUs
/// ever end in one round.
const REPORTS_MAX: usize = 256;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum WorkloadState {
    /// It is up.
    Running,
    /// It ended by itself with `exit_code`.
    Exited,
    /// It was stopped as asked.
    Stopped,
    /// It could not be started; `message` says why.
    Failed,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StatusReport {
    pub order_id: Uuid,
    pub state: WorkloadState,
    pub exit_code: Option<i32>,
    #[schema(max_length = 1000)]
    pub message: Option<String>,
    /// How the tenant reaches it on this node, with `running`.
    pub access: Option<ReportedAccess>,
}

/// What an agent says of how its workload is reached.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReportedAccess {
    #[serde(default)]
    pub runtime: Option<NodeRuntime>,
    /// The node's public address.
    #[schema(min_length = 1, max_length = 253)]
    pub host: String,
    pub ssh: Option<ReportedSsh>,
    #[serde(default)]
    #[schema(max_items = 8)]
    pub ports: Vec<gantry_workload::orders::PortAccess>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReportedSsh {
    #[schema(min_length = 1, max_length = 32)]
    pub user: String,
    pub port: u16,
    #[schema(min_length = 1, max_length = 128)]
    pub host_key_fingerprint: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct StatusAck {
    pub order_id: Uuid,
    pub status: OrderStatus,
}

/// Several reports, taken in their order.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StatusReports {
    #[schema(min_items = 1, max_items = 256)]
    pub reports: Vec<StatusReport>,
}

/// What became of one report of a batch: taken (with the order's status
/// after it) or refused (with why; sending it again changes nothing).
#[derive(Debug, Serialize, ToSchema)]
pub struct ReportResult {
    pub order_id: Uuid,
    pub status: Option<OrderStatus>,
    pub problem: Option<Problem>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct StatusResults {
    /// One per report, in the reports' order.
    pub results: Vec<ReportResult>,
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(report_status))
        .routes(routes!(report_statuses))
}

/// Reports what a workload on this node did.
#[utoipa::path(
    post,
    path = "/agent/status",
    tag = "agent",
    request_body = StatusReport,
    responses((status = 200, description = "The order's status after the report", body = StatusAck), ProblemResponses),
    security(("bearer" = []))
)]
async fn report_status(
    State(state): State<AppState>,
    agent: NodeAgent,
    ApiJson(report): ApiJson<StatusReport>,
) -> ApiResult<Json<StatusAck>> {
    let message = checked(&report, "")?;
    let txn = gantry_core::db::write(&state.db).await?;
    let ack = apply(&txn, &agent.node, &report, message, state.clock.now()).await?;
    txn.commit().await?;
    state.scheduler.wake();
    Ok(Json(ack))
}

/// Reports what several workloads on this node did, in one transaction.
/// Each report is taken or refused on its own: one the control plane
/// refuses (work no longer on this node, an ending of work never started,
/// a bad field) does not hold the others back.
#[utoipa::path(
    post,
    path = "/agent/statuses",
    tag = "agent",
    request_body = StatusReports,
    responses((status = 200, description = "What became of each report", body = StatusResults), ProblemResponses),
    security(("bearer" = []))
)]
async fn report_statuses(
    State(state): State<AppState>,
    agent: NodeAgent,
    ApiJson(batch): ApiJson<StatusReports>,
) -> ApiResult<Json<StatusResults>> {
    if batch.reports.is_empty() || batch.reports.len() > REPORTS_MAX {
        let mut fields = Fields::default();
        fields.push("reports", format!("from 1 to {REPORTS_MAX} reports"));
        fields.finish()?;
    }
    let now = state.clock.now();
    let txn = gantry_core::db::write(&state.db).await?;
    let mut results = Vec::with_capacity(batch.reports.len());
    for (i, report) in batch.reports.iter().enumerate() {
        let applied = match checked(report, &format!("reports[{i}].")) {
            Ok(message) => {
                // A refused report leaves nothing behind it.
                let point = txn.begin().await?;
                let applied = apply(&point, &agent.node, report, message, now).await;
                match &applied {
                    Ok(_) => point.commit().await?,
                    Err(_) => point.rollback().await?,
                }
                applied
            }
            Err(refused) => Err(refused),
        };
        results.push(match applied {
            Ok(ack) => ReportResult {
                order_id: report.order_id,
                status: Some(ack.status),
                problem: None,
            },
            Err(refused) if refused.status().is_client_error() => ReportResult {
                order_id: report.order_id,
                status: None,
                problem: Some(refused.into_problem()),
            },
            Err(failed) => return Err(failed),
        });
    }
    txn.commit().await?;
    state.scheduler.wake();
    Ok(Json(StatusResults { results }))
}

/// The report's message, cleaned, or why the report is refused; `prefix`
/// places its fields in the request.
fn checked(report: &StatusReport, prefix: &str) -> ApiResult<Option<String>> {
    let mut fields = Fields::default();
    let message = report
        .message
        .as_deref()
        .map(|m| fields.text(&format!("{prefix}message"), m, MESSAGE_MAX));
    if let Some(access) = &report.access {
        check_access(&mut fields, access, prefix);
    }
    fields.finish()?;
    Ok(message)
}

fn check_access(fields: &mut Fields, access: &ReportedAccess, prefix: &str) {
    let host_ok = !access.host.is_empty()
        && access.host.len() <= 253
        && access
            .host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".-:[]".contains(c));
    if !host_ok {
        fields.push(
            &format!("{prefix}access.host"),
            "must be a host name or IP address",
        );
    }
    if let Some(ssh) = &access.ssh {
        if ssh.user.len() > 32 || !gantry_core::validate::is_slug(&ssh.user) {
            fields.push(
                &format!("{prefix}access.ssh.user"),
                "must be a user name of at most 32 characters",
            );
        }
        let fingerprint = &ssh.host_key_fingerprint;
        if fingerprint.is_empty()
            || fingerprint.len() > 128
            || !fingerprint
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || ":+/=".contains(c))
        {
            fields.push(
                &format!("{prefix}access.ssh.host_key_fingerprint"),
                "must be SHA256:<base64>",
            );
        }
    }
    if access.ports.len() > 8 {
        fields.push(&format!("{prefix}access.ports"), "at most 8 ports");
    }
}

/// The order's access with this node's entry replaced by what its agent
/// reported (or, from an older agent, just the node's name) and the
/// workload's private address.
fn merged_access(
    current: &order::Model,
    node: &node::Model,
    reported: Option<&ReportedAccess>,
    private_address: Option<String>,
) -> OrderAccess {
    let mut access: OrderAccess = current
        .access
        .as_deref()
        .and_then(|a| serde_json::from_str(a).ok())
        .unwrap_or_default();
    access.driver = "agent".into();
    // What the node registered with is authoritative; a report only fills
    // in for a node registered before runtimes were reported.
    access.runtime = node.runtime.clone().or_else(|| {
        reported
            .and_then(|r| r.runtime)
            .map(|r| r.as_str().to_owned())
    });
    let entry = match reported {
        Some(r) => HostAccess {
            node: node.name.clone(),
            host: r.host.clone(),
            private_address,
            ssh: r.ssh.as_ref().map(|s| SshAccess {
                command: format!("ssh -p {} {}@{}", s.port, s.user, r.host),
                user: s.user.clone(),
                port: s.port,
                host_key_fingerprint: Some(s.host_key_fingerprint.clone()),
            }),
            ports: r.ports.clone(),
        },
        None => HostAccess {
            node: node.name.clone(),
            host: node.name.clone(),
            private_address,
            ssh: None,
            ports: Vec::new(),
        },
    };
    access.hosts.retain(|h| h.node != node.name);
    access.hosts.push(entry);
    access.hosts.sort_by(|a, b| a.node.cmp(&b.node));
    access
}

/// Moves the reported order on, inside the caller's transaction.
async fn apply(
    txn: &impl ConnectionTrait,
    node: &node::Model,
    report: &StatusReport,
    message: Option<String>,
    now: DateTime<Utc>,
) -> ApiResult<StatusAck> {
    super::holds_on(txn, report.order_id, node.id).await?;
    // A stop needs nothing of the order; a start and an end read it.
    let read = || async {
        order::Entity::find_by_id(report.order_id)
            .one(txn)
            .await?
            .ok_or_else(|| ApiError::not_found(Resource::Order, report.order_id))
    };
    match report.state {
        WorkloadState::Running => {
            let current = read().await?;
            let private_address = allocation::Entity::find()
                .filter(allocation::Column::OrderId.eq(report.order_id))
                .filter(allocation::Column::NodeId.eq(node.id))
                .filter(allocation::Column::State.ne(AllocationState::Released))
                .one(txn)
                .await?
                .and_then(|a| a.private_address);
            let access = merged_access(&current, node, report.access.as_ref(), private_address);
            let stored = serde_json::to_string(&access).unwrap_or_default();
            let came_up = lifecycle::came_up(txn, report.order_id, stored.clone(), now).await?;
            // Another node of a gang came up: its entry joins the others.
            if !came_up && current.status == OrderStatus::Running {
                order::Entity::update_many()
                    .col_expr(order::Column::Access, Expr::value(Some(stored)))
                    .filter(order::Column::Id.eq(current.id))
                    .exec(txn)
                    .await?;
            }
        }
        WorkloadState::Exited | WorkloadState::Failed => {
            let current = read().await?;
            // The agent fetched it before it could start it: an ending
            // reported for work never handed over is not believed.
            if report.state == WorkloadState::Exited
                && matches!(current.status, OrderStatus::Queued | OrderStatus::Scheduled)
            {
                return Err(ApiError::conflict(
                    "not_started",
                    format!(
                        "order {} is {}: no workload of it was started on this node",
                        current.id,
                        current.status.as_str()
                    ),
                ));
            }
            let ending = match report.state {
                WorkloadState::Exited => lifecycle::Ending::Exited(report.exit_code),
                _ => lifecycle::Ending::NotStarted,
            };
            let message = message.or_else(|| {
                (ending == lifecycle::Ending::NotStarted)
                    .then(|| "the agent could not start it".to_owned())
            });
            lifecycle::ended(txn, &current, Some(node.id), ending, message, now).await?;
        }
        WorkloadState::Stopped => {
            lifecycle::stopped(txn, report.order_id, Some(node.id), now).await?;
        }
    }
    let current = read().await?;
    Ok(StatusAck {
        order_id: current.id,
        status: current.status,
    })
}
