//! Maintenance windows: an operator holds every GPU of a node over a
//! window the way a reservation does. Before it, work runs there only if it
//! ends in time; at its start, work still there is preempted with its grace
//! period; during it, nothing starts there. A window that would break a
//! tenant's reservation is refused unless the operator says to go ahead.

use axum::Json;
use axum::extract::{RawPathParams, State};
use axum::http::StatusCode;
use chrono::{DateTime, TimeDelta, Utc};
use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, QueryOrder, Set};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use gantry_core::audit;
use gantry_core::auth::principal::{Actor, Operator};
use gantry_core::error::{ApiError, ApiResult, ProblemResponses, Resource};
use gantry_core::http::extract::{ApiJson, ApiQuery, path_uuid};
use gantry_core::state::AppState;
use gantry_core::validate::Fields;
use gantry_entities::maintenance_window;
use gantry_inventory::nodes::Breaking;
use gantry_types::classes::ReservationStatus;

#[derive(Debug, Serialize, ToSchema)]
pub struct MaintenanceWindow {
    pub id: Uuid,
    pub node_id: Uuid,
    pub node_name: String,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    pub reason: String,
    /// `confirmed` (scheduled or under way), `cancelled` or `ended`.
    pub status: ReservationStatus,
    pub created_at: DateTime<Utc>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateMaintenance {
    /// Node name or id.
    #[schema(min_length = 1, max_length = 64)]
    pub node: String,
    /// When work must be off the node; now when absent.
    pub starts_at: Option<DateTime<Utc>>,
    /// When the node takes work again; at most 90 days after the start.
    pub ends_at: DateTime<Utc>,
    /// What is done, for the audit log and the calendar.
    #[schema(min_length = 1, max_length = 500)]
    pub reason: String,
}

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_maintenance, create_maintenance))
        .routes(routes!(cancel_maintenance))
}

/// Windows as operators see them.
pub async fn views(
    db: &impl sea_orm::ConnectionTrait,
    rows: Vec<maintenance_window::Model>,
) -> ApiResult<Vec<MaintenanceWindow>> {
    let names = gantry_inventory::nodes::names(db, rows.iter().map(|m| m.node_id)).await?;
    Ok(rows
        .into_iter()
        .map(|m| MaintenanceWindow {
            node_name: names.get(&m.node_id).cloned().unwrap_or_default(),
            id: m.id,
            node_id: m.node_id,
            starts_at: m.starts_at,
            ends_at: m.ends_at,
            reason: m.reason,
            status: m.status,
            created_at: m.created_at,
        })
        .collect())
}

/// Maintenance windows scheduled or under way, earliest first.
#[utoipa::path(
    get,
    path = "/admin/maintenance",
    tag = "admin",
    responses((status = 200, description = "The windows", body = Vec<MaintenanceWindow>), ProblemResponses),
    security(("bearer" = []))
)]
async fn list_maintenance(
    State(state): State<AppState>,
    _operator: Operator,
) -> ApiResult<Json<Vec<MaintenanceWindow>>> {
    let rows = maintenance_window::Entity::find()
        .filter(maintenance_window::Column::Status.eq(ReservationStatus::Confirmed))
        .filter(maintenance_window::Column::EndsAt.gt(state.clock.now()))
        .order_by_asc(maintenance_window::Column::StartsAt)
        .all(&state.db)
        .await?;
    Ok(Json(views(&state.db, rows).await?))
}

/// Holds every GPU of a node for maintenance over a window. Refused with
/// `reservation_on_node` when a tenant's reservation holds GPUs of the node
/// during it, unless `force=true`.
#[utoipa::path(
    post,
    path = "/admin/maintenance",
    tag = "admin",
    params(Breaking),
    request_body = CreateMaintenance,
    responses((status = 201, description = "The window", body = MaintenanceWindow), ProblemResponses),
    security(("bearer" = []))
)]
async fn create_maintenance(
    State(state): State<AppState>,
    _operator: Operator,
    actor: Actor,
    ApiQuery(breaking): ApiQuery<Breaking>,
    ApiJson(request): ApiJson<CreateMaintenance>,
) -> ApiResult<(StatusCode, Json<MaintenanceWindow>)> {
    let now = state.clock.now();
    let starts_at = request.starts_at.unwrap_or(now);
    let mut fields = Fields::default();
    let reason = fields.reason("reason", &request.reason);
    if starts_at < now - TimeDelta::minutes(1) {
        fields.push("starts_at", "is in the past");
    }
    if request.ends_at <= starts_at {
        fields.push("ends_at", "must be after starts_at");
    } else if request.ends_at - starts_at > TimeDelta::hours(super::service::LENGTH_MAX_HOURS) {
        fields.push(
            "ends_at",
            format!(
                "a window lasts at most {} hours",
                super::service::LENGTH_MAX_HOURS
            ),
        );
    }
    fields.finish()?;
    let txn = gantry_core::db::write(&state.db).await?;
    let target = gantry_inventory::nodes::by_reference(&txn, &request.node).await?;
    let broken: Vec<String> = gantry_inventory::reserved::held_on(&txn, &[target.id])
        .await?
        .remove(&target.id)
        .unwrap_or_default()
        .into_iter()
        .filter(|r| r.starts_at < request.ends_at && r.ends_at > starts_at)
        .map(|r| r.name)
        .collect();
    if !broken.is_empty() && !breaking.force.unwrap_or(false) {
        return Err(ApiError::conflict(
            "reservation_on_node",
            format!(
                "reservations {} hold GPUs of node {} during the window; maintenance then breaks them \
                 (pass force=true to go ahead)",
                broken.join(", "),
                target.name
            ),
        ));
    }
    let row = maintenance_window::ActiveModel {
        id: Set(Uuid::now_v7()),
        node_id: Set(target.id),
        starts_at: Set(starts_at),
        ends_at: Set(request.ends_at),
        reason: Set(reason),
        status: Set(ReservationStatus::Confirmed),
        created_by: Set(actor.id),
        created_at: Set(now),
        updated_at: Set(now),
    }
    .insert(&txn)
    .await?;
    let details = serde_json::json!({
        "node": target.name, "starts_at": row.starts_at, "ends_at": row.ends_at,
        "reason": row.reason, "reservations_broken": broken,
    });
    audit::platform(
        &txn,
        &actor,
        "maintenance.create",
        "node",
        target.id,
        details,
    )
    .await?;
    txn.commit().await?;
    state.scheduler.wake();
    let shown = views(&state.db, vec![row]).await?.pop();
    shown
        .map(|w| (StatusCode::CREATED, Json(w)))
        .ok_or_else(|| ApiError::internal(anyhow::anyhow!("a maintenance window lost its view")))
}

/// Cancels a maintenance window: the node takes work again at once.
#[utoipa::path(
    post,
    path = "/admin/maintenance/{window_id}/cancel",
    tag = "admin",
    params(("window_id" = Uuid, Path, description = "Maintenance window id")),
    responses((status = 200, description = "The cancelled window", body = MaintenanceWindow), ProblemResponses),
    security(("bearer" = []))
)]
async fn cancel_maintenance(
    State(state): State<AppState>,
    _operator: Operator,
    actor: Actor,
    params: RawPathParams,
) -> ApiResult<Json<MaintenanceWindow>> {
    let id = path_uuid(&params, "window_id", Resource::MaintenanceWindow)?;
    let txn = gantry_core::db::write(&state.db).await?;
    let current = maintenance_window::Entity::find_by_id(id)
        .one(&txn)
        .await?
        .ok_or_else(|| ApiError::not_found(Resource::MaintenanceWindow, id))?;
    let row = if current.status == ReservationStatus::Confirmed {
        let node_id = current.node_id;
        let mut row: maintenance_window::ActiveModel = current.into();
        row.status = Set(ReservationStatus::Cancelled);
        row.updated_at = Set(state.clock.now());
        let row = row.update(&txn).await?;
        let details = serde_json::json!({ "window": row.id });
        audit::platform(&txn, &actor, "maintenance.cancel", "node", node_id, details).await?;
        row
    } else {
        current
    };
    txn.commit().await?;
    state.scheduler.wake();
    let shown = views(&state.db, vec![row]).await?.pop();
    shown
        .map(Json)
        .ok_or_else(|| ApiError::internal(anyhow::anyhow!("a maintenance window lost its view")))
}
