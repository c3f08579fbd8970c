//! Billing over a simulated month: the server's clock is moved on by days
//! while real orders start, get preempted, fail on a node failure and end,
//! a price changes mid-month and an off-peak window applies; the invoice
//! the server finalizes by itself after the month must equal, to the
//! micro-unit, the usage priced second by second by the independent
//! calculation below.

use std::collections::HashMap;

use chrono::{DateTime, Datelike, TimeDelta, TimeZone, Timelike, Utc};
use gantry_entities::{price, region, usage_record};
use gantry_types::classes::PricingClass;
use reqwest::StatusCode;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::{Engine, Tenant, TestServer};

crate::on_both_engines!(
    a_month_of_orders_is_invoiced_to_the_micro_unit,
    drafts_take_adjustments_and_finalized_invoices_never_change,
    a_spent_hard_capped_budget_admits_only_production,
    a_prepaid_balance_draws_down_and_stops_work_when_it_runs_out,
    money_paths_refuse_empty_reasons_and_sums_past_their_limits,
);

/// Two days: longer than any jump below between an agent's heartbeats.
const HEARTBEAT_DEADLINE: i64 = 2 * 24 * 3600;

async fn billing_server(engine: Engine) -> TestServer {
    TestServer::start_with(engine, |config| {
        config.metering_interval_seconds = 3600;
        config.agent_heartbeat_deadline_seconds = HEARTBEAT_DEADLINE as u64;
    })
    .await
}

fn advance(server: &TestServer, by: TimeDelta) {
    server.state.clock.advance(by);
    server.state.scheduler.wake();
}

fn first_of_next_month(now: DateTime<Utc>) -> DateTime<Utc> {
    let (year, month) = if now.month() == 12 {
        (now.year() + 1, 1)
    } else {
        (now.year(), now.month() + 1)
    };
    Utc.with_ymd_and_hms(year, month, 1, 0, 0, 0)
        .single()
        .expect("a month start")
}

/// A node agent played by the test over the agent API: one H100 in `r2`.
struct FakeAgent {
    credential: String,
}

impl FakeAgent {
    async fn join(server: &TestServer, operator: &Tenant) -> Self {
        Self {
            credential: server.join_agent(operator, "r2", "edge-1", 1).await,
        }
    }

    async fn heartbeat(&self, server: &TestServer) {
        server
            .post(
                "/api/v1/agent/heartbeat",
                &self.credential,
                json!({ "gpus": [] }),
            )
            .await
            .expect(StatusCode::OK);
    }

    async fn running(&self, server: &TestServer, order: Uuid) {
        server
            .post(
                "/api/v1/agent/status",
                &self.credential,
                json!({ "order_id": order, "state": "running" }),
            )
            .await
            .expect(StatusCode::OK);
    }
}

async fn a_month_of_orders_is_invoiced_to_the_micro_unit(engine: Engine) {
    let server = billing_server(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 2).await;
    // Berlin nights from 01:00 to 05:00 cost 70 %.
    let regions = server.get("/api/v1/catalog/regions", &operator.token).await;
    let r1 = regions
        .body
        .as_array()
        .or_else(|| regions.body["items"].as_array())
        .expect("regions")
        .iter()
        .find(|r| r["name"] == "r1")
        .expect("r1")["id"]
        .as_str()
        .expect("id")
        .to_owned();
    server
        .patch(
            &format!("/api/v1/admin/catalog/regions/{r1}"),
            &operator.token,
            json!({ "off_peak": { "start_hour": 1, "end_hour": 5, "multiplier_permille": 700 } }),
        )
        .await
        .expect(StatusCode::OK);
    let tenant = server.signup("tenant").await;
    server
        .put(
            &format!("/api/v1/admin/orgs/{}/billing", tenant.org_id),
            &operator.token,
            json!({ "discount_permille": 100 }),
        )
        .await
        .expect(StatusCode::OK);

    // The month begins.
    let month = first_of_next_month(server.state.clock.now());
    advance(
        &server,
        month - server.state.clock.now() + TimeDelta::minutes(10),
    );
    let agent = FakeAgent::join(&server, &operator).await;
    let training = server
        .order(
            &tenant,
            json!({ "instance_type": "h100x8", "region": "r1", "workload_class": "training" }),
        )
        .await;
    let spot = server
        .order(
            &tenant,
            json!({ "instance_type": "h100x1", "region": "r1", "pricing_class": "spot", "priority_class": "preemptible", "workload_class": "batch" }),
        )
        .await;
    let dev = server
        .order(
            &tenant,
            json!({ "instance_type": "h100x1", "region": "r2", "priority_class": "production" }),
        )
        .await;
    server.wait_status(&tenant, training, "running").await;
    server.wait_status(&tenant, spot, "running").await;
    server
        .wait_order(&tenant, dev, "placed on the agent's node", |o| {
            o["placement"][0]["node_name"] == "edge-1"
        })
        .await;
    agent.running(&server, dev).await;
    server.wait_status(&tenant, dev, "running").await;

    // Day 1: the agent's last sign of life; the 8-GPU price goes up on day 3.
    advance(&server, TimeDelta::days(1));
    agent.heartbeat(&server).await;
    let h100x8 = server
        .get("/api/v1/catalog/instance-types", &tenant.token)
        .await;
    let h100x8 = h100x8
        .items()
        .iter()
        .find(|t| t["name"] == "h100x8")
        .expect("h100x8")["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let price_change = server.state.clock.now() + TimeDelta::days(2) + TimeDelta::seconds(17);
    let prices = format!("/api/v1/admin/catalog/instance-types/{h100x8}/prices");
    let price_change_id = server
        .post(
            &prices,
            &operator.token,
            json!({ "pricing_class": "on_demand", "hourly_micros": 20_000_000, "effective_from": price_change }),
        )
        .await
        .expect(StatusCode::CREATED)
        .body["id"]
        .as_str()
        .expect("price id")
        .to_owned();
    // A second change, scheduled by mistake and withdrawn before it starts:
    // the invoice below must not know it.
    let mistaken = server
        .post(
            &prices,
            &operator.token,
            json!({ "pricing_class": "on_demand", "hourly_micros": 99_000_000, "effective_from": price_change + TimeDelta::days(1) }),
        )
        .await
        .expect(StatusCode::CREATED)
        .body["id"]
        .as_str()
        .expect("price id")
        .to_owned();
    server
        .delete(&format!("{prices}/{mistaken}"), &tenant.token)
        .await
        .expect(StatusCode::FORBIDDEN);
    server
        .delete(&format!("{prices}/{mistaken}"), &operator.token)
        .await
        .expect(StatusCode::NO_CONTENT);
    server
        .delete(&format!("{prices}/{mistaken}"), &operator.token)
        .await
        .expect(StatusCode::NOT_FOUND);

    // Day 4: the agent has been silent past the deadline; its dev instance
    // fails, the time since its last heartbeat is not billed.
    advance(&server, TimeDelta::days(3));
    server.wait_status(&tenant, dev, "failed").await;
    server
        .delete(&format!("{prices}/{price_change_id}"), &operator.token)
        .await
        .expect_problem(StatusCode::CONFLICT, "price_in_force");

    // A production order needs a whole node and preempts the spot work.
    let production = server
        .order(
            &tenant,
            json!({ "instance_type": "h100x8", "region": "r1", "priority_class": "production", "workload_class": "inference" }),
        )
        .await;
    server.wait_status(&tenant, production, "running").await;
    server.wait_status(&tenant, spot, "queued").await;

    // Day 9: production ends and the spot work runs again.
    advance(&server, TimeDelta::days(5) + TimeDelta::seconds(1234));
    server.cancel(&tenant, production).await;
    server.wait_status(&tenant, spot, "running").await;

    // Day 13: everything ends.
    advance(&server, TimeDelta::days(4) + TimeDelta::seconds(321));
    server.cancel(&tenant, training).await;
    server.cancel(&tenant, spot).await;
    let gpu_seconds = server.metered_exactly().await;
    assert!(gpu_seconds > 8 * 12 * 86_400, "{gpu_seconds}");

    // After the month, once its usage is final, the server invoices it.
    let next_month = first_of_next_month(month);
    advance(
        &server,
        next_month - server.state.clock.now() + TimeDelta::seconds(HEARTBEAT_DEADLINE + 3600 + 60),
    );
    let invoice = finalized_invoice(&server, &tenant).await;
    assert_eq!(invoice["period_start"], json!(month));
    assert_eq!(invoice["period_end"], json!(next_month));
    let expected = priced_second_by_second(&server, tenant.org_id).await;
    assert_eq!(invoice["subtotal_micros"], expected.subtotal, "{invoice:#}");
    let discount = -(expected.subtotal + 5) / 10;
    assert_eq!(invoice["discount_micros"], discount);
    assert_eq!(invoice["total_micros"], expected.subtotal + discount);

    // The 8-GPU on-demand usage is split at the price change, to the second.
    let lines = invoice["lines"].as_array().expect("lines");
    let at = |hourly: i64| -> i64 {
        lines
            .iter()
            .filter(|l| {
                l["kind"] == "usage"
                    && l["instance_type"] == "h100x8"
                    && l["pricing_class"] == "on_demand"
                    && l["hourly_micros"] == hourly
            })
            .map(|l| l["quantity_seconds"].as_i64().expect("seconds"))
            .sum()
    };
    assert_eq!(at(16_000_000), expected.before_change);
    assert_eq!(at(20_000_000), expected.after_change);
    assert!(
        lines.iter().any(|l| l["price_permille"] == 700),
        "off-peak lines"
    );
    assert!(lines.iter().any(|l| l["kind"] == "usage"
        && l["pricing_class"] == "spot"
        && l["hourly_micros"] == 800_000));
    let downtime: Vec<&Value> = lines.iter().filter(|l| l["kind"] == "downtime").collect();
    assert_eq!(downtime.len(), 1, "{lines:#?}");
    assert_eq!(downtime[0]["region"], "r2");
    assert_eq!(downtime[0]["amount_micros"], 0);
    assert_eq!(downtime[0]["quantity_seconds"], expected.excluded);
    assert!(expected.excluded >= 2 * 86_400, "down from day 1 to day 4");
    assert_eq!(
        lines
            .iter()
            .map(|l| l["amount_micros"].as_i64().expect("amount"))
            .sum::<i64>(),
        expected.subtotal + discount
    );
    assert!(
        !lines.iter().any(|l| l["kind"] == "sla_credit"),
        "credits go to the next invoice"
    );

    // Spend so far over the same month is the invoice before credits; its
    // days and orders are the same usage, each part rounded once.
    let spend = server
        .get(
            &format!(
                "/api/v1/orgs/{}/spend?from={}&to={}",
                tenant.org_id,
                crate::support::query_time(month),
                crate::support::query_time(next_month)
            ),
            &tenant.token,
        )
        .await;
    spend.expect(StatusCode::OK);
    assert_eq!(spend.body["total_micros"], expected.subtotal + discount);
    let parts = |key: &str| -> (usize, i64) {
        let parts = spend.body[key].as_array().expect("parts");
        (
            parts.len(),
            parts
                .iter()
                .map(|p| p["amount_micros"].as_i64().expect("amount"))
                .sum(),
        )
    };
    let (days, by_day) = parts("days");
    assert!(days >= 12, "{days} days of usage");
    // Each part rounds each of its lines once, half up: at most one
    // micro-unit per line away from the month's lines.
    assert!(
        (by_day - expected.subtotal).abs() <= 4 * days as i64 * 24,
        "{by_day} against {}",
        expected.subtotal
    );
    let (orders, by_order) = parts("orders");
    assert_eq!(orders, 4, "training, spot, dev and production");
    assert!((by_order - expected.subtotal).abs() <= 24, "{by_order}");
    let one = server
        .get(
            &format!(
                "/api/v1/orgs/{}/spend?from={}&order_id={training}",
                tenant.org_id,
                crate::support::query_time(month),
            ),
            &tenant.token,
        )
        .await;
    one.expect(StatusCode::OK);
    assert_eq!(one.body["orders"].as_array().map(Vec::len), Some(1));
    assert_eq!(
        one.body["total_micros"],
        one.body["orders"][0]["amount_micros"]
    );

    // The SLA report: the production instance on the failed node was up one
    // day of the four it was expected to run, below every tier.
    let dev_charges = lines
        .iter()
        .find(|l| l["kind"] == "usage" && l["region"] == "r2")
        .expect("the instance's usage")["amount_micros"]
        .as_i64()
        .expect("amount");
    let report = server
        .get(
            &format!(
                "/api/v1/orgs/{}/sla?month={}",
                tenant.org_id,
                month.format("%Y-%m")
            ),
            &tenant.token,
        )
        .await;
    report.expect(StatusCode::OK);
    let orders = report.body["orders"].as_array().expect("orders");
    let hit = orders
        .iter()
        .find(|o| o["order_id"] == json!(dev))
        .expect("the failed instance is reported");
    let availability = hit["availability_permyriad"]
        .as_i64()
        .expect("availability");
    assert!((2400..=2600).contains(&availability), "{hit:#}");
    assert_eq!(hit["credit_percent"], 100);
    assert_eq!(hit["charges_micros"], dev_charges);
    assert_eq!(hit["credit_micros"], dev_charges);
    let evidence: Vec<&str> = hit["evidence"]
        .as_array()
        .expect("evidence")
        .iter()
        .filter_map(|e| e["kind"].as_str())
        .collect();
    assert!(evidence.contains(&"allocation_lost"), "{hit:#}");
    let kept = orders
        .iter()
        .find(|o| o["order_id"] == json!(production))
        .expect("the production order is reported");
    assert_eq!(kept["availability_permyriad"], 10_000);
    assert_eq!(kept["credit_micros"], 0);
    let production_class = &report.body["classes"][0];
    assert_eq!(production_class["priority_class"], "production");
    assert_eq!(production_class["waits_measured"], 2);
    assert_eq!(report.body["credits_micros"], dev_charges);

    // The credit lands on the next month's invoice, with nothing else used.
    advance(
        &server,
        first_of_next_month(next_month) - server.state.clock.now()
            + TimeDelta::seconds(HEARTBEAT_DEADLINE + 3600 + 60),
    );
    let path = format!("/api/v1/orgs/{}/invoices", tenant.org_id);
    // The leader drafts the month, then finalizes it: wait for the latter.
    let mut next = Value::Null;
    for _ in 0..400 {
        let list = server.get(&path, &tenant.token).await;
        if let Some(found) = list
            .items()
            .iter()
            .find(|i| i["period_start"] == json!(next_month))
        {
            next = server
                .get(
                    &format!("{path}/{}", found["id"].as_str().expect("id")),
                    &tenant.token,
                )
                .await
                .body
                .clone();
            if next["status"] == "finalized" {
                break;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(next["status"], "finalized", "{next:#}");
    assert_eq!(next["credits_micros"], -dev_charges);
    assert_eq!(next["total_micros"], -dev_charges);
    let credit = &next["lines"][0];
    assert_eq!(credit["kind"], "sla_credit");
    assert!(
        credit["description"]
            .as_str()
            .is_some_and(|d| d.contains(&dev.to_string()) && d.contains("against 99.9% promised")),
        "{credit:#}"
    );
}

async fn finalized_invoice(server: &TestServer, tenant: &Tenant) -> Value {
    let path = format!("/api/v1/orgs/{}/invoices", tenant.org_id);
    for _ in 0..400 {
        let list = server.get(&path, &tenant.token).await;
        list.expect(StatusCode::OK);
        if let Some(found) = list.items().iter().find(|i| i["status"] == "finalized") {
            let id = found["id"].as_str().expect("id");
            let full = server.get(&format!("{path}/{id}"), &tenant.token).await;
            full.expect(StatusCode::OK);
            return full.body.clone();
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("no invoice was finalized for the month");
}

struct Expected {
    subtotal: i64,
    before_change: i64,
    after_change: i64,
    excluded: i64,
}

/// Prices every billable second of the organization's usage records on its
/// own: the latest price version in force at that second (a region's own
/// before the general one), times the off-peak share at that local hour;
/// seconds at one price and share are summed and rounded once, half up.
async fn priced_second_by_second(server: &TestServer, org: Uuid) -> Expected {
    let db = server.db();
    let records = usage_record::Entity::find()
        .filter(usage_record::Column::OrgId.eq(org))
        .all(db)
        .await
        .expect("records");
    let prices = price::Entity::find().all(db).await.expect("prices");
    let regions: HashMap<Uuid, region::Model> = region::Entity::find()
        .all(db)
        .await
        .expect("regions")
        .into_iter()
        .map(|r| (r.id, r))
        .collect();
    let price_at = |r: &usage_record::Model, t: i64| -> i64 {
        let in_force = |own: bool| {
            prices
                .iter()
                .filter(|p| {
                    p.instance_type_id == r.instance_type_id
                        && p.pricing_class == r.pricing_class
                        && p.effective_from.timestamp() <= t
                        && if own {
                            p.region_id == Some(r.region_id)
                        } else {
                            p.region_id.is_none()
                        }
                })
                .max_by_key(|p| (p.effective_from, p.id))
                .map(|p| p.hourly_micros)
        };
        in_force(true)
            .or_else(|| in_force(false))
            .expect("a price in force")
    };
    let share_at = |region: &region::Model, t: i64| -> i64 {
        let (Some(start), Some(end), Some(share)) = (
            region.off_peak_start_hour,
            region.off_peak_end_hour,
            region.off_peak_multiplier_permille,
        ) else {
            return 1000;
        };
        let tz: chrono_tz::Tz = region.time_zone.parse().expect("time zone");
        let hour = i16::try_from(
            DateTime::from_timestamp(t, 0)
                .expect("time")
                .with_timezone(&tz)
                .hour(),
        )
        .expect("hour");
        let inside = if start <= end {
            hour >= start && hour < end
        } else {
            hour >= start || hour < end
        };
        if inside { i64::from(share) } else { 1000 }
    };
    let mut seconds: HashMap<(Uuid, Uuid, &'static str, i64, i64), i128> = HashMap::new();
    let mut expected = Expected {
        subtotal: 0,
        before_change: 0,
        after_change: 0,
        excluded: 0,
    };
    let mut shares: HashMap<(Uuid, i64), i64> = HashMap::new();
    for r in &records {
        expected.excluded += r.excluded_seconds;
        let region = &regions[&r.region_id];
        for t in r.period_start.timestamp()..r.period_end.timestamp() - r.excluded_seconds {
            let hourly = price_at(r, t);
            // Whole-hour time zones only (Berlin, UTC here): the share is
            // the same for every second of a UTC hour.
            let share = *shares
                .entry((r.region_id, t.div_euclid(3600)))
                .or_insert_with(|| share_at(region, t));
            *seconds
                .entry((
                    r.instance_type_id,
                    r.region_id,
                    r.pricing_class.as_str(),
                    hourly,
                    share,
                ))
                .or_default() += 1;
            if r.pricing_class == PricingClass::OnDemand && hourly == 16_000_000 && r.gpus == 8 {
                expected.before_change += 1;
            }
            if hourly == 20_000_000 {
                expected.after_change += 1;
            }
        }
    }
    for ((_, _, _, hourly, share), n) in seconds {
        let exact = n * i128::from(hourly) * i128::from(share);
        expected.subtotal +=
            i64::try_from((2 * exact + 3_600_000).div_euclid(7_200_000)).expect("fits");
    }
    expected
}

async fn drafts_take_adjustments_and_finalized_invoices_never_change(engine: Engine) {
    let server = billing_server(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 1).await;
    let tenant = server.signup("tenant").await;
    let other = server.signup("other").await;
    let order = server
        .order(&tenant, json!({ "instance_type": "h100x1" }))
        .await;
    server.wait_status(&tenant, order, "running").await;
    advance(&server, TimeDelta::hours(5));
    server.cancel(&tenant, order).await;
    server.metered_exactly().await;

    // An operator takes half an hour of a full metered hour back.
    let records = server
        .get(
            &format!("/api/v1/admin/usage-records?order_id={order}&limit=200"),
            &operator.token,
        )
        .await;
    records.expect(StatusCode::OK);
    let full_hour = records
        .items()
        .iter()
        .find(|r| r["seconds"] == 3600 && r["excluded_seconds"] == 0)
        .expect("a full hour")
        .clone();
    let correct = format!(
        "/api/v1/admin/usage-records/{}/corrections",
        full_hour["id"].as_str().expect("id")
    );
    let correction = server
        .post(
            &correct,
            &operator.token,
            json!({ "seconds": 1800, "reason": "the instance was unreachable" }),
        )
        .await;
    correction.expect(StatusCode::CREATED);
    assert_eq!(correction.body["kind"], "correction");
    assert_eq!(correction.body["seconds"], 0);
    assert_eq!(correction.body["excluded_seconds"], 1800);
    assert_eq!(correction.body["author"], json!(operator.user_id));
    server
        .post(
            &correct,
            &operator.token,
            json!({ "seconds": 1801, "reason": "more than is left" }),
        )
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "beyond_billable");
    server
        .post(
            &format!(
                "/api/v1/admin/usage-records/{}/corrections",
                correction.str("/id")
            ),
            &operator.token,
            json!({ "seconds": 1, "reason": "a correction of a correction" }),
        )
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "not_metered");
    // Measured time stays; billable time is half an hour less.
    let usage = server
        .get(
            &format!(
                "/api/v1/orgs/{}/usage?from={}",
                tenant.org_id,
                (server.state.clock.now() - TimeDelta::days(1)).format("%Y-%m-%dT%H:%M:%SZ")
            ),
            &tenant.token,
        )
        .await;
    let measured = usage.body["totals"]["gpu_seconds"]
        .as_i64()
        .expect("measured");
    assert_eq!(usage.body["totals"]["excluded_gpu_seconds"], 1800);
    assert_eq!(
        usage.body["totals"]["billable_gpu_seconds"],
        measured - 1800
    );

    let now = server.state.clock.now();
    let start = now - TimeDelta::days(1);
    let create = format!("/api/v1/admin/orgs/{}/invoices", tenant.org_id);
    let draft = server
        .post(
            &create,
            &operator.token,
            json!({ "period_start": start, "period_end": now }),
        )
        .await;
    draft.expect(StatusCode::CREATED);
    assert_eq!(draft.body["status"], "draft");
    let id = draft.str("/id");
    let subtotal = draft.body["subtotal_micros"].as_i64().expect("subtotal");
    // About five hours of one GPU at 2.00/h, less the half hour taken back.
    assert!((8_990_000..=9_010_000).contains(&subtotal), "{subtotal}");
    let taken_back = draft.body["lines"]
        .as_array()
        .expect("lines")
        .iter()
        .find(|l| l["kind"] == "correction")
        .expect("the correction is on the invoice")
        .clone();
    assert_eq!(taken_back["amount_micros"], -1_000_000);
    assert_eq!(taken_back["quantity_seconds"], -1800);
    assert_eq!(taken_back["reason"], "the instance was unreachable");
    assert_eq!(taken_back["author"], json!(operator.user_id));
    // The period is taken while the draft lives.
    server
        .post(
            &create,
            &operator.token,
            json!({ "period_start": start, "period_end": now }),
        )
        .await
        .expect_problem(StatusCode::CONFLICT, "invoice_period_taken");

    let adjusted = server
        .post(
            &format!("/api/v1/admin/invoices/{id}/adjustments"),
            &operator.token,
            json!({ "amount_micros": -1_500_000, "reason": "goodwill for the slow start" }),
        )
        .await;
    adjusted.expect(StatusCode::OK);
    assert_eq!(adjusted.body["credits_micros"], -1_500_000);
    assert_eq!(adjusted.body["total_micros"], subtotal - 1_500_000);
    let last = adjusted.body["lines"]
        .as_array()
        .expect("lines")
        .last()
        .cloned()
        .expect("a line");
    assert_eq!(last["kind"], "adjustment");
    assert_eq!(last["reason"], "goodwill for the slow start");
    assert_eq!(last["author"], json!(operator.user_id));

    // Usage may still arrive until the deadline has passed.
    let finalize = format!("/api/v1/admin/invoices/{id}/finalize");
    server
        .post(&finalize, &operator.token, json!({}))
        .await
        .expect_problem(StatusCode::CONFLICT, "usage_not_final");
    advance(&server, TimeDelta::seconds(HEARTBEAT_DEADLINE + 3600));
    let finalized = server.post(&finalize, &operator.token, json!({})).await;
    finalized.expect(StatusCode::OK);
    assert_eq!(finalized.body["total_micros"], subtotal - 1_500_000);

    // Frozen: no adjustment, no re-rating, not even after a price change.
    for (path, body) in [
        (
            format!("/api/v1/admin/invoices/{id}/adjustments"),
            json!({ "amount_micros": 5, "reason": "late" }),
        ),
        (format!("/api/v1/admin/invoices/{id}/rate"), json!({})),
        (finalize.clone(), json!({})),
    ] {
        server
            .post(&path, &operator.token, body)
            .await
            .expect_problem(StatusCode::CONFLICT, "invoice_state");
    }
    server
        .post(
            &correct,
            &operator.token,
            json!({ "seconds": 1, "reason": "after the invoice" }),
        )
        .await
        .expect_problem(StatusCode::CONFLICT, "already_invoiced");
    let tenant_view = format!("/api/v1/orgs/{}/invoices/{id}", tenant.org_id);
    let seen = server.get(&tenant_view, &tenant.token).await;
    assert_eq!(seen.body["total_micros"], subtotal - 1_500_000);

    // CSV and a printable page, for the tenant only.
    let csv = server
        .http
        .get(server.url(&format!("{tenant_view}?format=csv")))
        .bearer_auth(&tenant.token)
        .send()
        .await
        .expect("csv");
    assert_eq!(csv.status(), StatusCode::OK);
    let text = csv.text().await.expect("csv text");
    assert!(text.starts_with("position,kind,description"), "{text}");
    assert!(text.contains("goodwill for the slow start"));
    let total = gantry_pricing::book::micros_text(subtotal - 1_500_000);
    assert!(
        text.trim_end()
            .ends_with(&format!(",total,,,,,,,,,{total},")),
        "{text}"
    );
    let page = server
        .http
        .get(server.url(&format!("{tenant_view}/print")))
        .bearer_auth(&tenant.token)
        .send()
        .await
        .expect("print");
    assert_eq!(page.status(), StatusCode::OK);
    assert!(
        page.headers()["content-type"]
            .to_str()
            .is_ok_and(|t| t.starts_with("text/html"))
    );
    let html = page.text().await.expect("html");
    assert!(html.contains("tenant org") && html.contains(&total));

    // Another organization sees none of it; a viewer cannot read invoices.
    server
        .get(&tenant_view, &other.token)
        .await
        .expect_problem(StatusCode::NOT_FOUND, "organization_not_found");
    server
        .get(
            &format!("/api/v1/orgs/{}/invoices/{id}", other.org_id),
            &other.token,
        )
        .await
        .expect_problem(StatusCode::NOT_FOUND, "invoice_not_found");
    let viewer = server.member_of(&tenant, "viewer", "viewer").await;
    server
        .get(&tenant_view, &viewer.token)
        .await
        .expect_problem(StatusCode::FORBIDDEN, "forbidden");
    let billing = server.member_of(&tenant, "billing", "billing").await;
    server
        .get(&tenant_view, &billing.token)
        .await
        .expect(StatusCode::OK);
    // The billing role reads invoices but cannot order.
    server
        .post(
            &format!("/api/v1/orgs/{}/orders", tenant.org_id),
            &billing.token,
            json!({ "instance_type": "h100x1" }),
        )
        .await
        .expect_problem(StatusCode::FORBIDDEN, "forbidden");

    // Paid, then never voided; a void draft frees its period.
    let pay = format!("/api/v1/admin/invoices/{id}/pay");
    server
        .post(&pay, &operator.token, json!({}))
        .await
        .expect(StatusCode::OK);
    server
        .post(
            &format!("/api/v1/admin/invoices/{id}/void"),
            &operator.token,
            json!({}),
        )
        .await
        .expect_problem(StatusCode::CONFLICT, "invoice_state");
    let later = server.state.clock.now();
    let second = server
        .post(
            &create,
            &operator.token,
            json!({ "period_start": now, "period_end": later }),
        )
        .await;
    second.expect(StatusCode::CREATED);
    let second_id = second.str("/id");
    server
        .post(
            &format!("/api/v1/admin/invoices/{second_id}/void"),
            &operator.token,
            json!({}),
        )
        .await
        .expect(StatusCode::OK);
    server
        .post(
            &create,
            &operator.token,
            json!({ "period_start": now, "period_end": later }),
        )
        .await
        .expect(StatusCode::CREATED);

    // Bad input: a backwards period, a zero adjustment, a tenant at the
    // operator routes, unknown invoices.
    server
        .post(
            &create,
            &operator.token,
            json!({ "period_start": now, "period_end": start }),
        )
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    server
        .post(
            &create,
            &tenant.token,
            json!({ "period_start": start, "period_end": now }),
        )
        .await
        .expect_problem(StatusCode::FORBIDDEN, "forbidden");
    let unknown = Uuid::now_v7();
    server
        .post(
            &format!("/api/v1/admin/invoices/{unknown}/adjustments"),
            &operator.token,
            json!({ "amount_micros": 0, "reason": "" }),
        )
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    server
        .post(
            &format!("/api/v1/admin/invoices/{unknown}/pay"),
            &operator.token,
            json!({}),
        )
        .await
        .expect_problem(StatusCode::NOT_FOUND, "invoice_not_found");
}

async fn a_spent_hard_capped_budget_admits_only_production(engine: Engine) {
    let server = TestServer::start_with(engine, |config| {
        config.metering_interval_seconds = 60;
        config.agent_heartbeat_deadline_seconds = 60;
    })
    .await;
    let operator = server.operator().await;
    server.cluster(&operator, 2).await;
    let tenant = server.signup("tenant").await;
    let terms = format!("/api/v1/admin/orgs/{}/billing", tenant.org_id);
    server
        .put(
            &terms,
            &operator.token,
            json!({ "discount_permille": 0, "hard_cap": true }),
        )
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    server
        .put(
            &terms,
            &operator.token,
            json!({ "discount_permille": 0, "monthly_budget_micros": 3_000_000, "hard_cap": true }),
        )
        .await
        .expect(StatusCode::OK);

    // Two hours of one GPU at 2.00/h spend 4.00 of a 3.00 budget.
    let month = first_of_next_month(server.state.clock.now());
    advance(
        &server,
        month - server.state.clock.now() + TimeDelta::hours(1),
    );
    let order = server
        .order(&tenant, json!({ "instance_type": "h100x1" }))
        .await;
    server.wait_status(&tenant, order, "running").await;
    advance(&server, TimeDelta::hours(2));
    let billing = format!("/api/v1/orgs/{}/billing", tenant.org_id);
    let mut status = Value::Null;
    for _ in 0..400 {
        status = server.get(&billing, &tenant.token).await.body.clone();
        if status["alerted_percent"] == 100 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(status["alerted_percent"], 100, "{status:#}");
    let spend = status["month_spend_micros"].as_i64().expect("spend");
    assert!((3_900_000..=4_000_000).contains(&spend), "{status:#}");
    let audit = server
        .get(
            &format!("/api/v1/orgs/{}/audit-log", tenant.org_id),
            &tenant.token,
        )
        .await;
    let alerts: Vec<&Value> = audit
        .items()
        .iter()
        .filter(|e| e["action"] == "budget.alert")
        .collect();
    assert_eq!(
        alerts.len(),
        1,
        "one alert, at the highest threshold crossed"
    );

    // New work is refused but production; what runs keeps running.
    server
        .post(
            &format!("/api/v1/orgs/{}/orders", tenant.org_id),
            &tenant.token,
            json!({ "instance_type": "h100x1" }),
        )
        .await
        .expect_problem(StatusCode::PAYMENT_REQUIRED, "budget_exhausted");
    server
        .order(
            &tenant,
            json!({ "instance_type": "h100x1", "priority_class": "production" }),
        )
        .await;
    let still = server
        .get(
            &format!("/api/v1/orgs/{}/orders/{order}", tenant.org_id),
            &tenant.token,
        )
        .await;
    assert_eq!(still.body["status"], "running");
}

async fn a_prepaid_balance_draws_down_and_stops_work_when_it_runs_out(engine: Engine) {
    let server = TestServer::start_with(engine, |config| {
        config.metering_interval_seconds = 60;
        config.agent_heartbeat_deadline_seconds = 60;
        config.prepaid_grace_seconds = 1800;
    })
    .await;
    let operator = server.operator().await;
    server.cluster(&operator, 2).await;
    let tenant = server.signup("tenant").await;
    let top_ups = format!("/api/v1/admin/orgs/{}/balance/top-ups", tenant.org_id);
    server
        .post(
            &top_ups,
            &operator.token,
            json!({ "amount_micros": 1_000_000, "reason": "welcome" }),
        )
        .await
        .expect_problem(StatusCode::CONFLICT, "not_prepaid");
    server
        .put(
            &format!("/api/v1/admin/orgs/{}/billing", tenant.org_id),
            &operator.token,
            json!({ "discount_permille": 0, "prepaid": true }),
        )
        .await
        .expect(StatusCode::OK);
    let topped = server
        .post(
            &top_ups,
            &operator.token,
            json!({ "amount_micros": 3_000_000, "reason": "first card payment" }),
        )
        .await;
    topped.expect(StatusCode::CREATED);
    assert_eq!(topped.body["balance_micros"], 3_000_000);

    // One GPU at 2.00/h runs dry after an hour and a half.
    let order = server
        .order(&tenant, json!({ "instance_type": "h100x1" }))
        .await;
    server.wait_status(&tenant, order, "running").await;
    advance(&server, TimeDelta::hours(2));
    let path = format!("/api/v1/orgs/{}/balance", tenant.org_id);
    let mut balance = Value::Null;
    for _ in 0..400 {
        balance = server.get(&path, &tenant.token).await.body.clone();
        if balance["exhausted_at"].is_string() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(balance["exhausted_at"].is_string(), "{balance:#}");
    let left = balance["balance_micros"].as_i64().expect("balance");
    assert!((-1_000_000..=-900_000).contains(&left), "{balance:#}");
    assert!(
        balance["entries"]
            .as_array()
            .expect("entries")
            .iter()
            .any(|e| e["kind"] == "usage")
    );
    server
        .post(
            &format!("/api/v1/orgs/{}/orders", tenant.org_id),
            &tenant.token,
            json!({ "instance_type": "h100x1", "priority_class": "production" }),
        )
        .await
        .expect_problem(StatusCode::PAYMENT_REQUIRED, "balance_exhausted");
    // Still running within the warning period; stopped after it.
    let order_path = format!("/api/v1/orgs/{}/orders/{order}", tenant.org_id);
    assert_eq!(
        server.get(&order_path, &tenant.token).await.body["status"],
        "running"
    );
    advance(&server, TimeDelta::minutes(31));
    let stopped = server.wait_status(&tenant, order, "cancelled").await;
    assert!(
        stopped["failure_reason"]
            .as_str()
            .is_some_and(|r| r.contains("prepaid balance ran out")),
        "{stopped:#}"
    );

    // An invoice nets what the balance already paid for its period's usage.
    let drawn: i64 = server.get(&path, &tenant.token).await.body["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter(|e| e["kind"] == "usage")
        .map(|e| -e["amount_micros"].as_i64().expect("amount"))
        .sum();
    let now = server.state.clock.now();
    let draft = server
        .post(
            &format!("/api/v1/admin/orgs/{}/invoices", tenant.org_id),
            &operator.token,
            json!({ "period_start": now - TimeDelta::days(1), "period_end": now }),
        )
        .await;
    draft.expect(StatusCode::CREATED);
    let paid = draft.body["lines"]
        .as_array()
        .expect("lines")
        .iter()
        .find(|l| l["kind"] == "prepaid")
        .expect("a prepaid line")["amount_micros"]
        .clone();
    assert_eq!(paid, -drawn);
    let subtotal = draft.body["subtotal_micros"].as_i64().expect("subtotal");
    assert_eq!(draft.body["total_micros"], subtotal - drawn);
    assert!(subtotal >= drawn, "usage not yet drawn is still owed");

    // A top-up above zero admits orders again.
    let topped = server
        .post(
            &top_ups,
            &operator.token,
            json!({ "amount_micros": 10_000_000, "reason": "wire transfer" }),
        )
        .await;
    topped.expect(StatusCode::CREATED);
    assert!(topped.body["exhausted_at"].is_null());
    server
        .order(&tenant, json!({ "instance_type": "h100x1" }))
        .await;
}

/// Top-ups, adjustments and corrections: a reason is required, and a sum
/// that would pass what the ledger may hold is refused with a 4xx problem
/// (it once overflowed into a 500), writing nothing.
async fn money_paths_refuse_empty_reasons_and_sums_past_their_limits(engine: Engine) {
    use gantry_billing::invoices::ADJUSTMENTS_MAX;
    use gantry_billing::prepaid::BALANCE_MAX;
    use gantry_entities::balance_entry;
    use gantry_types::classes::BalanceKind;
    use sea_orm::sea_query::Expr;
    use sea_orm::{ActiveModelTrait, ConnectionTrait, Set};

    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    let tenant = server.signup("tenant").await;
    server
        .put(
            &format!("/api/v1/admin/orgs/{}/billing", tenant.org_id),
            &operator.token,
            json!({ "discount_permille": 0, "prepaid": true }),
        )
        .await
        .expect(StatusCode::OK);
    let top_ups = format!("/api/v1/admin/orgs/{}/balance/top-ups", tenant.org_id);
    let entries = "SELECT COUNT(*) FROM balance_entries";
    for reason in ["", "   "] {
        server
            .post(
                &top_ups,
                &operator.token,
                json!({ "amount_micros": 1, "reason": reason }),
            )
            .await
            .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    }
    server
        .post(
            &format!("/api/v1/admin/usage-records/{}/corrections", Uuid::new_v4()),
            &operator.token,
            json!({ "seconds": 1, "reason": "" }),
        )
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    assert_eq!(server.count(entries).await, 0);

    // A balance just below the most it may hold.
    let biggest_top_up = 1_000_000_000_000_000_i64;
    let large = Uuid::now_v7();
    balance_entry::ActiveModel {
        id: Set(large),
        org_id: Set(tenant.org_id),
        kind: Set(BalanceKind::TopUp),
        amount_micros: Set(BALANCE_MAX - biggest_top_up + 1),
        period_start: Set(None),
        period_end: Set(None),
        reason: Set(Some("years of top-ups".into())),
        author: Set(None),
        created_at: Set(Utc::now()),
    }
    .insert(server.db())
    .await
    .expect("a large balance");
    let top_up = |amount: i64| {
        server.post(
            &top_ups,
            &operator.token,
            json!({ "amount_micros": amount, "reason": "card payment" }),
        )
    };
    top_up(biggest_top_up)
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "balance_limit");
    assert_eq!(server.count(entries).await, 1, "nothing written");
    let topped = top_up(biggest_top_up - 1).await;
    topped.expect(StatusCode::CREATED);
    assert_eq!(topped.body["balance_micros"], BALANCE_MAX);
    // Even where the sum itself would not fit in 64 bits.
    balance_entry::Entity::update_many()
        .col_expr(
            balance_entry::Column::AmountMicros,
            Expr::value(i64::MAX - 2 * biggest_top_up + 2),
        )
        .filter(balance_entry::Column::Id.eq(large))
        .exec(server.db())
        .await
        .expect("a balance near the 64-bit limit");
    top_up(biggest_top_up)
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "balance_limit");

    // A draft's adjustments.
    let now = server.state.clock.now();
    let draft = server
        .post(
            &format!("/api/v1/admin/orgs/{}/invoices", tenant.org_id),
            &operator.token,
            json!({ "period_start": now - TimeDelta::days(1), "period_end": now }),
        )
        .await;
    draft.expect(StatusCode::CREATED);
    let adjustments = format!("/api/v1/admin/invoices/{}/adjustments", draft.str("/id"));
    let adjust = |amount: i64, reason: &str| {
        server.post(
            &adjustments,
            &operator.token,
            json!({ "amount_micros": amount, "reason": reason }),
        )
    };
    adjust(5, "")
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    adjust(biggest_top_up, "a large contract")
        .await
        .expect(StatusCode::OK);
    server
        .db()
        .execute_unprepared(&format!(
            "UPDATE invoice_lines SET amount_micros = {ADJUSTMENTS_MAX} WHERE kind = 'adjustment'"
        ))
        .await
        .expect("adjustments at their limit");
    let lines = "SELECT COUNT(*) FROM invoice_lines";
    let before = server.count(lines).await;
    adjust(1, "one more")
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "adjustment_limit");
    assert_eq!(server.count(lines).await, before, "nothing written");
    let credited = adjust(-1, "a credit brings it back").await;
    credited.expect(StatusCode::OK);
    assert_eq!(credited.body["credits_micros"], ADJUSTMENTS_MAX - 1);
}
