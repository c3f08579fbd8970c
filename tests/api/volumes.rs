//! Volumes over the API with nodes the test plays: a local volume goes to
//! the node with the most room and is refused past it, orders that attach
//! it run on that node only (and wait, saying so, while it is busy or
//! cordoned), another organization finds none of it, and a volume in use is
//! not deleted.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::{Engine, TestServer};

crate::on_both_engines!(local_volumes_pin_their_orders_to_their_node);

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

async fn local_volumes_pin_their_orders_to_their_node(engine: Engine) {
    let server = TestServer::start(engine).await;
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
        seen["pending_details"][0]["kind"], "cpu_or_memory",
        "{seen:#}"
    );
    assert_eq!(
        seen["pending_details"][0]["nodes_with_free_gpus"], 1,
        "only its volume's node counts: {seen:#}"
    );
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
        json!([{ "volume_id": id, "org_id": alice.org_id, "size_gib": 20, "action": "erase" }])
    );
    heartbeat(&server, &roomy, 50, json!([])).await;
    server
        .get(&format!("{volumes}/{id}"), &alice.token)
        .await
        .expect_problem(StatusCode::NOT_FOUND, "volume_not_found");
}
