//! Each attempt of an order: where it ran, on which GPUs, from when to
//! when, and how it ended, read from the allocations that served it.

use std::collections::{BTreeMap, HashMap, HashSet};

use axum::Json;
use axum::extract::{RawPathParams, State};
use chrono::{DateTime, Utc};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use crate::orders::earliest;
use gantry_access::tenancy::access::{OrgAccess, need};
use gantry_core::error::{ApiResult, ProblemResponses};
use gantry_core::state::AppState;
use gantry_entities::{allocation, node};
use gantry_types::classes::StopCause;

#[derive(Debug, Serialize, ToSchema)]
pub struct AttemptNode {
    pub node_id: Uuid,
    pub node_name: String,
    pub gpu_ids: Vec<u32>,
    pub exit_code: Option<i32>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Attempt {
    /// 1 for the first start, 2 for the first retry, …
    pub attempt: i32,
    pub nodes: Vec<AttemptNode>,
    /// When the scheduler placed it on its nodes.
    pub placed_at: DateTime<Utc>,
    /// When its work came up (absent when it never did).
    pub started_at: Option<DateTime<Utc>>,
    /// When it was told to be stopped by, once it was told.
    pub stop_at: Option<DateTime<Utc>>,
    /// Why it was told to stop; absent when its work ended by itself or
    /// it still runs.
    pub stop_cause: Option<StopCause>,
    /// When its GPUs were freed on every node (absent while it lasts).
    pub ended_at: Option<DateTime<Utc>>,
    /// completed, failed, timed_out, cancelled or preempted; absent while
    /// it lasts.
    pub outcome: Option<String>,
    /// The first exit code its nodes reported.
    pub exit_code: Option<i32>,
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_attempts))
}

/// Every attempt of an order (a job's retries, an instance's restarts
/// after preemption), oldest first.
#[utoipa::path(
    get,
    path = "/orgs/{org_id}/orders/{order_id}/attempts",
    tag = "orders",
    params(
        ("org_id" = Uuid, Path, description = "Organization id"),
        ("order_id" = Uuid, Path, description = "Order id"),
    ),
    responses((status = 200, description = "Its attempts, oldest first", body = Vec<Attempt>), ProblemResponses),
    security(("bearer" = []))
)]
async fn list_attempts(
    State(state): State<AppState>,
    access: OrgAccess<need::AnyRole>,
    params: RawPathParams,
) -> ApiResult<Json<Vec<Attempt>>> {
    let found = crate::orders::find(&state.db, &access.scope, &params).await?;
    let allocations = allocation::Entity::find()
        .filter(allocation::Column::OrderId.eq(found.id))
        .order_by_asc(allocation::Column::Id)
        .all(&state.db)
        .await?;
    let names: HashMap<Uuid, String> = node::Entity::find()
        .filter(node::Column::Id.is_in(allocations.iter().map(|a| a.node_id)))
        .all(&state.db)
        .await?
        .into_iter()
        .map(|n| (n.id, n.name))
        .collect();
    let mut attempts: BTreeMap<i32, Attempt> = BTreeMap::new();
    let mut open: HashSet<i32> = HashSet::new();
    for a in allocations {
        let entry = attempts.entry(a.attempt).or_insert_with(|| Attempt {
            attempt: a.attempt,
            nodes: Vec::new(),
            placed_at: a.created_at,
            started_at: a.running_since,
            stop_at: a.stop_at,
            stop_cause: a.stop_cause,
            ended_at: a.released_at,
            outcome: a.outcome.clone(),
            exit_code: None,
        });
        entry.placed_at = entry.placed_at.min(a.created_at);
        entry.started_at = earliest(entry.started_at, a.running_since);
        entry.stop_at = earliest(entry.stop_at, a.stop_at);
        entry.stop_cause = entry.stop_cause.or(a.stop_cause);
        entry.ended_at = entry.ended_at.max(a.released_at);
        // One node still holding its GPUs keeps the whole attempt going.
        if a.released_at.is_none() {
            open.insert(a.attempt);
        }
        entry.exit_code = entry.exit_code.or(a.exit_code);
        entry.nodes.push(AttemptNode {
            node_id: a.node_id,
            node_name: names.get(&a.node_id).cloned().unwrap_or_default(),
            gpu_ids: a.gpu_list(),
            exit_code: a.exit_code,
        });
    }
    Ok(Json(
        attempts
            .into_values()
            .map(|mut attempt| {
                if open.contains(&attempt.attempt) {
                    attempt.ended_at = None;
                    attempt.outcome = None;
                }
                attempt
            })
            .collect(),
    ))
}
