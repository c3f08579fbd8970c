//! Volumes over the API with nodes the test plays: a local volume goes to
//! the node with the most room and is refused past it, orders that attach
//! it run on that node only (and wait, saying so, while it is busy),
//! another organization finds none of it, a volume in use is not deleted;
//! operators declare a region's shared file system, whose volumes one node
//! tends and each organization's files carry ids of their own;
//! and storage is invoiced to the micro-unit across a month boundary, a
//! grow and a price change, on the server's own monthly invoices.

use chrono::{DateTime, Datelike, TimeDelta, TimeZone, Utc};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::{Engine, Tenant, TestServer};

crate::on_both_engines!(
    local_volumes_pin_their_orders_to_their_node,
    shared_file_systems_are_declared_by_operators_and_tended_by_one_node,
    storage_is_billed_to_the_micro_across_a_month_and_a_grow
);

const GIB: i64 = 1024 * 1024 * 1024;

async fn heartbeat(server: &TestServer, credential: &str, free_gib: i64, volumes: Value) {
    server
        .post(
            "/api/v1/agent/heartbeat",
            credential,
            json!({ "gpus": [], "volume_free_bytes": free_gib * GIB, "volumes": volumes }),
        )
        .await
        .expect(StatusCode::OK);
}

const METRICS_TOKEN: &str = "volumes-scrape-token";

async fn local_volumes_pin_their_orders_to_their_node(engine: Engine) {
    let server = TestServer::start_with(engine, |config| {
        config.metrics_token = Some(METRICS_TOKEN.into());
    })
    .await;
    let operator = server.operator().await;
    server.cluster(&operator, 0).await;
    let small = server.join_agent(&operator, "r1", "small", 8).await;
    let roomy = server.join_agent(&operator, "r1", "roomy", 8).await;
    let alice = server.signup("alice").await;
    let volumes = format!("/api/v1/orgs/{}/volumes", alice.org_id);

    // No node has said how much room it has: nowhere to put a volume.
    server
        .post(
            &volumes,
            &alice.token,
            json!({ "name": "data", "region": "r1", "size_gib": 20 }),
        )
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "no_volume_nodes");
    heartbeat(&server, &small, 10, json!([])).await;
    heartbeat(&server, &roomy, 50, json!([])).await;

    let created = server
        .post(
            &volumes,
            &alice.token,
            json!({ "name": "data", "region": "r1", "size_gib": 20 }),
        )
        .await;
    created.expect(StatusCode::CREATED);
    assert_eq!(created.body["node"], "roomy", "the node with the most room");
    assert_eq!(created.body["status"], "creating");
    assert_eq!(created.body["kind"], "local");
    let id = created.id("/id");
    // 20 GiB of roomy's 50 are promised: 40 more fit nowhere.
    let refused = server
        .post(
            &volumes,
            &alice.token,
            json!({ "name": "more", "region": "r1", "size_gib": 40 }),
        )
        .await;
    refused.expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    assert_eq!(refused.body["errors"][0]["field"], "size_gib");
    assert!(
        refused.body["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("roomy"),
        "{}",
        refused.body
    );
    server
        .post(
            &volumes,
            &alice.token,
            json!({ "name": "data", "region": "r1", "size_gib": 1 }),
        )
        .await
        .expect_problem(StatusCode::CONFLICT, "volume_name_taken");
    server
        .post(
            &volumes,
            &alice.token,
            json!({ "name": "team", "region": "r1", "size_gib": 1, "kind": "shared" }),
        )
        .await
        .expect_problem(
            StatusCode::UNPROCESSABLE_ENTITY,
            "shared_storage_not_configured",
        );
    let listed = server.get(&volumes, &alice.token).await;
    assert_eq!(listed.items().len(), 1, "refusals made nothing");

    // A storage quota: what is held counts, new volumes and grows past it
    // are refused with the limit in the answer.
    server
        .put(
            &format!("/api/v1/admin/orgs/{}/storage-quotas", alice.org_id),
            &operator.token,
            json!({ "region": "r1", "kind": "local", "max_gib": 25 }),
        )
        .await
        .expect(StatusCode::OK);
    let over = server
        .post(
            &volumes,
            &alice.token,
            json!({ "name": "more", "region": "r1", "size_gib": 10 }),
        )
        .await;
    over.expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "storage_quota_exceeded");
    let detail = over.body["detail"].as_str().unwrap_or_default().to_owned();
    assert!(
        detail.contains("25 GiB") && detail.contains("holds 20 GiB"),
        "{detail}"
    );
    server
        .patch(
            &format!("{volumes}/{id}"),
            &alice.token,
            json!({ "size_gib": 26 }),
        )
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "storage_quota_exceeded");
    let quotas = server
        .get(
            &format!("/api/v1/orgs/{}/storage-quotas", alice.org_id),
            &alice.token,
        )
        .await;
    assert_eq!(
        quotas.body,
        json!([{ "region": "r1", "kind": "local", "max_gib": 25, "used_gib": 20 }])
    );
    let listed = server.get(&volumes, &alice.token).await;
    assert_eq!(listed.items().len(), 1, "refusals made nothing");
    assert_eq!(listed.items()[0]["size_gib"], 20, "nor grew anything");

    // The node made it.
    heartbeat(
        &server,
        &roomy,
        30,
        json!([{ "volume_id": id, "size_gib": 20, "used_bytes": 65536 }]),
    )
    .await;
    let made = server.get(&format!("{volumes}/{id}"), &alice.token).await;
    assert_eq!(made.body["status"], "available");
    // Operators see it on its node, with the node's room, and in /metrics.
    let nodes = server.get("/api/v1/admin/nodes", &operator.token).await;
    let node = nodes
        .items()
        .iter()
        .find(|n| n["name"] == "roomy")
        .cloned()
        .expect("roomy");
    assert_eq!(node["storage"]["provisioned_gib"], 20, "{node}");
    assert_eq!(node["storage"]["used_bytes"], 65536);
    assert_eq!(node["storage"]["free_bytes"], 30 * GIB);
    assert_eq!(node["storage"]["local_volumes"][0]["name"], "data");
    let mut scraped = String::new();
    for _ in 0..100 {
        scraped = server
            .http
            .get(server.url("/metrics"))
            .bearer_auth(METRICS_TOKEN)
            .send()
            .await
            .expect("scrape")
            .text()
            .await
            .expect("text");
        if scraped.contains("gantry_node_volume_free_bytes{region=\"r1\",node=\"roomy\"}") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(
        scraped.contains("# TYPE gantry_volume_provisioned_gib gauge")
            && scraped.contains("gantry_node_volume_free_bytes{region=\"r1\",node=\"roomy\"}"),
        "{scraped}"
    );
    assert_eq!(made.body["provisioned_gib"], 20);
    assert_eq!(made.body["used_bytes"], 65536);

    // Orders attaching it run on its node, in its region, whatever else is
    // free.
    let attach = json!([{ "volume_id": id, "mount_path": "/data" }]);
    let mut placed = Vec::new();
    for _ in 0..2 {
        let order = server
            .order(
                &alice,
                json!({ "instance_type": "h100x1", "volumes": attach }),
            )
            .await;
        let seen = server
            .wait_order(&alice, order, "placed", |o| {
                o["placement"][0]["node_name"].is_string()
            })
            .await;
        assert_eq!(seen["placement"][0]["node_name"], "roomy", "{seen:#}");
        assert_eq!(seen["region"], "r1");
        assert_eq!(
            seen["volumes"],
            json!([{ "volume_id": id, "mount_path": "/data", "read_only": false }])
        );
        placed.push(order);
    }
    // Roomy's memory is taken: a third waits for it, though small is idle,
    // and says so.
    let waiting = server
        .order(
            &alice,
            json!({ "instance_type": "h100x1", "volumes": attach }),
        )
        .await;
    let seen = server
        .wait_order(&alice, waiting, "told why it waits", |o| {
            o["status"] == "queued"
                && o["pending_details"]
                    .as_array()
                    .is_some_and(|d| !d.is_empty())
        })
        .await;
    assert_eq!(
        seen["pending_details"][0],
        json!({ "kind": "pinned_by_volume", "volume": "data", "node": "roomy", "node_state": "ready" }),
        "first, that its volume holds it to its node: {seen:#}"
    );
    assert_eq!(
        seen["pending_details"][1]["kind"], "cpu_or_memory",
        "{seen:#}"
    );
    assert_eq!(
        seen["pending_details"][1]["nodes_with_free_gpus"], 1,
        "only its volume's node counts: {seen:#}"
    );
    // Its node cordoned, the order says so.
    let roomy_id = server
        .get("/api/v1/admin/nodes", &operator.token)
        .await
        .items()
        .iter()
        .find(|n| n["name"] == "roomy")
        .and_then(|n| n["id"].as_str())
        .expect("roomy")
        .to_owned();
    for action in ["cordon", "uncordon"] {
        server
            .post(
                &format!("/api/v1/admin/nodes/{roomy_id}/{action}"),
                &operator.token,
                json!({}),
            )
            .await
            .expect(StatusCode::OK);
        let state = if action == "cordon" {
            "cordoned"
        } else {
            "ready"
        };
        server
            .wait_order(&alice, waiting, "told of its node", |o| {
                o["pending_details"][0]["node_state"] == state
            })
            .await;
    }
    // A size its volume's node can never host is refused at once.
    let never = server
        .post(
            &format!("/api/v1/orgs/{}/orders", alice.org_id),
            &alice.token,
            json!({ "instance_type": "h100x4", "volumes": attach }),
        )
        .await;
    never.expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "never_fits");
    assert!(
        never.body["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("where its volume data lives"),
        "{}",
        never.body
    );

    let used = server.get(&format!("{volumes}/{id}"), &alice.token).await;
    assert_eq!(used.body["status"], "attached");
    assert_eq!(used.body["orders"].as_array().map(Vec::len), Some(3));
    server
        .delete(&format!("{volumes}/{id}"), &alice.token)
        .await
        .expect_problem(StatusCode::CONFLICT, "volume_attached");

    // Another organization: none of it, whichever way it asks.
    let bob = server.signup("bob").await;
    server
        .post(
            &format!("/api/v1/orgs/{}/orders", bob.org_id),
            &bob.token,
            json!({ "instance_type": "h100x1", "volumes": attach }),
        )
        .await
        .expect_problem(StatusCode::NOT_FOUND, "volume_not_found");
    server
        .get(
            &format!("/api/v1/orgs/{}/volumes/{id}", bob.org_id),
            &bob.token,
        )
        .await
        .expect_problem(StatusCode::NOT_FOUND, "volume_not_found");
    let bobs = server
        .get(&format!("/api/v1/orgs/{}/volumes", bob.org_id), &bob.token)
        .await;
    assert!(bobs.items().is_empty());

    // Its orders gone, it is deleted: erased by its node, then gone.
    for order in placed.iter().chain([&waiting]) {
        server
            .post(
                &format!("/api/v1/orgs/{}/orders/{order}/cancel", alice.org_id),
                &alice.token,
                json!({}),
            )
            .await
            .expect(StatusCode::OK);
    }
    let deleted = server
        .delete(&format!("{volumes}/{id}"), &alice.token)
        .await;
    deleted.expect(StatusCode::ACCEPTED);
    assert_eq!(deleted.body["status"], "deleting");
    let assignments = server.get("/api/v1/agent/assignments", &roomy).await;
    assert_eq!(
        assignments.body["volumes"],
        json!([{ "volume_id": id, "org_id": alice.org_id, "size_gib": 20, "action": "erase", "shared": null }])
    );
    heartbeat(&server, &roomy, 50, json!([])).await;
    server
        .get(&format!("{volumes}/{id}"), &alice.token)
        .await
        .expect_problem(StatusCode::NOT_FOUND, "volume_not_found");
}

async fn shared_file_systems_are_declared_by_operators_and_tended_by_one_node(engine: Engine) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 0).await;
    let tender = server.join_agent(&operator, "r1", "first", 8).await;
    let other = server.join_agent(&operator, "r1", "second", 8).await;
    let alice = server.signup("alice").await;
    let bob = server.signup("bob").await;
    let declare = "/api/v1/admin/shared-file-systems";
    let declaration = |path: &str, first_id: i64| json!({ "region": "r1", "kind": "glusterfs", "mount_path": path, "first_id": first_id });

    // Operators only; every field checked, nothing written on a refusal.
    server
        .put(
            declare,
            &alice.token,
            declaration("/mnt/shared", 3_000_000_000),
        )
        .await
        .expect(StatusCode::FORBIDDEN);
    for (body, field) in [
        (declaration("mnt/shared", 3_000_000_000), "mount_path"),
        (declaration("/mnt/../etc", 3_000_000_000), "mount_path"),
        (declaration("/", 3_000_000_000), "mount_path"),
        (declaration("/mnt/shared", 1000), "first_id"),
        (declaration("/mnt/shared", 4_294_967_295), "first_id"),
    ] {
        let refused = server.put(declare, &operator.token, body).await;
        refused.expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
        assert_eq!(
            refused.body["errors"][0]["field"], field,
            "{}",
            refused.body
        );
    }
    server
        .put(
            declare,
            &operator.token,
            json!({ "region": "nowhere", "kind": "nfs", "mount_path": "/mnt/shared" }),
        )
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "unknown_region");
    assert_eq!(server.get(declare, &operator.token).await.body, json!([]));

    let declared = server
        .put(
            declare,
            &operator.token,
            declaration("/mnt/shared", 3_000_000_000),
        )
        .await;
    declared.expect(StatusCode::OK);
    assert_eq!(declared.body["region"], "r1");
    assert_eq!(
        declared.body["ranges_left"],
        (4_294_967_296_i64 - 3_000_000_000) / 65_536
    );

    let create = |tenant: &Tenant, name: &str| {
        let path = format!("/api/v1/orgs/{}/volumes", tenant.org_id);
        let body = json!({ "name": name, "region": "r1", "kind": "shared", "size_gib": 1 });
        let server = &server;
        let token = tenant.token.clone();
        async move { server.post(&path, &token, body).await }
    };
    let created = create(&alice, "team").await;
    created.expect(StatusCode::CREATED);
    assert_eq!(created.body["status"], "creating");
    assert!(created.body["node"].is_null(), "{}", created.body);
    let alice_volume = created.id("/id");
    let created = create(&bob, "bobs").await;
    created.expect(StatusCode::CREATED);
    let bob_volume = created.id("/id");

    // The first node tends both; each organization has its own ids.
    let told = server.get("/api/v1/agent/assignments", &tender).await;
    told.expect(StatusCode::OK);
    let place = |id: uuid::Uuid| {
        told.body["volumes"]
            .as_array()
            .expect("volumes")
            .iter()
            .find(|v| v["volume_id"] == id.to_string())
            .map(|v| v["shared"].clone())
            .expect("the volume is listed")
    };
    let (alice_place, bob_place) = (place(alice_volume), place(bob_volume));
    assert_eq!(
        alice_place["path"],
        format!("/mnt/shared/gantry-volumes/{alice_volume}")
    );
    let owners = [&alice_place, &bob_place].map(|p| p["owner_id"].as_i64().expect("owner"));
    assert_eq!((owners[0] - owners[1]).abs(), 65_536, "{owners:?}");
    assert!(
        owners
            .iter()
            .all(|o| (3_000_000_000..3_000_131_072).contains(o))
    );
    let untold = server.get("/api/v1/agent/assignments", &other).await;
    assert_eq!(
        untold.body["volumes"],
        json!([]),
        "only one node tends them"
    );

    // Any node of the region says how much room the file system has left.
    let free = |bytes: i64| json!({ "gpus": [], "shared_free_bytes": bytes });
    let refused = server
        .post("/api/v1/agent/heartbeat", &other, free(-1))
        .await;
    refused.expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    assert_eq!(refused.body["errors"][0]["field"], "shared_free_bytes");
    server
        .post("/api/v1/agent/heartbeat", &other, free(700 * GIB))
        .await
        .expect(StatusCode::OK);
    assert_eq!(
        server.get(declare, &operator.token).await.body[0]["free_bytes"],
        700 * GIB
    );

    // Measured past its size: the tenant is told, and orders cannot
    // attach it.
    server
        .post(
            "/api/v1/agent/heartbeat",
            &tender,
            json!({ "gpus": [], "volumes": [
                { "volume_id": alice_volume, "size_gib": 1, "used_bytes": 2 * GIB }
            ] }),
        )
        .await
        .expect(StatusCode::OK);
    let seen = server
        .get(
            &format!("/api/v1/orgs/{}/volumes/{alice_volume}", alice.org_id),
            &alice.token,
        )
        .await;
    assert_eq!(seen.body["status"], "available");
    assert!(
        seen.body["status_reason"]
            .as_str()
            .is_some_and(|r| r.contains("more than its 1 GiB")),
        "{}",
        seen.body
    );
    server
        .post(
            &format!("/api/v1/orgs/{}/orders", alice.org_id),
            &alice.token,
            json!({ "instance_type": "h100x1", "job": { "command": "true" },
                    "volumes": [{ "volume_id": alice_volume, "mount_path": "/team" }] }),
        )
        .await
        .expect_problem(StatusCode::CONFLICT, "volume_over_size");

    // The ids cannot move under the files; the mount path can.
    server
        .put(
            declare,
            &operator.token,
            declaration("/mnt/shared", 3_500_000_000),
        )
        .await
        .expect_problem(StatusCode::CONFLICT, "shared_ids_in_use");
    server
        .put(
            declare,
            &operator.token,
            declaration("/srv/gluster", 3_000_000_000),
        )
        .await
        .expect(StatusCode::OK);

    // Deleted volumes are gone only once the tending node says it erased
    // them; the file system stays declared while any lives on it.
    for (tenant, id) in [(&alice, alice_volume), (&bob, bob_volume)] {
        server
            .delete(
                &format!("/api/v1/orgs/{}/volumes/{id}", tenant.org_id),
                &tenant.token,
            )
            .await
            .expect(StatusCode::ACCEPTED);
    }
    server
        .delete(&format!("{declare}/r1"), &operator.token)
        .await
        .expect_problem(StatusCode::CONFLICT, "shared_volumes_exist");
    heartbeat(&server, &other, 0, json!([])).await;
    assert_eq!(
        server
            .get(
                &format!("/api/v1/orgs/{}/volumes/{bob_volume}", bob.org_id),
                &bob.token,
            )
            .await
            .body["status"],
        "deleting",
        "a node that says nothing of it erased nothing"
    );
    server
        .post(
            "/api/v1/agent/heartbeat",
            &tender,
            json!({ "gpus": [], "volumes": [
                { "volume_id": alice_volume, "size_gib": 0, "used_bytes": 0, "erased": true },
                { "volume_id": bob_volume, "size_gib": 0, "used_bytes": 0, "erased": true }
            ] }),
        )
        .await
        .expect(StatusCode::OK);
    server
        .get(
            &format!("/api/v1/orgs/{}/volumes/{bob_volume}", bob.org_id),
            &bob.token,
        )
        .await
        .expect_problem(StatusCode::NOT_FOUND, "volume_not_found");
    server
        .delete(&format!("{declare}/r1"), &operator.token)
        .await
        .expect(StatusCode::NO_CONTENT);
    assert_eq!(server.get(declare, &operator.token).await.body, json!([]));
    server
        .delete(&format!("{declare}/r1"), &operator.token)
        .await
        .expect_problem(StatusCode::NOT_FOUND, "shared_file_system_not_found");
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

fn at(value: &Value) -> DateTime<Utc> {
    value
        .as_str()
        .and_then(|text| DateTime::parse_from_rfc3339(text).ok())
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_else(|| panic!("a time, not {value}"))
}

fn advance_to(server: &TestServer, at: DateTime<Utc>) {
    server.state.clock.advance(at - server.state.clock.now());
    server.state.scheduler.wake();
}

/// GiB-seconds at a price per GiB-month of 730 hours, half up.
fn priced(gib_seconds: i64, gib_month_micros: i64) -> i64 {
    let month = 730 * 3600;
    (i128::from(gib_seconds) * i128::from(gib_month_micros) + month / 2)
        .div_euclid(month)
        .try_into()
        .expect("an amount")
}

async fn invoice_of(server: &TestServer, tenant: &Tenant, start: DateTime<Utc>) -> Value {
    let path = format!("/api/v1/orgs/{}/invoices", tenant.org_id);
    for _ in 0..400 {
        let list = server.get(&path, &tenant.token).await;
        if let Some(found) = list
            .items()
            .iter()
            .find(|i| i["period_start"] == json!(start) && i["status"] == "finalized")
        {
            let id = found["id"].as_str().expect("id");
            return server
                .get(&format!("{path}/{id}"), &tenant.token)
                .await
                .body;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("no finalized invoice from {start}");
}

/// Storage held in a month is final a heartbeat deadline after it ends,
/// and the leader invoices it then.
const HEARTBEAT_DEADLINE_DAYS: i64 = 2;

async fn storage_is_billed_to_the_micro_across_a_month_and_a_grow(engine: Engine) {
    let server = TestServer::start_with(engine, |config| {
        config.agent_heartbeat_deadline_seconds =
            u64::try_from(HEARTBEAT_DEADLINE_DAYS * 86_400).expect("seconds");
    })
    .await;
    let operator = server.operator().await;
    server.cluster(&operator, 0).await;
    let node = server.join_agent(&operator, "r1", "n1", 8).await;
    let tenant = server.signup("archive").await;
    let month = first_of_next_month(server.state.clock.now());
    let change = month + TimeDelta::days(5) + TimeDelta::seconds(17);
    for body in [
        json!({ "kind": "local", "gib_month_micros": 100_000 }),
        json!({ "kind": "local", "region": "r1", "gib_month_micros": 123_457, "effective_from": change }),
        json!({ "kind": "shared", "gib_month_micros": 1 }),
    ] {
        server
            .post(
                "/api/v1/admin/catalog/storage-prices",
                &operator.token,
                body,
            )
            .await
            .expect(StatusCode::CREATED);
    }
    let prices = server
        .get("/api/v1/catalog/storage-prices", &tenant.token)
        .await;
    assert_eq!(prices.body.as_array().map(Vec::len), Some(3));

    // Made two days before the month ends, grown on its fourth day, deleted
    // on its tenth.
    advance_to(
        &server,
        month - TimeDelta::days(2) + TimeDelta::seconds(777),
    );
    let volumes = format!("/api/v1/orgs/{}/volumes", tenant.org_id);
    // The jump of the clock may have the leader find the node silent just
    // as it says it is back: it says so again until the volume is made.
    let mut created = None;
    for _ in 0..100 {
        heartbeat(&server, &node, 100, json!([])).await;
        let reply = server
            .post(
                &volumes,
                &tenant.token,
                json!({ "name": "archive", "region": "r1", "size_gib": 10 }),
            )
            .await;
        if reply.status == StatusCode::CREATED {
            created = Some((reply.id("/id"), at(&reply.body["created_at"])));
            break;
        }
        reply.expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "no_volume_nodes");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // Billed from the moment the server made it, which the clock's own
    // advance puts a moment after the jump.
    let (id, made) = created.expect("the volume was made");
    advance_to(&server, month + TimeDelta::days(3) + TimeDelta::seconds(55));
    let grow = server
        .patch(
            &format!("{volumes}/{id}"),
            &tenant.token,
            json!({ "size_gib": 25 }),
        )
        .await;
    grow.expect(StatusCode::OK);
    let grown = at(&grow.body["updated_at"]);
    advance_to(&server, month + TimeDelta::days(9) + TimeDelta::seconds(1));
    let delete = server
        .delete(&format!("{volumes}/{id}"), &tenant.token)
        .await;
    delete.expect(StatusCode::ACCEPTED);
    let deleted = at(&delete.body["updated_at"]);

    let storage = |invoice: &Value| -> Vec<(i64, i64, String)> {
        invoice["lines"]
            .as_array()
            .expect("lines")
            .iter()
            .filter(|l| l["kind"] == "storage")
            .map(|l| {
                assert_eq!(l["volume_id"], json!(id), "{l}");
                assert_eq!(l["region"], "r1", "{l}");
                (
                    l["quantity_seconds"].as_i64().expect("GiB-seconds"),
                    l["amount_micros"].as_i64().expect("amount"),
                    l["description"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    };

    // The month it was made in: ten GiB to the month's end.
    let previous = if month.month() == 1 {
        Utc.with_ymd_and_hms(month.year() - 1, 12, 1, 0, 0, 0)
    } else {
        Utc.with_ymd_and_hms(month.year(), month.month() - 1, 1, 0, 0, 0)
    }
    .single()
    .expect("a month start");
    let first = invoice_of(&server, &tenant, previous).await;
    let held = 10 * (month - made).num_seconds();
    let lines = storage(&first);
    assert_eq!(lines.len(), 1, "{first:#}");
    assert_eq!((lines[0].0, lines[0].1), (held, priced(held, 100_000)));
    assert!(lines[0].2.contains("GiB-month"), "{}", lines[0].2);
    assert_eq!(first["subtotal_micros"], priced(held, 100_000));
    assert_eq!(first["total_micros"], priced(held, 100_000));

    // The month it was grown and deleted in: ten GiB, then twenty-five, at
    // the price for every region until the region's own took over.
    let next = first_of_next_month(month);
    advance_to(&server, next + TimeDelta::days(HEARTBEAT_DEADLINE_DAYS + 1));
    let second = invoice_of(&server, &tenant, month).await;
    let at_first = 10 * (grown - month).num_seconds() + 25 * (change - grown).num_seconds();
    let at_change = 25 * (deleted - change).num_seconds();
    let lines = storage(&second);
    let figures: Vec<(i64, i64)> = lines.iter().map(|l| (l.0, l.1)).collect();
    assert_eq!(
        figures,
        vec![
            (at_first, priced(at_first, 100_000)),
            (at_change, priced(at_change, 123_457)),
        ],
        "{second:#}"
    );
    assert_eq!(
        second["subtotal_micros"],
        priced(at_first, 100_000) + priced(at_change, 123_457)
    );

    // The usage report counts the same GiB-seconds, cut at midnights when
    // grouped by day; grouped by order, in the totals only.
    let usage_path = |group_by: &str, format: &str| {
        format!(
            "/api/v1/orgs/{}/usage?from={}&to={}&group_by={group_by}&format={format}",
            tenant.org_id,
            month.format("%Y-%m-%dT%H:%M:%SZ"),
            next.format("%Y-%m-%dT%H:%M:%SZ"),
        )
    };
    let usage = |group_by: &str, format: &str| {
        let path = usage_path(group_by, format);
        let server = &server;
        let token = tenant.token.clone();
        async move { server.get(&path, &token).await }
    };
    // GiB-seconds rounded down once, where the invoice rounds each line.
    let held_in_month = (10 * (grown - month).num_milliseconds()
        + 25 * (deleted - grown).num_milliseconds())
        / 1000;
    let by_day = usage("day", "json").await;
    by_day.expect(StatusCode::OK);
    assert_eq!(by_day.body["totals"]["storage_gib_seconds"], held_in_month);
    let grow_day = month + TimeDelta::days(3);
    let day = by_day.body["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .find(|g| g["key"] == grow_day.format("%Y-%m-%d").to_string())
        .cloned()
        .expect("the day of the grow");
    assert_eq!(
        day["storage_gib_seconds"],
        (10 * (grown - grow_day).num_milliseconds()
            + 25 * (grow_day + TimeDelta::days(1) - grown).num_milliseconds())
            / 1000
    );
    let by_order = usage("order", "json").await;
    assert_eq!(by_order.body["groups"], json!([]));
    assert_eq!(
        by_order.body["totals"]["storage_gib_seconds"],
        held_in_month
    );
    let text = server
        .http
        .get(server.url(&usage_path("region", "csv")))
        .bearer_auth(&tenant.token)
        .send()
        .await
        .expect("csv")
        .text()
        .await
        .expect("csv text");
    assert!(
        text.lines()
            .next()
            .is_some_and(|h| h.ends_with(",storage_gib_seconds")),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.starts_with("region,")
            && l.contains(",r1,")
            && l.ends_with(&format!(",{held_in_month}"))),
        "{text}"
    );
}
