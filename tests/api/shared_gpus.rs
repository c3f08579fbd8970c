//! Shared GPUs end to end: instance types that sell a fraction of a GPU or
//! one MIG instance, packed by the engine onto shared GPUs (fractions
//! never beyond one GPU, MIG only on GPUs in MIG mode), shown on the
//! capacity map with their tenants, and metered and invoiced by their
//! share; bad shapes are refused and change nothing.

use std::collections::{BTreeMap, BTreeSet};

use chrono::TimeDelta;
use reqwest::StatusCode;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::{Engine, Tenant, TestServer};

crate::on_both_engines!(
    fractions_and_mig_instances_are_placed_metered_and_invoiced_by_their_share,
    bad_shared_gpu_shapes_are_refused_and_change_nothing,
);

/// A quarter H100 at a quarter of 2.00 per GPU-hour.
const QUARTER_HOURLY: i64 = 500_000;
/// A 1g.10gb instance at one seventh of 2.00, rounded.
const SLICE_HOURLY: i64 = 285_714;

/// The H100 in MIG-capable form, a quarter-GPU type and a 1g.10gb type,
/// with their prices; and a MIG node `m1` of seven 1g.10gb instances per
/// GPU beside the cluster's whole-GPU nodes.
async fn shared_catalog(server: &TestServer, operator: &Tenant) {
    let token = &operator.token;
    let models = server.get("/api/v1/catalog/gpu-models", token).await;
    let h100 = models.items()[0]["id"].as_str().expect("id").to_owned();
    server
        .patch(
            &format!("/api/v1/admin/catalog/gpu-models/{h100}"),
            token,
            json!({ "mig_capable": true }),
        )
        .await
        .expect(StatusCode::OK);
    for (body, hourly) in [
        (
            json!({ "name": "h100-quarter", "gpu_model": "H100", "gpus_per_node": 1, "vcpus": 3, "memory_gib": 32, "gpu_milli": 250 }),
            QUARTER_HOURLY,
        ),
        (
            json!({ "name": "h100-1g", "gpu_model": "H100", "gpus_per_node": 1, "vcpus": 1, "memory_gib": 16, "mig_profile": "1g.10gb" }),
            SLICE_HOURLY,
        ),
    ] {
        let created = server
            .post("/api/v1/admin/catalog/instance-types", token, body)
            .await;
        created.expect(StatusCode::CREATED);
        server
            .post(
                &format!(
                    "/api/v1/admin/catalog/instance-types/{}/prices",
                    created.id("/id")
                ),
                token,
                json!({ "pricing_class": "on_demand", "hourly_micros": hourly }),
            )
            .await
            .expect(StatusCode::CREATED);
    }
    server
        .post(
            "/api/v1/admin/nodes",
            token,
            json!({ "name": "m1", "region": "r1", "instance_type": "h100x8",
                    "mig": { "profile": "1g.10gb", "instances": 7 } }),
        )
        .await
        .expect(StatusCode::CREATED);
}

/// Half up, as the platform rounds money: `seconds` at `hourly`.
fn priced(seconds: i64, hourly: i64) -> i64 {
    let numerator = i128::from(seconds) * i128::from(hourly);
    i64::try_from((2 * numerator + 3_600) / 7_200).expect("an amount")
}

/// Instance-seconds metered for these orders.
async fn seconds_of(server: &TestServer, orders: &[Uuid]) -> i64 {
    use gantry_entities::usage_record;
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
    usage_record::Entity::find()
        .filter(usage_record::Column::OrderId.is_in(orders.iter().copied()))
        .all(server.db())
        .await
        .expect("usage records")
        .iter()
        .map(|r| r.seconds - r.excluded_seconds)
        .sum()
}

async fn fractions_and_mig_instances_are_placed_metered_and_invoiced_by_their_share(
    engine: Engine,
) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 1).await;
    shared_catalog(&server, &operator).await;
    let tenant = server.signup("sharer").await;
    let mut quarters = Vec::new();
    for _ in 0..5 {
        quarters.push(
            server
                .order(&tenant, json!({ "instance_type": "h100-quarter" }))
                .await,
        );
    }
    let mut slices = Vec::new();
    for _ in 0..8 {
        slices.push(
            server
                .order(&tenant, json!({ "instance_type": "h100-1g" }))
                .await,
        );
    }
    let start = server.state.clock.now();

    // Fractions pack onto one GPU of the whole-GPU node until it is full.
    let mut per_gpu: BTreeMap<u64, usize> = BTreeMap::new();
    for order in &quarters {
        let view = server.wait_status(&tenant, *order, "running").await;
        assert_eq!(view["placement"][0]["node_name"], "n1");
        assert_eq!(view["gpu_milli"], 250);
        assert!(view["placement"][0]["mig_device"].is_null());
        let gpus = view["placement"][0]["gpu_ids"]
            .as_array()
            .expect("gpus")
            .clone();
        assert_eq!(gpus.len(), 1, "a fraction holds one GPU");
        *per_gpu.entry(gpus[0].as_u64().expect("index")).or_default() += 1;
    }
    let mut counts: Vec<usize> = per_gpu.values().copied().collect();
    counts.sort_unstable();
    assert_eq!(counts, [1, 4], "four quarters fill one GPU, never more");

    // MIG instances go to the MIG node only, one instance each.
    let mut devices = BTreeSet::new();
    for order in &slices {
        let view = server.wait_status(&tenant, *order, "running").await;
        assert_eq!(view["placement"][0]["node_name"], "m1");
        assert_eq!(view["mig_profile"], "1g.10gb");
        let device = view["placement"][0]["mig_device"]
            .as_str()
            .expect("a MIG instance");
        assert!(device.starts_with("MIG-"));
        devices.insert(device.to_owned());
    }
    assert_eq!(devices.len(), 8, "no instance is held twice");

    // The capacity map shows shared GPUs with their tenants.
    let nodes = server
        .get("/api/v1/admin/nodes?region=r1", &operator.token)
        .await;
    let node = |name: &str| -> Value {
        nodes
            .items()
            .iter()
            .find(|n| n["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("node {name}"))
    };
    let n1 = node("n1");
    let full = n1["gpus"]
        .as_array()
        .expect("gpus")
        .iter()
        .find(|g| g["shares"].as_array().is_some_and(|s| s.len() == 4))
        .expect("a GPU shared four ways");
    assert!(full["order_id"].is_null(), "nobody holds it whole");
    for share in full["shares"].as_array().expect("shares") {
        assert_eq!(share["units"], 250);
        assert_eq!(share["org_id"], tenant.org_id.to_string());
    }
    let m1 = node("m1");
    let held: usize = m1["gpus"]
        .as_array()
        .expect("gpus")
        .iter()
        .map(|g| {
            assert_eq!(g["mig_enabled"], true);
            assert_eq!(g["mig_devices"].as_array().map(Vec::len), Some(7));
            g["shares"].as_array().map_or(0, Vec::len)
        })
        .sum();
    assert_eq!(held, 8);

    // Whole GPUs never come from MIG GPUs or from shared ones: eight whole
    // GPUs do not exist while the quarters hold two of n1's.
    let whole = server
        .order(&tenant, json!({ "instance_type": "h100x8" }))
        .await;
    server.state.scheduler.wake();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let waiting = server
        .get(
            &format!("/api/v1/orgs/{}/orders/{whole}", tenant.org_id),
            &tenant.token,
        )
        .await;
    assert_eq!(waiting.body["status"], "queued");
    server.cancel(&tenant, whole).await;

    // An hour later: metered and invoiced by the share.
    server.state.clock.advance(TimeDelta::hours(1));
    for order in quarters.iter().chain(&slices) {
        server.cancel(&tenant, *order).await;
    }
    server.metered_exactly().await;
    let quarter_seconds = seconds_of(&server, &quarters).await;
    let slice_seconds = seconds_of(&server, &slices).await;
    assert!(quarter_seconds >= 5 * 3_600, "{quarter_seconds}");
    let draft = server
        .post(
            &format!("/api/v1/admin/orgs/{}/invoices", tenant.org_id),
            &operator.token,
            json!({ "period_start": start - TimeDelta::hours(1), "period_end": start + TimeDelta::hours(3) }),
        )
        .await;
    draft.expect(StatusCode::CREATED);
    let lines = draft.body["lines"].as_array().expect("lines");
    let line = |name: &str| {
        lines
            .iter()
            .find(|l| {
                l["description"]
                    .as_str()
                    .is_some_and(|d| d.starts_with(name))
            })
            .unwrap_or_else(|| panic!("a line for {name}: {lines:#?}"))
            .clone()
    };
    let quarter = line("h100-quarter");
    assert_eq!(quarter["quantity_seconds"], quarter_seconds);
    assert_eq!(quarter["gpu_seconds"], quarter_seconds * 250 / 1000);
    assert_eq!(
        quarter["amount_micros"],
        priced(quarter_seconds, QUARTER_HOURLY)
    );
    let slice = line("h100-1g");
    assert_eq!(slice["quantity_seconds"], slice_seconds);
    assert_eq!(slice["gpu_seconds"], slice_seconds * 142 / 1000);
    assert_eq!(slice["amount_micros"], priced(slice_seconds, SLICE_HOURLY));
    // Usage reports the same share-weighted GPU-seconds.
    let usage = server
        .get(
            &format!(
                "/api/v1/orgs/{}/usage?from={}&to={}",
                tenant.org_id,
                crate::support::query_time(start - TimeDelta::hours(1)),
                crate::support::query_time(start + TimeDelta::hours(3)),
            ),
            &tenant.token,
        )
        .await;
    usage.expect(StatusCode::OK);
    assert_eq!(
        usage.body["totals"]["gpu_seconds"],
        (quarter_seconds * 250 + slice_seconds * 142) / 1000
    );
}

async fn bad_shared_gpu_shapes_are_refused_and_change_nothing(engine: Engine) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 1).await;
    shared_catalog(&server, &operator).await;
    server
        .post(
            "/api/v1/admin/catalog/gpu-models",
            &operator.token,
            json!({ "name": "L40S", "vendor": "NVIDIA", "memory_gib": 48, "interconnect": "pcie" }),
        )
        .await
        .expect(StatusCode::CREATED);
    let tenant = server.signup("shaper").await;
    let before = server.table_counts().await;
    let kind = |name: &str, extra: Value| {
        let mut body = json!({ "name": name, "gpu_model": "H100", "gpus_per_node": 1, "vcpus": 1, "memory_gib": 1 });
        for (k, v) in extra.as_object().expect("fields") {
            body[k] = v.clone();
        }
        body
    };
    let refused_types = [
        kind("h100-third", json!({ "gpu_milli": 333 })),
        kind("h100-nothing", json!({ "gpu_milli": 0 })),
        kind("h100-whole", json!({ "gpu_milli": 1000 })),
        kind(
            "h100-two-halves",
            json!({ "gpu_milli": 500, "gpus_per_node": 2 }),
        ),
        kind(
            "h100-both",
            json!({ "gpu_milli": 500, "mig_profile": "1g.10gb" }),
        ),
        kind("h100-2g99", json!({ "mig_profile": "2g.99gb" })),
        kind("h100-h200-profile", json!({ "mig_profile": "1g.18gb" })),
        kind(
            "h100-mig-x2",
            json!({ "mig_profile": "3g.40gb", "gpus_per_node": 2 }),
        ),
        kind(
            "l40s-mig",
            json!({ "gpu_model": "L40S", "mig_profile": "1g.10gb" }),
        ),
    ];
    for body in refused_types {
        let reply = server
            .post(
                "/api/v1/admin/catalog/instance-types",
                &operator.token,
                body.clone(),
            )
            .await;
        reply.expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
        assert!(
            reply.body.to_string().contains("gpu_milli")
                || reply.body.to_string().contains("mig_profile")
                || reply.body.to_string().contains("gpus_per_node"),
            "{body}: the field is named: {}",
            reply.body
        );
    }
    let wrong_type = server
        .post(
            "/api/v1/admin/catalog/instance-types",
            &operator.token,
            kind("h100-text", json!({ "gpu_milli": "half" })),
        )
        .await;
    wrong_type.expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "invalid_body");
    for mig in [
        json!({ "profile": "3g.40gb", "instances": 3 }),
        json!({ "profile": "1g.5gb", "instances": 1 }),
        json!({ "profile": "1g.10gb", "instances": 0 }),
    ] {
        let reply = server
            .post(
                "/api/v1/admin/nodes",
                &operator.token,
                json!({ "name": "bad-mig", "region": "r1", "instance_type": "h100x8", "mig": mig }),
            )
            .await;
        reply.expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    }
    let gang = server
        .post(
            &format!("/api/v1/orgs/{}/orders", tenant.org_id),
            &tenant.token,
            json!({ "instance_type": "h100-quarter", "node_count": 2 }),
        )
        .await;
    gang.expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "shared_gpu_gang");
    let start = crate::reservations::hour_after(server.state.clock.now(), 2);
    let reserved = server
        .post(
            &format!("/api/v1/orgs/{}/reservations", tenant.org_id),
            &tenant.token,
            json!({ "instance_type": "h100-1g", "count": 1, "region": "r1",
                    "starts_at": start, "ends_at": start + TimeDelta::hours(1) }),
        )
        .await;
    reserved.expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "shared_gpu_reservation");
    assert_eq!(server.table_counts().await, before, "nothing changed");
}
