//! Job arrays (one request, many similar jobs, each scheduled on its own
//! and told its index) and the dependency edges jobs are created with.

use axum::Json;
use axum::extract::{RawPathParams, State};
use sea_orm::{ColumnTrait, ConnectionTrait, DbErr, QueryFilter, QueryOrder, QuerySelect, Set};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::Dependency;
use gantry_access::tenancy::access::{OrgAccess, OrgScope, need};
use gantry_core::audit::{self, Change};
use gantry_core::error::{ApiError, ApiResult, ProblemResponses, Resource};
use gantry_core::http::extract::path_uuid;
use gantry_core::state::AppState;
use gantry_entities::{order, order_dependency};
use gantry_types::classes::OrderStatus;

#[derive(Debug, Serialize, ToSchema)]
pub struct ArrayCancelled {
    pub array_id: Uuid,
    /// Members that were still queued or running and are now cancelled.
    pub cancelled: usize,
    /// Members that had already ended.
    pub ended: usize,
}

/// An array's members by status, however many there are.
#[derive(Debug, Serialize, ToSchema)]
pub struct ArraySummary {
    pub array_id: Uuid,
    pub members: i64,
    /// Each status some member has, with how many have it.
    pub by_status: Vec<StatusCount>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct StatusCount {
    pub status: OrderStatus,
    pub count: i64,
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(array_summary))
        .routes(routes!(cancel_array))
}

/// How an array's members stand: counted in the database, so an array of
/// 10,000 reads as one answer rather than pages of orders.
#[utoipa::path(
    get,
    path = "/orgs/{org_id}/job-arrays/{array_id}",
    tag = "orders",
    params(
        ("org_id" = Uuid, Path, description = "Organization id"),
        ("array_id" = Uuid, Path, description = "The `job.array_id` its members share"),
    ),
    responses((status = 200, description = "Its members by status", body = ArraySummary), ProblemResponses),
    security(("bearer" = []))
)]
async fn array_summary(
    State(state): State<AppState>,
    access: OrgAccess<need::AnyRole>,
    params: RawPathParams,
) -> ApiResult<Json<ArraySummary>> {
    let array_id = path_uuid(&params, "array_id", Resource::Order)?;
    let mut by_status: Vec<StatusCount> = access
        .scope
        .select::<order::Entity>()
        .select_only()
        .column(order::Column::Status)
        .column_as(order::Column::Id.count(), "count")
        .filter(order::Column::ArrayId.eq(array_id))
        .group_by(order::Column::Status)
        .into_tuple::<(OrderStatus, i64)>()
        .all(&state.db)
        .await?
        .into_iter()
        .map(|(status, count)| StatusCount { status, count })
        .collect();
    if by_status.is_empty() {
        return Err(ApiError::not_found(Resource::Order, array_id));
    }
    by_status.sort_by_key(|s| std::cmp::Reverse(s.count));
    Ok(Json(ArraySummary {
        array_id,
        members: by_status.iter().map(|s| s.count).sum(),
        by_status,
    }))
}

/// Every dependency names a job of this organization; another
/// organization's ids are unknown here, as any other unknown id.
pub async fn check_dependencies(
    db: &impl ConnectionTrait,
    scope: &OrgScope,
    dependencies: &[Dependency],
) -> ApiResult<()> {
    if dependencies.is_empty() {
        return Ok(());
    }
    let found: std::collections::HashMap<Uuid, order::Model> = scope
        .select::<order::Entity>()
        .filter(order::Column::Id.is_in(dependencies.iter().map(|d| d.order_id)))
        .all(db)
        .await?
        .into_iter()
        .map(|o| (o.id, o))
        .collect();
    for dependency in dependencies {
        match found.get(&dependency.order_id) {
            None => {
                return Err(ApiError::unprocessable(
                    "unknown_dependency",
                    format!("no job {} in this organization", dependency.order_id),
                ));
            }
            Some(o) if o.kind != super::KIND => {
                return Err(ApiError::unprocessable(
                    "dependency_not_a_job",
                    format!("order {} is an instance, not a job", o.id),
                ));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// The edges by which each of `orders` waits on each of `dependencies`; a
/// dependency named twice is one edge, the first condition given.
pub fn dependency_edges(
    orders: &[Uuid],
    dependencies: &[Dependency],
) -> Vec<order_dependency::ActiveModel> {
    let mut seen = std::collections::HashSet::new();
    orders
        .iter()
        .flat_map(|order_id| dependencies.iter().map(move |d| (*order_id, d)))
        .filter(|(order_id, d)| seen.insert((*order_id, d.order_id)))
        .map(|(order_id, d)| order_dependency::ActiveModel {
            order_id: Set(order_id),
            depends_on: Set(d.order_id),
            condition: Set(d.condition.as_str().to_owned()),
        })
        .collect()
}

/// Cancels every member of a job array that has not ended.
#[utoipa::path(
    post,
    path = "/orgs/{org_id}/job-arrays/{array_id}/cancel",
    tag = "orders",
    params(
        ("org_id" = Uuid, Path, description = "Organization id"),
        ("array_id" = Uuid, Path, description = "The `job.array_id` its members share"),
    ),
    responses((status = 200, description = "What was cancelled", body = ArrayCancelled), ProblemResponses),
    security(("bearer" = []))
)]
async fn cancel_array(
    State(state): State<AppState>,
    access: OrgAccess<need::Member>,
    params: RawPathParams,
) -> ApiResult<Json<ArrayCancelled>> {
    let array_id = path_uuid(&params, "array_id", Resource::Order)?;
    // The scheduling loop may be placing members right now: PostgreSQL
    // then breaks the deadlock by aborting one side, and this side tries
    // again.
    let mut tries = 0;
    let (cancelled, total) = loop {
        match cancel_members(&state, &access, array_id).await {
            Err(error) if tries < 3 && gantry_core::db::is_retryable(&error) => tries += 1,
            result => break result?,
        }
    };
    if total == 0 {
        return Err(ApiError::not_found(Resource::Order, array_id));
    }
    state.scheduler.wake();
    Ok(Json(ArrayCancelled {
        array_id,
        cancelled,
        ended: total - cancelled,
    }))
}

/// Cancels what has not ended of an array, in one transaction: how many
/// were cancelled, of how many members.
async fn cancel_members(
    state: &AppState,
    access: &OrgAccess<need::Member>,
    array_id: Uuid,
) -> Result<(usize, usize), DbErr> {
    let scope = &access.scope;
    let txn = gantry_core::db::write(&state.db).await?;
    let members = scope
        .select::<order::Entity>()
        .filter(order::Column::ArrayId.eq(array_id))
        .order_by_asc(order::Column::Id)
        .all(&txn)
        .await?;
    let total = members.len();
    if total == 0 {
        return Ok((0, 0));
    }
    let now = state.clock.now();
    let mut cancelled = 0;
    for member in members.into_iter().filter(|m| !m.status.is_final()) {
        if let crate::orders::Cancelled::Now { .. } =
            crate::orders::cancel(&txn, member.id, now).await?
        {
            cancelled += 1;
        }
    }
    audit::record(
        &txn,
        Change {
            org_id: Some(scope.org_id),
            action: "job_array.cancel",
            target_type: "job_array",
            target_id: Some(array_id.to_string()),
            details: serde_json::json!({ "cancelled": cancelled }),
            actor: &access.actor,
        },
    )
    .await?;
    txn.commit().await?;
    Ok((cancelled, total))
}
