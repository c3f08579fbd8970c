//! Capacity reservations end to end: quoted, confirmed on exact GPUs or
//! refused with the windows that would fit, kept from outsiders, used by
//! their organization's orders inside the window only, ended, extended,
//! cancelled under the operator's policy, and billed to the micro-unit
//! without billing the usage inside them twice.

use chrono::{DateTime, TimeDelta, Timelike, Utc};
use reqwest::StatusCode;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::{Engine, Tenant, TestServer};

crate::on_both_engines!(
    a_reservation_is_held_for_its_organization_and_used_only_inside_its_window,
    reservations_are_extended_on_their_gpus_and_cancelled_under_the_policy,
    bad_reservations_are_refused_and_change_nothing,
    operators_see_reservations_on_nodes_and_the_calendar_and_are_warned_before_breaking_one,
    maintenance_keeps_work_off_a_node_and_stops_what_runs_there,
    reservations_made_at_once_never_share_a_gpu,
);

/// The reserved price of one `h100x8` instance-hour: 1.40 per GPU-hour.
const H100X8_RESERVED: i64 = 11_200_000;

/// The next whole hour after `t`, plus `hours`.
pub(crate) fn hour_after(t: DateTime<Utc>, hours: i64) -> DateTime<Utc> {
    let floor = t
        .with_minute(0)
        .and_then(|t| t.with_second(0))
        .and_then(|t| t.with_nanosecond(0))
        .expect("an hour");
    floor + TimeDelta::hours(1 + hours)
}

fn advance(server: &TestServer, to: DateTime<Utc>) {
    let by = to - server.state.clock.now();
    if by > TimeDelta::zero() {
        server.state.clock.advance(by);
    }
    server.state.scheduler.wake();
}

/// Reserved prices for `h100x1` and `h100x8` at 1.40 per GPU-hour.
pub(crate) async fn reserved_prices(server: &TestServer, operator: &Tenant) {
    let types = server
        .get("/api/v1/catalog/instance-types", &operator.token)
        .await;
    for t in types.items() {
        let gpus = t["gpus_per_node"].as_i64().expect("gpus");
        server
            .post(
                &format!(
                    "/api/v1/admin/catalog/instance-types/{}/prices",
                    t["id"].as_str().expect("id")
                ),
                &operator.token,
                json!({ "pricing_class": "reserved", "hourly_micros": 1_400_000 * gpus }),
            )
            .await
            .expect(StatusCode::CREATED);
    }
}

async fn setup(engine: Engine, nodes: usize) -> (TestServer, Tenant, Tenant, Tenant) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, nodes).await;
    reserved_prices(&server, &operator).await;
    let reserver = server.signup("reserver").await;
    let outsider = server.signup("outsider").await;
    (server, operator, reserver, outsider)
}

fn reservations(tenant: &Tenant) -> String {
    format!("/api/v1/orgs/{}/reservations", tenant.org_id)
}

fn window(count: i64, starts_at: DateTime<Utc>, ends_at: DateTime<Utc>) -> Value {
    json!({
        "instance_type": "h100x8", "count": count, "region": "r1",
        "starts_at": starts_at, "ends_at": ends_at,
    })
}

fn at(value: &Value) -> DateTime<Utc> {
    value
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("a time: {value}"))
}

/// Half up, as the platform rounds money: micro-units for `gpu_seconds`
/// at `hourly` per instance-hour of `gpus` GPUs.
fn priced(gpu_seconds: i64, hourly: i64, gpus: i64) -> i64 {
    let (numerator, denominator) = (
        i128::from(gpu_seconds) * i128::from(hourly),
        3_600 * i128::from(gpus),
    );
    i64::try_from((2 * numerator + denominator) / (2 * denominator)).expect("an amount")
}

/// GPU-seconds the order's usage records hold whose span starts in
/// `[from, to)`, measured and excluded.
async fn metered(server: &TestServer, order: Uuid, from: DateTime<Utc>, to: DateTime<Utc>) -> i64 {
    use gantry_entities::usage_record;
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
    usage_record::Entity::find()
        .filter(usage_record::Column::OrderId.eq(order))
        .filter(usage_record::Column::PeriodStart.gte(from))
        .filter(usage_record::Column::PeriodStart.lt(to))
        .all(server.db())
        .await
        .expect("usage records")
        .iter()
        .map(|r| i64::from(r.gpus) * (r.seconds - r.excluded_seconds))
        .sum()
}

async fn a_reservation_is_held_for_its_organization_and_used_only_inside_its_window(
    engine: Engine,
) {
    let (server, operator, reserver, outsider) = setup(engine, 2).await;
    let now = server.state.clock.now();
    let start = hour_after(now, 2);
    let end = start + TimeDelta::hours(2);

    let quote = server
        .post(
            &format!("{}/quote", reservations(&reserver)),
            &reserver.token,
            window(2, start, end),
        )
        .await;
    quote.expect(StatusCode::OK);
    assert_eq!(quote.body["available"], true);
    assert_eq!(quote.body["gpus"], 16);
    assert_eq!(quote.body["hourly_micros"], H100X8_RESERVED);
    // Two instances for two hours at 11.20.
    assert_eq!(quote.body["total_micros"], 44_800_000);
    assert_eq!(
        at(&quote.body["free_cancellation_until"]),
        start - TimeDelta::hours(48)
    );

    let confirmed = server
        .post(
            &reservations(&reserver),
            &reserver.token,
            window(2, start, end),
        )
        .await;
    confirmed.expect(StatusCode::CREATED);
    let reservation = confirmed.id("/id");
    assert_eq!(confirmed.body["state"], "upcoming");
    assert_eq!(confirmed.body["total_micros"], 44_800_000);
    assert_eq!(confirmed.body["reserved_gpu_seconds"], 16 * 7_200);
    let held: Vec<String> = confirmed.body["placement"]
        .as_array()
        .expect("placement")
        .iter()
        .map(|p| {
            assert_eq!(p["gpu_ids"].as_array().map(Vec::len), Some(8));
            p["node_name"].as_str().expect("node").to_owned()
        })
        .collect();
    assert_eq!(held, ["n1", "n2"]);

    // Another tenant is refused the same window and told the earliest
    // ones that fit: from the end of this one.
    let refused = server
        .post(
            &reservations(&outsider),
            &outsider.token,
            window(1, start, end),
        )
        .await;
    refused.expect_problem(StatusCode::CONFLICT, "no_capacity");
    let alternatives = refused.body["alternatives"]
        .as_array()
        .expect("alternatives");
    assert_eq!(at(&alternatives[0]["starts_at"]), end);
    assert_eq!(at(&alternatives[0]["ends_at"]), end + TimeDelta::hours(2));
    let quoted = server
        .post(
            &format!("{}/quote", reservations(&outsider)),
            &outsider.token,
            window(1, start, end),
        )
        .await;
    assert_eq!(quoted.body["available"], false);
    assert_eq!(quoted.body["alternatives"], refused.body["alternatives"]);
    // The outsider can neither see nor use it.
    server
        .get(
            &format!("{}/{reservation}", reservations(&outsider)),
            &outsider.token,
        )
        .await
        .expect_problem(StatusCode::NOT_FOUND, "reservation_not_found");
    server
        .post(
            &format!("/api/v1/orgs/{}/orders", outsider.org_id),
            &outsider.token,
            json!({ "instance_type": "h100x1", "reservation_id": reservation }),
        )
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "unknown_reservation");

    // Before the window the outsider may use the GPUs only with work that
    // ends in time; work without an end waits for the window to pass.
    let short = server
        .order(
            &outsider,
            json!({ "instance_type": "h100x8", "duration_seconds": 3_600 }),
        )
        .await;
    let endless = server
        .order(&outsider, json!({ "instance_type": "h100x8" }))
        .await;
    server.wait_status(&outsider, short, "running").await;
    server
        .wait_order(&outsider, endless, "held back", |o| {
            o["status"] == "queued"
                && o["pending_reason"]
                    .as_str()
                    .is_some_and(|r| r.contains(&reservation.to_string()))
        })
        .await;

    let inside = server
        .order(
            &reserver,
            json!({ "instance_type": "h100x1", "reservation_id": reservation }),
        )
        .await;
    let early = server
        .get(
            &format!("/api/v1/orgs/{}/orders/{inside}", reserver.org_id),
            &reserver.token,
        )
        .await;
    assert_eq!(early.body["pricing_class"], "reserved");
    assert_eq!(early.body["region"], "r1");
    assert_eq!(early.body["reservation_id"], json!(reservation));
    server
        .post(
            &format!("/api/v1/orgs/{}/orders", reserver.org_id),
            &reserver.token,
            json!({ "instance_type": "h100x8", "node_count": 3, "reservation_id": reservation }),
        )
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "reservation_mismatch");

    advance(&server, start + TimeDelta::seconds(30));
    server.wait_status(&outsider, short, "completed").await;
    let running = server.wait_status(&reserver, inside, "running").await;
    let node = running["placement"][0]["node_name"].as_str().expect("node");
    assert!(held.iter().any(|h| h == node), "on a reserved node: {node}");
    let during = server
        .get(
            &format!("{}/{reservation}", reservations(&reserver)),
            &reserver.token,
        )
        .await;
    assert_eq!(during.body["state"], "active");
    let still = server
        .get(
            &format!("/api/v1/orgs/{}/orders/{endless}", outsider.org_id),
            &outsider.token,
        )
        .await;
    assert_eq!(still.body["status"], "queued", "{:#}", still.body);

    // At the window's end its work is stopped and the GPUs go back.
    advance(&server, end + TimeDelta::seconds(30));
    let stopped = server.wait_status(&reserver, inside, "cancelled").await;
    assert!(
        stopped["failure_reason"]
            .as_str()
            .is_some_and(|r| r.contains("end of reservation")),
        "{stopped:#}"
    );
    server.wait_status(&outsider, endless, "running").await;
    let ended = server
        .get(
            &format!("{}/{reservation}", reservations(&reserver)),
            &reserver.token,
        )
        .await;
    assert_eq!(ended.body["state"], "ended");

    // The invoice charges the whole window once: the used time and the
    // rest at the reservation's price; the minute its work ran past the
    // window is ordinary reserved usage.
    server.cancel(&outsider, endless).await;
    server.metered_exactly().await;
    let used = metered(&server, inside, start, end).await;
    let after = metered(&server, inside, end, end + TimeDelta::hours(1)).await;
    assert!(used > 7_000 && after > 0, "used {used}, after {after}");
    let draft = server
        .post(
            &format!("/api/v1/admin/orgs/{}/invoices", reserver.org_id),
            &operator.token,
            json!({ "period_start": start - TimeDelta::hours(3), "period_end": end + TimeDelta::hours(1) }),
        )
        .await;
    draft.expect(StatusCode::CREATED);
    let lines = draft.body["lines"].as_array().expect("lines");
    let line = |kind: &str, says: &str| {
        lines
            .iter()
            .find(|l| {
                l["kind"] == kind && l["description"].as_str().is_some_and(|d| d.contains(says))
            })
            .unwrap_or_else(|| panic!("a {kind} line saying {says}: {lines:#?}"))
            .clone()
    };
    let used_line = line("reservation", ": used");
    assert_eq!(used_line["gpu_seconds"], used);
    assert_eq!(used_line["amount_micros"], priced(used, H100X8_RESERVED, 8));
    let unused_line = line("reservation", "not used");
    assert_eq!(unused_line["gpu_seconds"], 16 * 7_200 - used);
    assert_eq!(
        unused_line["amount_micros"],
        priced(16 * 7_200 - used, H100X8_RESERVED, 8)
    );
    let overrun = line("usage", "h100x1 reserved");
    assert_eq!(overrun["gpu_seconds"], after);
    assert_eq!(overrun["amount_micros"], priced(after, 1_400_000, 1));
    assert_eq!(lines.len(), 3, "nothing else, nothing twice: {lines:#?}");
    assert_eq!(
        draft.body["subtotal_micros"],
        priced(used, H100X8_RESERVED, 8)
            + priced(16 * 7_200 - used, H100X8_RESERVED, 8)
            + priced(after, 1_400_000, 1)
    );
}

async fn reservations_are_extended_on_their_gpus_and_cancelled_under_the_policy(engine: Engine) {
    let (server, operator, reserver, outsider) = setup(engine, 1).await;
    let now = server.state.clock.now();

    // Far ahead: cancelled for nothing.
    let far = hour_after(now, 72);
    let early = server
        .post(
            &reservations(&reserver),
            &reserver.token,
            window(1, far, far + TimeDelta::hours(4)),
        )
        .await;
    early.expect(StatusCode::CREATED);
    // Before cancelling, the reservation says what cancelling now costs.
    assert_eq!(early.body["cancel_now"]["total_micros"], 0);
    assert_eq!(
        at(&early.body["cancel_now"]["free_until"]),
        far - TimeDelta::hours(48)
    );
    let path = format!("{}/{}/cancel", reservations(&reserver), early.id("/id"));
    let free = server.post(&path, &reserver.token, json!({})).await;
    free.expect(StatusCode::OK);
    assert_eq!(free.body["state"], "cancelled");
    assert_eq!(free.body["cancellation_fee_micros"], 0);
    assert_eq!(free.body["total_micros"], 0);
    assert_eq!(free.body["cancel_now"], Value::Null);
    let again = server.post(&path, &reserver.token, json!({})).await;
    again.expect(StatusCode::OK);
    assert_eq!(again.body["cancelled_at"], free.body["cancelled_at"]);

    // A flexible ask takes the earliest window: the node is free at once.
    let start = hour_after(now, 2);
    let flexible = server
        .post(
            &reservations(&reserver),
            &reserver.token,
            json!({ "instance_type": "h100x8", "region": "r1", "duration_hours": 4, "earliest_start": start }),
        )
        .await;
    flexible.expect(StatusCode::CREATED);
    assert_eq!(at(&flexible.body["starts_at"]), start);
    let id = flexible.id("/id");
    let extend = format!("{}/{id}/extend", reservations(&reserver));
    let longer = server
        .post(
            &extend,
            &reserver.token,
            json!({ "ends_at": start + TimeDelta::hours(6) }),
        )
        .await;
    longer.expect(StatusCode::OK);
    assert_eq!(at(&longer.body["ends_at"]), start + TimeDelta::hours(6));
    assert_eq!(longer.body["total_micros"], 6 * H100X8_RESERVED);

    // Someone else takes the node right after it; it cannot grow into that.
    let next = server
        .post(
            &reservations(&outsider),
            &outsider.token,
            window(1, start + TimeDelta::hours(6), start + TimeDelta::hours(8)),
        )
        .await;
    next.expect(StatusCode::CREATED);
    server
        .post(
            &extend,
            &reserver.token,
            json!({ "ends_at": start + TimeDelta::hours(7) }),
        )
        .await
        .expect_problem(StatusCode::CONFLICT, "no_capacity");
    server
        .post(
            &extend,
            &reserver.token,
            json!({ "ends_at": start + TimeDelta::hours(5) }),
        )
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");

    // Inside the notice period a cancellation costs half of the time not
    // yet begun: all six hours. The reservation said so beforehand.
    let shown = server
        .get(
            &format!("{}/{id}", reservations(&reserver)),
            &reserver.token,
        )
        .await;
    assert_eq!(shown.body["cancel_now"]["fee_micros"], 3 * H100X8_RESERVED);
    assert_eq!(
        shown.body["cancel_now"]["total_micros"],
        3 * H100X8_RESERVED
    );
    let late = server
        .post(
            &format!("{}/{id}/cancel", reservations(&reserver)),
            &reserver.token,
            json!({}),
        )
        .await;
    late.expect(StatusCode::OK);
    assert_eq!(late.body["cancellation_fee_micros"], 3 * H100X8_RESERVED);
    assert_eq!(late.body["total_micros"], 3 * H100X8_RESERVED);
    assert_eq!(at(&late.body["billed_until"]), start);
    server
        .post(
            &extend,
            &reserver.token,
            json!({ "ends_at": start + TimeDelta::hours(7) }),
        )
        .await
        .expect_problem(StatusCode::CONFLICT, "reservation_over");
    // Its GPUs are free again: the outsider can take its old window.
    server
        .post(
            &reservations(&outsider),
            &outsider.token,
            window(1, start, start + TimeDelta::hours(6)),
        )
        .await
        .expect(StatusCode::CREATED);

    let draft = server
        .post(
            &format!("/api/v1/admin/orgs/{}/invoices", reserver.org_id),
            &operator.token,
            json!({ "period_start": hour_after(now, -1), "period_end": start + TimeDelta::hours(8) }),
        )
        .await;
    draft.expect(StatusCode::CREATED);
    let lines = draft.body["lines"].as_array().expect("lines");
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert_eq!(lines[0]["kind"], "cancellation_fee");
    assert_eq!(lines[0]["amount_micros"], 3 * H100X8_RESERVED);
    assert_eq!(draft.body["subtotal_micros"], 3 * H100X8_RESERVED);

    let listed = server.get(&reservations(&reserver), &reserver.token).await;
    listed.expect(StatusCode::OK);
    assert_eq!(listed.items().len(), 2);
    assert_eq!(
        server
            .get(&reservations(&outsider), &outsider.token)
            .await
            .items()
            .len(),
        2
    );
}

async fn bad_reservations_are_refused_and_change_nothing(engine: Engine) {
    let (server, _operator, reserver, outsider) = setup(engine, 2).await;
    let now = server.state.clock.now();
    let start = hour_after(now, 2);
    let end = start + TimeDelta::hours(2);
    let mine = server
        .post(
            &reservations(&reserver),
            &reserver.token,
            window(1, start, end),
        )
        .await;
    mine.expect(StatusCode::CREATED);
    let id = mine.id("/id");
    let before = server.table_counts().await;

    let refused = [
        (window(1, end, start), "validation_failed"),
        (
            window(1, hour_after(now, -3), hour_after(now, -1)),
            "validation_failed",
        ),
        (
            window(1, start + TimeDelta::minutes(30), end),
            "validation_failed",
        ),
        (window(0, start, end), "validation_failed"),
        (window(65, start, end), "validation_failed"),
        (
            window(1, start, start + TimeDelta::hours(2_161)),
            "validation_failed",
        ),
        (
            window(
                1,
                start + TimeDelta::days(366),
                start + TimeDelta::days(367),
            ),
            "validation_failed",
        ),
        (
            json!({ "instance_type": "h100x8", "region": "r1", "starts_at": start }),
            "validation_failed",
        ),
        (
            json!({ "instance_type": "h100x8", "region": "r1", "starts_at": start, "ends_at": end, "duration_hours": 2 }),
            "validation_failed",
        ),
        (
            json!({ "instance_type": "h100x8", "region": "r1", "duration_hours": 0 }),
            "validation_failed",
        ),
        // More GPUs than the region has.
        (window(3, start, end), "never_fits"),
        (
            json!({ "instance_type": "h100x8", "region": "r2", "starts_at": start, "ends_at": end }),
            "never_fits",
        ),
        (
            json!({ "instance_type": "a100x8", "region": "r1", "starts_at": start, "ends_at": end }),
            "unknown_instance_type",
        ),
        (
            json!({ "instance_type": "h100x8", "region": "mars", "starts_at": start, "ends_at": end }),
            "unknown_region",
        ),
        (
            json!({ "instance_type": "h100x8", "region": "r1", "starts_at": start, "ends_at": end, "project_id": Uuid::now_v7() }),
            "unknown_project",
        ),
        (
            json!({ "instance_type": "h100x8", "region": "r1", "starts_at": start, "ends_at": end, "gpus": 8 }),
            "invalid_body",
        ),
        (
            json!({ "instance_type": "h100x8", "region": "r1", "starts_at": "tomorrow", "ends_at": end }),
            "invalid_body",
        ),
    ];
    for (body, code) in refused {
        let reply = server
            .post(&reservations(&reserver), &reserver.token, body.clone())
            .await;
        assert_eq!(reply.body["code"], code, "{body}: {:#}", reply.body);
        assert!(reply.status.is_client_error(), "{body}: {}", reply.status);
        let quoted = server
            .post(
                &format!("{}/quote", reservations(&reserver)),
                &reserver.token,
                body.clone(),
            )
            .await;
        assert_eq!(quoted.body["code"], code, "quote {body}: {:#}", quoted.body);
    }
    crate::bad_input::raw(
        &server,
        &reservations(&reserver),
        Some(&reserver.token),
        Some("application/json"),
        b"{\"instance_type\": ".to_vec(),
    )
    .await
    .expect_problem(StatusCode::BAD_REQUEST, "malformed_json");

    // Orders that misuse reservations.
    let orders = format!("/api/v1/orgs/{}/orders", reserver.org_id);
    for (body, code) in [
        (
            json!({ "instance_type": "h100x1", "pricing_class": "reserved" }),
            "validation_failed",
        ),
        (
            json!({ "instance_type": "h100x1", "pricing_class": "spot", "reservation_id": id }),
            "validation_failed",
        ),
        (
            json!({ "instance_type": "h100x1", "reservation_id": Uuid::now_v7() }),
            "unknown_reservation",
        ),
        (
            json!({ "instance_type": "h100x1", "region": "r2", "reservation_id": id }),
            "reservation_mismatch",
        ),
    ] {
        let reply = server.post(&orders, &reserver.token, body.clone()).await;
        assert_eq!(reply.body["code"], code, "{body}: {:#}", reply.body);
    }

    // Another tenant's reservation is not found, whatever is asked of it.
    let foreign = format!("{}/{id}", reservations(&reserver));
    server
        .get(&foreign, &outsider.token)
        .await
        .expect_problem(StatusCode::NOT_FOUND, "organization_not_found");
    let wrong_org = format!("/api/v1/orgs/{}/reservations/{id}", outsider.org_id);
    for path in [format!("{wrong_org}/cancel"), format!("{wrong_org}/extend")] {
        server
            .post(
                &path,
                &outsider.token,
                json!({ "ends_at": end + TimeDelta::hours(1) }),
            )
            .await
            .expect_problem(StatusCode::NOT_FOUND, "reservation_not_found");
    }
    server
        .get(&wrong_org, &outsider.token)
        .await
        .expect_problem(StatusCode::NOT_FOUND, "reservation_not_found");
    server
        .get(
            &format!("{}/not-a-uuid", reservations(&reserver)),
            &reserver.token,
        )
        .await
        .expect_problem(StatusCode::NOT_FOUND, "reservation_not_found");
    let extend = format!("{}/{id}/extend", reservations(&reserver));
    for ends_at in [end - TimeDelta::hours(1), end + TimeDelta::minutes(30)] {
        server
            .post(&extend, &reserver.token, json!({ "ends_at": ends_at }))
            .await
            .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    }
    assert_eq!(server.table_counts().await, before, "nothing was written");
}

async fn operators_see_reservations_on_nodes_and_the_calendar_and_are_warned_before_breaking_one(
    engine: Engine,
) {
    let (server, operator, reserver, outsider) = setup(engine, 2).await;
    let start = hour_after(server.state.clock.now(), 3);
    let confirmed = server
        .post(
            &reservations(&reserver),
            &reserver.token,
            window(1, start, start + TimeDelta::hours(2)),
        )
        .await;
    confirmed.expect(StatusCode::CREATED);
    let node_id = confirmed.id("/placement/0/node_id");

    // Tenants see how many instances are left to reserve, hour by hour.
    let from = start - TimeDelta::hours(1);
    let availability = server
        .get(
            &format!(
                "{}/availability?instance_type=h100x8&region=r1&from={}&hours=4",
                reservations(&outsider),
                from.format("%Y-%m-%dT%H:%M:%SZ")
            ),
            &outsider.token,
        )
        .await;
    availability.expect(StatusCode::OK);
    let left: Vec<i64> = availability.body["slots"]
        .as_array()
        .expect("slots")
        .iter()
        .map(|s| s["instances"].as_i64().expect("instances"))
        .collect();
    assert_eq!(left, [2, 1, 1, 2]);
    assert_eq!(availability.body["hourly_micros"], H100X8_RESERVED);
    for query in [
        "instance_type=h100x8&region=r1&hours=0",
        "instance_type=h100x8&region=r1&hours=673",
        "instance_type=h100x8&region=r1&from=2027-01-04T09:30:00Z",
    ] {
        server
            .get(
                &format!("{}/availability?{query}", reservations(&outsider)),
                &outsider.token,
            )
            .await
            .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    }
    server
        .get(
            &format!(
                "{}/availability?instance_type=a100&region=r1",
                reservations(&outsider)
            ),
            &outsider.token,
        )
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "unknown_instance_type");

    // Operators see reserved, committed and free GPUs and who reserved.
    let calendar = server
        .get(
            &format!(
                "/api/v1/admin/capacity/calendar?gpu_model=H100&region=r1&from={}&hours=4",
                from.format("%Y-%m-%dT%H:%M:%SZ")
            ),
            &operator.token,
        )
        .await;
    calendar.expect(StatusCode::OK);
    let slots = calendar.body["slots"].as_array().expect("slots");
    assert_eq!(slots[0]["reserved"], 0);
    assert_eq!(slots[1]["reserved"], 8);
    assert_eq!(slots[1]["free"], 8);
    assert_eq!(slots[1]["gpus"], 16);
    assert_eq!(
        calendar.body["reservations"][0]["org_id"],
        json!(reserver.org_id)
    );
    server
        .get(
            "/api/v1/admin/capacity/calendar?gpu_model=H100",
            &reserver.token,
        )
        .await
        .expect_problem(StatusCode::FORBIDDEN, "forbidden");
    server
        .get(
            "/api/v1/admin/capacity/calendar?gpu_model=B200",
            &operator.token,
        )
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "unknown_gpu_model");

    // The node shows what it holds, and taking it out of service is refused
    // until the operator says to go ahead.
    let node = server
        .get(&format!("/api/v1/admin/nodes/{node_id}"), &operator.token)
        .await;
    assert_eq!(node.body["reservations"][0]["id"], confirmed.body["id"]);
    assert_eq!(
        node.body["reservations"][0]["gpu_ids"]
            .as_array()
            .map(Vec::len),
        Some(8)
    );
    for action in ["cordon", "drain"] {
        let refused = server
            .post(
                &format!("/api/v1/admin/nodes/{node_id}/{action}"),
                &operator.token,
                json!({}),
            )
            .await;
        refused.expect_problem(StatusCode::CONFLICT, "reservation_on_node");
        assert!(
            refused.body["detail"]
                .as_str()
                .is_some_and(|d| d.contains("force=true"))
        );
    }
    let forced = server
        .post(
            &format!("/api/v1/admin/nodes/{node_id}/cordon?force=true&reason=NVLink%20errors"),
            &operator.token,
            json!({}),
        )
        .await;
    forced.expect(StatusCode::OK);
    assert_eq!(forced.body["state"], "cordoned");
    assert_eq!(forced.body["state_reason"], "NVLink errors");
    // Drained without a new reason, it keeps the one it had.
    let drained = server
        .post(
            &format!("/api/v1/admin/nodes/{node_id}/drain?force=true"),
            &operator.token,
            json!({}),
        )
        .await;
    drained.expect(StatusCode::OK);
    assert_eq!(drained.body["state_reason"], "NVLink errors");
    // Back in service, the reason goes with the state it explained.
    let back = server
        .post(
            &format!("/api/v1/admin/nodes/{node_id}/uncordon"),
            &operator.token,
            json!({}),
        )
        .await;
    back.expect(StatusCode::OK);
    assert_eq!(back.body["state_reason"], Value::Null);
}

async fn maintenance_keeps_work_off_a_node_and_stops_what_runs_there(engine: Engine) {
    let (server, operator, reserver, outsider) = setup(engine, 1).await;
    let now = server.state.clock.now();
    let endless = server
        .order(&outsider, json!({ "instance_type": "h100x8" }))
        .await;
    server.wait_status(&outsider, endless, "running").await;

    let made = server
        .post(
            "/api/v1/admin/maintenance",
            &operator.token,
            json!({ "node": "n1", "ends_at": hour_after(now, 2), "reason": "replace a fan" }),
        )
        .await;
    made.expect(StatusCode::CREATED);
    let held = made.id("/id");
    assert_eq!(made.body["node_name"], "n1");
    // Past the grace period the work is off the node and waits for it.
    advance(&server, now + TimeDelta::seconds(90));
    let waiting = server
        .wait_order(&outsider, endless, "requeued behind the maintenance", |o| {
            o["status"] == "queued"
                && o["pending_reason"]
                    .as_str()
                    .is_some_and(|r| r.contains(&held.to_string()))
        })
        .await;
    assert_eq!(waiting["attempts"], 1);
    let calendar = server
        .get(
            "/api/v1/admin/capacity/calendar?gpu_model=H100&hours=2",
            &operator.token,
        )
        .await;
    calendar.expect(StatusCode::OK);
    assert_eq!(calendar.body["maintenance"][0]["id"], json!(held));
    assert_eq!(calendar.body["slots"][0]["reserved"], 8);
    let listed = server
        .get("/api/v1/admin/maintenance", &operator.token)
        .await;
    assert_eq!(listed.body[0]["reason"], "replace a fan");

    let cancelled = server
        .post(
            &format!("/api/v1/admin/maintenance/{held}/cancel"),
            &operator.token,
            json!({}),
        )
        .await;
    cancelled.expect(StatusCode::OK);
    assert_eq!(cancelled.body["status"], "cancelled");
    server.wait_status(&outsider, endless, "running").await;
    server.cancel(&outsider, endless).await;
    // Its GPUs are let go after the cancel answers: the counts below must
    // not see that happen.
    for _ in 0..200 {
        if server.count("SELECT COUNT(*) FROM gpu_claims").await == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(
        server.count("SELECT COUNT(*) FROM gpu_claims").await,
        0,
        "the cancelled order let its GPUs go"
    );

    // Maintenance that would break a tenant's reservation needs force.
    let later = hour_after(now, 3);
    server
        .post(
            &reservations(&reserver),
            &reserver.token,
            window(1, later, later + TimeDelta::hours(2)),
        )
        .await
        .expect(StatusCode::CREATED);
    let overlapping = json!({
        "node": "n1", "starts_at": later + TimeDelta::hours(1),
        "ends_at": later + TimeDelta::hours(3), "reason": "firmware",
    });
    let refused = server
        .post(
            "/api/v1/admin/maintenance",
            &operator.token,
            overlapping.clone(),
        )
        .await;
    refused.expect_problem(StatusCode::CONFLICT, "reservation_on_node");
    assert!(
        refused.body["detail"]
            .as_str()
            .is_some_and(|d| d.contains("force=true"))
    );
    server
        .post(
            "/api/v1/admin/maintenance?force=true",
            &operator.token,
            overlapping,
        )
        .await
        .expect(StatusCode::CREATED);

    let before = server.table_counts().await;
    for (body, code) in [
        (
            json!({ "node": "n1", "starts_at": later, "ends_at": later - TimeDelta::hours(1), "reason": "x" }),
            "validation_failed",
        ),
        (
            json!({ "node": "n1", "ends_at": later, "reason": " " }),
            "validation_failed",
        ),
        (
            json!({ "node": "n1", "starts_at": now - TimeDelta::days(1), "ends_at": later, "reason": "x" }),
            "validation_failed",
        ),
        (
            json!({ "node": "nope", "ends_at": later, "reason": "x" }),
            "unknown_node",
        ),
        (json!({ "node": "n1", "reason": "x" }), "invalid_body"),
    ] {
        let reply = server
            .post("/api/v1/admin/maintenance", &operator.token, body.clone())
            .await;
        assert_eq!(reply.body["code"], code, "{body}: {:#}", reply.body);
    }
    server
        .post(
            "/api/v1/admin/maintenance",
            &outsider.token,
            json!({ "node": "n1", "ends_at": later, "reason": "x" }),
        )
        .await
        .expect_problem(StatusCode::FORBIDDEN, "forbidden");
    server
        .post(
            &format!("/api/v1/admin/maintenance/{}/cancel", Uuid::now_v7()),
            &operator.token,
            json!({}),
        )
        .await
        .expect_problem(StatusCode::NOT_FOUND, "maintenance_window_not_found");
    assert_eq!(server.table_counts().await, before, "nothing was written");
}

async fn reservations_made_at_once_never_share_a_gpu(engine: Engine) {
    let (server, _operator, reserver, outsider) = setup(engine, 2).await;
    let start = hour_after(server.state.clock.now(), 4);
    let end = start + TimeDelta::hours(3);
    // Eight requests for one node each over the same window, from two
    // tenants at once, on a cluster of two nodes.
    let sent: Vec<_> = (0..8)
        .map(|i| {
            let tenant = if i % 2 == 0 { &reserver } else { &outsider };
            crate::support::sent_at_once(
                server
                    .http
                    .post(server.url(&reservations(tenant)))
                    .bearer_auth(&tenant.token)
                    .json(&window(1, start, end)),
            )
        })
        .collect();
    let mut created = 0;
    for task in sent {
        let (status, body) = task.await.expect("task");
        if status == StatusCode::CREATED {
            created += 1;
            continue;
        }
        assert_eq!(status, StatusCode::CONFLICT, "{body:#}");
        let code = body["code"].as_str().unwrap_or_default();
        assert!(
            ["no_capacity", "capacity_changed"].contains(&code),
            "{body:#}"
        );
    }
    assert_eq!(created, 2, "one per node");
    let held = server.count("SELECT COUNT(*) FROM reservation_nodes").await;
    let distinct = server
        .count("SELECT COUNT(DISTINCT node_id) FROM reservation_nodes")
        .await;
    assert_eq!((held, distinct), (2, 2), "each node held once");
}
