//! The reservations API: quote, confirm, list, show, extend and cancel an
//! organization's reservations.

use axum::Json;
use axum::extract::{RawPathParams, State};
use axum::http::StatusCode;
use chrono::{DateTime, TimeDelta, Utc};
use gantry_scheduler as engine;
use sea_orm::{ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, Set};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::service::{self, Fit};
use super::{CreateReservation, ExtendReservation, Quote, Reservation, ReservationState};
use gantry_access::tenancy::access::{OrgAccess, OrgScope, need};
use gantry_core::audit::{self, Change};
use gantry_core::error::{ApiError, ApiResult, ProblemResponses, Resource, Window};
use gantry_core::http::extract::{ApiJson, ApiQuery, path_uuid};
use gantry_core::http::pagination::{Page, PageQuery};
use gantry_core::state::AppState;
use gantry_entities::{reservation, reservation_node};
use gantry_types::classes::ReservationStatus;

pub fn routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_reservations, create_reservation))
        .routes(routes!(quote_reservation))
        .routes(routes!(get_reservation))
        .routes(routes!(cancel_reservation))
        .routes(routes!(extend_reservation))
}

fn no_capacity(ask: &service::Ask<'_>, alternatives: Vec<Window>) -> ApiError {
    let detail = format!(
        "{} × {} in {} is not free for the whole window; {}",
        ask.count,
        ask.instance.name,
        ask.region.name,
        match alternatives.first() {
            Some(first) => format!(
                "the earliest window that fits starts at {}",
                first.starts_at.format("%Y-%m-%d %H:%M UTC")
            ),
            None => "no window of that length fits in the next four weeks".to_owned(),
        }
    );
    ApiError::conflict("no_capacity", detail).with_alternatives(alternatives)
}

fn taken_meanwhile() -> ApiError {
    ApiError::conflict(
        "capacity_changed",
        "other reservations kept taking the GPUs planned for this one; try again",
    )
    .with_retry_after(1)
}

async fn shown(state: &AppState, rows: Vec<reservation::Model>) -> ApiResult<Vec<Reservation>> {
    let catalog = state.catalog.current(&state.db).await?;
    super::views(&state.db, &catalog, &state.config, rows, state.clock.now()).await
}

async fn one(state: &AppState, row: reservation::Model) -> ApiResult<Reservation> {
    shown(state, vec![row])
        .await?
        .pop()
        .ok_or_else(|| ApiError::internal(anyhow::anyhow!("a reservation lost its view")))
}

/// The reservation named by the path's `reservation_id`, in the caller's
/// organization.
async fn find(
    db: &impl ConnectionTrait,
    scope: &OrgScope,
    params: &RawPathParams,
) -> ApiResult<reservation::Model> {
    let id = path_uuid(params, "reservation_id", Resource::Reservation)?;
    scope
        .select::<reservation::Entity>()
        .filter(reservation::Column::Id.eq(id))
        .one(db)
        .await?
        .ok_or_else(|| ApiError::not_found(Resource::Reservation, id))
}

/// The organization's reservations, newest first.
#[utoipa::path(
    get,
    path = "/orgs/{org_id}/reservations",
    tag = "reservations",
    params(("org_id" = uuid::Uuid, Path, description = "Organization id"), PageQuery),
    responses((status = 200, description = "A page of reservations", body = Page<Reservation>), ProblemResponses),
    security(("bearer" = []))
)]
async fn list_reservations(
    State(state): State<AppState>,
    access: OrgAccess<need::AnyRole>,
    ApiQuery(query): ApiQuery<PageQuery>,
) -> ApiResult<Json<Page<Reservation>>> {
    let request = query.validate()?;
    let rows = request
        .descending(
            access.scope.select::<reservation::Entity>(),
            reservation::Column::Id,
        )
        .all(&state.db)
        .await?;
    let page = Page::from_rows(rows, request, |r| r.id, |r| r);
    Ok(Json(Page {
        items: shown(&state, page.items).await?,
        next_cursor: page.next_cursor,
    }))
}

/// One reservation with its GPUs, state and use.
#[utoipa::path(
    get,
    path = "/orgs/{org_id}/reservations/{reservation_id}",
    tag = "reservations",
    params(
        ("org_id" = uuid::Uuid, Path, description = "Organization id"),
        ("reservation_id" = uuid::Uuid, Path, description = "Reservation id"),
    ),
    responses((status = 200, description = "The reservation", body = Reservation), ProblemResponses),
    security(("bearer" = []))
)]
async fn get_reservation(
    State(state): State<AppState>,
    access: OrgAccess<need::AnyRole>,
    params: RawPathParams,
) -> ApiResult<Json<Reservation>> {
    let row = find(&state.db, &access.scope, &params).await?;
    Ok(Json(one(&state, row).await?))
}

/// Prices a reservation and tells whether its window is free, with the
/// earliest windows that are when it is not. Nothing is held.
#[utoipa::path(
    post,
    path = "/orgs/{org_id}/reservations/quote",
    tag = "reservations",
    params(("org_id" = uuid::Uuid, Path, description = "Organization id")),
    request_body = CreateReservation,
    responses((status = 200, description = "The price and availability", body = Quote), ProblemResponses),
    security(("bearer" = []))
)]
async fn quote_reservation(
    State(state): State<AppState>,
    access: OrgAccess<need::AnyRole>,
    ApiJson(request): ApiJson<CreateReservation>,
) -> ApiResult<Json<Quote>> {
    let now = state.clock.now();
    let catalog = state.catalog.current(&state.db).await?;
    let ask = service::validate(&state.db, &catalog, &access.scope, &request, now).await?;
    let hourly = service::price(&state.db, &ask, now).await?;
    let loaded = gantry_world::load::load(&state.db, now).await?;
    let (window, available, alternatives) = match service::fit(&loaded, access.scope.org_id, &ask) {
        Fit::Fits { window, .. } => (window, true, Vec::new()),
        Fit::Refused { alternatives } => (
            Window {
                starts_at: ask.starts_at,
                ends_at: ask.starts_at + TimeDelta::hours(ask.hours),
            },
            false,
            alternatives,
        ),
    };
    let config = &state.config;
    Ok(Json(Quote {
        instance_type: ask.instance.name.clone(),
        gpu_model: ask.model.name.clone(),
        region: ask.region.name.clone(),
        count: ask.count,
        gpus: ask.gpus(),
        starts_at: window.starts_at,
        ends_at: window.ends_at,
        hourly_micros: hourly,
        total_micros: gantry_pricing::rating::amount_per_gpu(
            ask.gpus() * ask.hours * service::HOUR,
            hourly,
            ask.instance.gpus_per_node,
            1000,
        ),
        currency: config.currency.clone(),
        available,
        alternatives,
        free_cancellation_until: service::free_cancellation_until(
            window.starts_at,
            config.reservation_free_cancel_hours,
        ),
        cancellation_fee_percent: config.reservation_cancel_fee_percent,
    }))
}

/// Reserves capacity: confirmed at once with the exact GPUs held, or
/// refused with `no_capacity` and the earliest windows that would fit
/// (`alternatives`).
#[utoipa::path(
    post,
    path = "/orgs/{org_id}/reservations",
    tag = "reservations",
    params(
        ("org_id" = uuid::Uuid, Path, description = "Organization id"),
        ("Idempotency-Key" = Option<String>, Header, description = "Makes a retry return the first response", max_length = 255, pattern = "^[\\x21-\\x7e]{1,255}$"),
    ),
    request_body = CreateReservation,
    responses((status = 201, description = "The confirmed reservation", body = Reservation), ProblemResponses),
    security(("bearer" = []))
)]
async fn create_reservation(
    State(state): State<AppState>,
    access: OrgAccess<need::Member>,
    ApiJson(request): ApiJson<CreateReservation>,
) -> ApiResult<(StatusCode, Json<Reservation>)> {
    let now = state.clock.now();
    let scope = &access.scope;
    let catalog = state.catalog.current(&state.db).await?;
    let ask = service::validate(&state.db, &catalog, scope, &request, now).await?;
    let hourly = service::price(&state.db, &ask, now).await?;
    // The plan reads the whole cluster; it is made outside the write lock,
    // which is then held only to check that nobody took its GPUs meanwhile
    // and to write it.
    let mut attempt = 0;
    let (txn, window, gpus) = loop {
        attempt += 1;
        let loaded = gantry_world::load::load(&state.db, now).await?;
        let (window, placements) = match service::fit(&loaded, scope.org_id, &ask) {
            Fit::Fits { window, placements } => (window, placements),
            Fit::Refused { alternatives } => return Err(no_capacity(&ask, alternatives)),
        };
        let gpus = service::held_gpus(&loaded.nodes, &placements)?;
        let txn = gantry_core::db::write(&state.db).await?;
        service::serialize(&txn).await?;
        if !service::taken(&txn, &gpus, window, None).await? {
            break (txn, window, gpus);
        }
        if attempt == service::PLAN_TRIES {
            return Err(taken_meanwhile());
        }
    };
    let row = service::confirm(
        &txn,
        service::Confirm {
            org_id: scope.org_id,
            ask: &ask,
            window,
            gpus: &gpus,
            hourly_micros: hourly,
            actor: &access.actor,
            now,
        },
    )
    .await?;
    audit::record(
        &txn,
        Change {
            org_id: Some(scope.org_id),
            action: "reservation.create",
            target_type: "reservation",
            target_id: Some(row.id.to_string()),
            details: serde_json::json!({
                "instance_type": ask.instance.name,
                "count": ask.count,
                "region": ask.region.name,
                "starts_at": row.starts_at,
                "ends_at": row.ends_at,
                "hourly_micros": hourly,
            }),
            actor: &access.actor,
        },
    )
    .await?;
    txn.commit().await?;
    state.scheduler.wake();
    Ok((StatusCode::CREATED, Json(one(&state, row).await?)))
}

/// Cancels a reservation: its GPUs are free at once and its orders are
/// stopped. Free until the operator's notice period before the window;
/// later, the time already begun stays charged and a share of the rest is
/// charged as a fee. Cancelling a cancelled reservation changes nothing.
#[utoipa::path(
    post,
    path = "/orgs/{org_id}/reservations/{reservation_id}/cancel",
    tag = "reservations",
    params(
        ("org_id" = uuid::Uuid, Path, description = "Organization id"),
        ("reservation_id" = uuid::Uuid, Path, description = "Reservation id"),
    ),
    responses((status = 200, description = "The cancelled reservation", body = Reservation), ProblemResponses),
    security(("bearer" = []))
)]
async fn cancel_reservation(
    State(state): State<AppState>,
    access: OrgAccess<need::Member>,
    params: RawPathParams,
) -> ApiResult<Json<Reservation>> {
    let now = state.clock.now();
    let txn = gantry_core::db::write(&state.db).await?;
    let current = find(&txn, &access.scope, &params).await?;
    match super::state_of(&current, now) {
        ReservationState::Cancelled => {
            txn.commit().await?;
            return Ok(Json(one(&state, current).await?));
        }
        ReservationState::Ended => {
            return Err(ApiError::conflict(
                "reservation_over",
                format!("reservation {} has already ended", current.name),
            ));
        }
        ReservationState::Upcoming | ReservationState::Active => {}
    }
    let (billed_until, fee) = service::cancellation(
        &current,
        state.config.reservation_free_cancel_hours,
        state.config.reservation_cancel_fee_percent,
        now,
    );
    let why = format!("reservation {} was cancelled", current.name);
    let stopped = service::stop_orders(&txn, current.id, &why, now).await?;
    let mut row: reservation::ActiveModel = current.into();
    row.status = Set(ReservationStatus::Cancelled);
    row.cancelled_at = Set(Some(now));
    row.billed_until = Set(billed_until);
    row.cancellation_fee_micros = Set(fee);
    row.updated_at = Set(now);
    let row = row.update(&txn).await?;
    audit::record(
        &txn,
        Change {
            org_id: Some(access.scope.org_id),
            action: "reservation.cancel",
            target_type: "reservation",
            target_id: Some(row.id.to_string()),
            details: serde_json::json!({
                "billed_until": billed_until,
                "cancellation_fee_micros": fee,
                "orders_stopped": stopped,
            }),
            actor: &access.actor,
        },
    )
    .await?;
    txn.commit().await?;
    state.scheduler.wake();
    Ok(Json(one(&state, row).await?))
}

/// Moves a reservation's end later, on the GPUs it holds, when nothing
/// else is planned on them until the new end; refused with `no_capacity`
/// otherwise. The added hours are charged at the price it was confirmed at.
#[utoipa::path(
    post,
    path = "/orgs/{org_id}/reservations/{reservation_id}/extend",
    tag = "reservations",
    params(
        ("org_id" = uuid::Uuid, Path, description = "Organization id"),
        ("reservation_id" = uuid::Uuid, Path, description = "Reservation id"),
    ),
    request_body = ExtendReservation,
    responses((status = 200, description = "The extended reservation", body = Reservation), ProblemResponses),
    security(("bearer" = []))
)]
async fn extend_reservation(
    State(state): State<AppState>,
    access: OrgAccess<need::Member>,
    params: RawPathParams,
    ApiJson(request): ApiJson<ExtendReservation>,
) -> ApiResult<Json<Reservation>> {
    let now = state.clock.now();
    let planned = find(&state.db, &access.scope, &params).await?;
    if matches!(
        super::state_of(&planned, now),
        ReservationState::Ended | ReservationState::Cancelled
    ) {
        return Err(ApiError::conflict(
            "reservation_over",
            format!("reservation {} is over", planned.name),
        ));
    }
    check_new_end(&planned, request.ends_at)?;
    let mut attempt = 0;
    let (txn, current) = loop {
        attempt += 1;
        let loaded = gantry_world::load::load(&state.db, now).await?;
        if !engine::can_extend(
            &loaded.snapshot.snapshot(),
            &planned.id.to_string(),
            request.ends_at.timestamp(),
        ) {
            return Err(ApiError::conflict(
                "no_capacity",
                format!(
                    "the GPUs of reservation {} are not free until {}",
                    planned.name,
                    request.ends_at.format("%Y-%m-%d %H:%M UTC")
                ),
            ));
        }
        let txn = gantry_core::db::write(&state.db).await?;
        service::serialize(&txn).await?;
        let current = find(&txn, &access.scope, &params).await?;
        let gpus: Vec<(uuid::Uuid, Vec<u32>)> = reservation_node::Entity::find()
            .filter(reservation_node::Column::ReservationId.eq(current.id))
            .all(&txn)
            .await?
            .into_iter()
            .map(|h| (h.node_id, h.gpu_list()))
            .collect();
        let added = Window {
            starts_at: current.ends_at,
            ends_at: request.ends_at,
        };
        let unchanged = current.ends_at == planned.ends_at && current.status == planned.status;
        if unchanged && !service::taken(&txn, &gpus, added, Some(current.id)).await? {
            break (txn, current);
        }
        if attempt == service::PLAN_TRIES {
            return Err(taken_meanwhile());
        }
    };
    let from = current.ends_at;
    let mut row: reservation::ActiveModel = current.into();
    row.ends_at = Set(request.ends_at);
    row.billed_until = Set(request.ends_at);
    row.updated_at = Set(now);
    let row = row.update(&txn).await?;
    audit::record(
        &txn,
        Change {
            org_id: Some(access.scope.org_id),
            action: "reservation.extend",
            target_type: "reservation",
            target_id: Some(row.id.to_string()),
            details: serde_json::json!({ "from": from, "to": row.ends_at }),
            actor: &access.actor,
        },
    )
    .await?;
    txn.commit().await?;
    state.scheduler.wake();
    Ok(Json(one(&state, row).await?))
}

fn check_new_end(current: &reservation::Model, ends_at: DateTime<Utc>) -> ApiResult<()> {
    let mut fields = gantry_core::validate::Fields::default();
    if !service::on_the_hour(ends_at) {
        fields.push("ends_at", "must be on a whole hour (UTC)");
    }
    if ends_at <= current.ends_at {
        fields.push(
            "ends_at",
            format!("must be after the current end, {}", current.ends_at),
        );
    }
    if ends_at - current.starts_at > TimeDelta::hours(service::LENGTH_MAX_HOURS) {
        fields.push(
            "ends_at",
            format!("a window lasts at most {} hours", service::LENGTH_MAX_HOURS),
        );
    }
    fields.finish()
}
