//! A way into instances and the agent protocol's walls: users' SSH keys,
//! the image catalog, what orders may ask of access, and node credentials
//! that cannot take over another node or report for work not started.

use reqwest::StatusCode;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::{Engine, Tenant, TestServer};

crate::on_both_engines!(
    ssh_keys_are_their_users_own_and_bad_keys_are_refused,
    orders_choose_keys_ports_and_images_or_are_refused_whole,
    images_are_kept_by_operators,
    node_credentials_cannot_take_over_nodes_and_are_rotated_and_revoked,
    agents_report_only_what_makes_sense_for_their_own_work,
    a_round_of_reports_is_taken_in_one_call_each_on_its_own,
    waiting_for_assignments_answers_only_its_own_node_and_refuses_bad_calls,
);

const ED25519: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJH2WhWEoOAhfBoL8U4rbKy6NcTA9RoOQDpaTBx8feAh user@example.com";
const ED25519_FINGERPRINT: &str = "SHA256:XtWlQK7JAgtqVn4W3A0IUea3IytM8gc1Hwvs7Mr5wkY";
const ECDSA: &str = "ecdsa-sha2-nistp256 AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBGZfyULDHYNb2iztCchaQ93zyxmIqqxcEridKfJmbGxmruQmmRydUw9F6P/2dJdZ3zmHbIPkx6iylIk6BAuXx1M=";
const RSA_1024: &str = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQCwRd7mPccKVuPoIAO3yV3BD4nTi5w6ZqrPLlFheEkMa+I1HhiecX3EDWdOmyjc8SMRnCMUKgtJ2M5CHdxah7UVpkNv8Ayg/qagsVi8zBBvU1i8TGGfxpSVNolwAkb7t22KoCPUoQBhl4jeYSuObNEYhaCWriRDE0aZ5f7NYBxiSw==";

async fn add_key(server: &TestServer, user: &Tenant, key: &str) -> Uuid {
    let reply = server
        .post(
            "/api/v1/me/ssh-keys",
            &user.token,
            json!({ "name": "laptop", "public_key": key }),
        )
        .await;
    reply.expect(StatusCode::CREATED);
    reply.id("/id")
}

async fn order_count(server: &TestServer, tenant: &Tenant) -> usize {
    server
        .get(
            &format!("/api/v1/orgs/{}/orders", tenant.org_id),
            &tenant.token,
        )
        .await
        .items()
        .len()
}

fn fields(reply: &crate::support::Reply) -> Vec<String> {
    reply.body["errors"]
        .as_array()
        .map(|errors| {
            errors
                .iter()
                .filter_map(|e| e["field"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

async fn ssh_keys_are_their_users_own_and_bad_keys_are_refused(engine: Engine) {
    let server = TestServer::start(engine).await;
    let alice = server.signup("alice").await;
    let bob = server.signup("bob").await;
    let created = server
        .post(
            "/api/v1/me/ssh-keys",
            &alice.token,
            json!({ "name": "laptop", "public_key": ED25519 }),
        )
        .await;
    created.expect(StatusCode::CREATED);
    assert_eq!(created.body["fingerprint"], ED25519_FINGERPRINT);
    assert_eq!(created.body["algorithm"], "ssh-ed25519");
    assert!(!created.str("/public_key").contains("user@example.com"));
    let key = created.id("/id");
    add_key(&server, &alice, ECDSA).await;
    server
        .post(
            "/api/v1/me/ssh-keys",
            &alice.token,
            json!({ "name": "again", "public_key": ED25519 }),
        )
        .await
        .expect_problem(StatusCode::CONFLICT, "ssh_key_exists");

    for bad in [
        "ssh-ed25519 AAAA",
        "not a key at all",
        &ED25519[..50],
        RSA_1024,
    ] {
        let refused = server
            .post(
                "/api/v1/me/ssh-keys",
                &alice.token,
                json!({ "name": "bad", "public_key": bad }),
            )
            .await;
        refused.expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
        assert_eq!(fields(&refused), ["public_key"], "{bad}");
    }
    let weak = server
        .post(
            "/api/v1/me/ssh-keys",
            &alice.token,
            json!({ "name": "old", "public_key": RSA_1024 }),
        )
        .await;
    assert!(
        weak.body["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("1024 bits")
    );
    server
        .post(
            "/api/v1/me/ssh-keys",
            &alice.token,
            json!({ "name": 7, "public_key": ED25519 }),
        )
        .await
        .expect(StatusCode::UNPROCESSABLE_ENTITY);

    // Each user sees and deletes only their own keys.
    let listed = server.get("/api/v1/me/ssh-keys", &alice.token).await;
    assert_eq!(listed.body.as_array().map(Vec::len), Some(2));
    let theirs = server.get("/api/v1/me/ssh-keys", &bob.token).await;
    assert_eq!(theirs.body.as_array().map(Vec::len), Some(0));
    server
        .delete(&format!("/api/v1/me/ssh-keys/{key}"), &bob.token)
        .await
        .expect_problem(StatusCode::NOT_FOUND, "ssh_key_not_found");
    server
        .delete("/api/v1/me/ssh-keys/not-a-uuid", &alice.token)
        .await
        .expect(StatusCode::NOT_FOUND);
    let (_, api_key) = server.api_key(&alice, "admin").await;
    server
        .get("/api/v1/me/ssh-keys", &api_key)
        .await
        .expect(StatusCode::FORBIDDEN);
    server
        .delete(&format!("/api/v1/me/ssh-keys/{key}"), &alice.token)
        .await
        .expect(StatusCode::NO_CONTENT);
    let listed = server.get("/api/v1/me/ssh-keys", &alice.token).await;
    assert_eq!(listed.body.as_array().map(Vec::len), Some(1));
}

async fn orders_choose_keys_ports_and_images_or_are_refused_whole(engine: Engine) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 1).await;
    let tenant = server.signup("tenant").await;
    let other = server.signup("other").await;
    let own = add_key(&server, &tenant, ED25519).await;
    let foreign = add_key(&server, &other, ECDSA).await;
    let path = format!("/api/v1/orgs/{}/orders", tenant.org_id);

    // By default an instance admits all of its user's keys.
    let order = server
        .order(
            &tenant,
            json!({ "instance_type": "h100x1", "ports": [8888] }),
        )
        .await;
    let view = server
        .get(&format!("{path}/{order}"), &tenant.token)
        .await
        .body
        .clone();
    assert_eq!(view["ssh_key_ids"], json!([own]));
    assert_eq!(view["ports"], json!([8888]));
    assert_eq!(view["image"], Value::Null);

    let before = order_count(&server, &tenant).await;
    let cases = [
        (
            json!({ "instance_type": "h100x1", "ssh_key_ids": [foreign] }),
            "ssh_key_ids[0]",
        ),
        (
            json!({ "instance_type": "h100x1", "ssh_key_ids": [own, Uuid::now_v7()] }),
            "ssh_key_ids[1]",
        ),
        (
            json!({ "instance_type": "h100x1", "ports": [22] }),
            "ports[0]",
        ),
        (
            json!({ "instance_type": "h100x1", "ports": [8888, 8888] }),
            "ports[1]",
        ),
        (
            json!({ "instance_type": "h100x1", "ssh_key_ids": [own], "job": { "command": "true" } }),
            "ssh_key_ids",
        ),
    ];
    for (body, field) in cases {
        let refused = server.post(&path, &tenant.token, body.clone()).await;
        refused.expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
        assert_eq!(fields(&refused), [field], "{body}");
    }
    server
        .post(
            &path,
            &tenant.token,
            json!({ "instance_type": "h100x1", "image": "nope" }),
        )
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "unknown_image");
    for body in [
        json!({ "instance_type": "h100x1", "ports": "8888" }),
        json!({ "instance_type": "h100x1", "ports": [70000] }),
        json!({ "instance_type": "h100x1", "ssh_key_ids": ["not-a-uuid"] }),
    ] {
        let refused = server.post(&path, &tenant.token, body.clone()).await;
        assert!(
            refused.status.is_client_error(),
            "{body}: {}",
            refused.status
        );
    }
    assert_eq!(
        order_count(&server, &tenant).await,
        before,
        "nothing was ordered"
    );

    // An API key has no keys of its own: none unless it names a member's.
    let (_, api_key) = server.api_key(&tenant, "member").await;
    let keyless = server
        .post(&path, &api_key, json!({ "instance_type": "h100x1" }))
        .await;
    keyless.expect(StatusCode::CREATED);
    assert_eq!(keyless.body["ssh_key_ids"], json!([]));
    let named = server
        .post(
            &path,
            &api_key,
            json!({ "instance_type": "h100x1", "ssh_key_ids": [own] }),
        )
        .await;
    named.expect(StatusCode::CREATED);
    assert_eq!(named.body["ssh_key_ids"], json!([own]));
    server
        .post(
            &path,
            &api_key,
            json!({ "instance_type": "h100x1", "ssh_key_ids": [foreign] }),
        )
        .await
        .expect(StatusCode::UNPROCESSABLE_ENTITY);
}

async fn images_are_kept_by_operators(engine: Engine) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 1).await;
    let tenant = server.signup("tenant").await;
    let image = json!({ "name": "pytorch-24.05", "reference": "nvcr.io/nvidia/pytorch:24.05-py3", "description": "PyTorch", "is_default": true });
    server
        .post("/api/v1/admin/catalog/images", &tenant.token, image.clone())
        .await
        .expect(StatusCode::FORBIDDEN);
    let created = server
        .post(
            "/api/v1/admin/catalog/images",
            &operator.token,
            image.clone(),
        )
        .await;
    created.expect(StatusCode::CREATED);
    let id = created.id("/id");
    server
        .post("/api/v1/admin/catalog/images", &operator.token, image)
        .await
        .expect_problem(StatusCode::CONFLICT, "name_taken");
    server
        .post(
            "/api/v1/admin/catalog/images",
            &operator.token,
            json!({ "name": "bad", "reference": "has spaces in it" }),
        )
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    let second = server
        .post(
            "/api/v1/admin/catalog/images",
            &operator.token,
            json!({ "name": "cuda-12", "reference": "docker.io/nvidia/cuda:12.4.1-base-ubuntu22.04" }),
        )
        .await;
    second.expect(StatusCode::CREATED);
    let listed = server.get("/api/v1/catalog/images", &tenant.token).await;
    assert_eq!(listed.items().len(), 2);

    // The default fills in for orders that name none.
    let order = server
        .order(&tenant, json!({ "instance_type": "h100x1" }))
        .await;
    let path = format!("/api/v1/orgs/{}/orders", tenant.org_id);
    let view = server.get(&format!("{path}/{order}"), &tenant.token).await;
    assert_eq!(view.body["image"], "pytorch-24.05");
    let chosen = server
        .order(
            &tenant,
            json!({ "instance_type": "h100x1", "image": "cuda-12" }),
        )
        .await;
    let view = server.get(&format!("{path}/{chosen}"), &tenant.token).await;
    assert_eq!(view.body["image"], "cuda-12");

    // One default at a time; an image live orders use stays.
    server
        .patch(
            &format!("/api/v1/admin/catalog/images/{}", second.id("/id")),
            &operator.token,
            json!({ "is_default": true }),
        )
        .await
        .expect(StatusCode::OK);
    let listed = server.get("/api/v1/catalog/images", &tenant.token).await;
    let defaults: Vec<&Value> = listed
        .items()
        .iter()
        .filter(|i| i["is_default"] == true)
        .collect();
    assert_eq!(defaults.len(), 1);
    assert_eq!(defaults[0]["name"], "cuda-12");
    server
        .delete(
            &format!("/api/v1/admin/catalog/images/{id}"),
            &operator.token,
        )
        .await
        .expect_problem(StatusCode::CONFLICT, "in_use");
    server
        .delete(
            &format!("/api/v1/admin/catalog/images/{}", Uuid::now_v7()),
            &operator.token,
        )
        .await
        .expect_problem(StatusCode::NOT_FOUND, "image_not_found");
}

async fn join_token(server: &TestServer, operator: &Tenant, body: Value) -> String {
    let join = server
        .post("/api/v1/admin/join-tokens", &operator.token, body)
        .await;
    join.expect(StatusCode::CREATED);
    join.str("/token")
}

fn registration(name: &str, runtime: Option<&str>) -> Value {
    let mut body = json!({
        "name": name, "cpu_milli": 32000, "memory_mib": 262144,
        "gpus": [{ "index": 0, "model": "H100", "uuid": format!("GPU-{name}-0"),
                   "memory_mib": 81920, "nvlink_domain": 0, "mig_enabled": false }]
    });
    if let Some(runtime) = runtime {
        body["runtime"] = json!(runtime);
    }
    body
}

async fn heartbeat(server: &TestServer, credential: &str) -> crate::support::Reply {
    server
        .post("/api/v1/agent/heartbeat", credential, json!({ "gpus": [] }))
        .await
}

async fn node_credentials_cannot_take_over_nodes_and_are_rotated_and_revoked(engine: Engine) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 0).await;
    let token = join_token(&server, &operator, json!({ "region": "r2" })).await;
    let first = server
        .post(
            "/api/v1/agent/register",
            &token,
            registration("edge-1", None),
        )
        .await;
    first.expect(StatusCode::CREATED);
    let node_id = first.id("/node_id");
    let old = first.str("/credential");
    let node = server
        .get(&format!("/api/v1/admin/nodes/{node_id}"), &operator.token)
        .await;
    assert_eq!(node.body["runtime"], "process");
    assert_eq!(node.body["isolated"], false);

    // A region's token registers new nodes only: taking over a registered
    // one needs a token issued for it.
    server
        .post(
            "/api/v1/agent/register",
            &token,
            registration("edge-1", Some("sandbox")),
        )
        .await
        .expect_problem(StatusCode::CONFLICT, "node_registered");
    heartbeat(&server, &old).await.expect(StatusCode::OK);
    server
        .post(
            "/api/v1/admin/join-tokens",
            &operator.token,
            json!({ "region": "r1", "node": "edge-1" }),
        )
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "region_mismatch");
    let for_node = join_token(
        &server,
        &operator,
        json!({ "region": "r2", "node": "edge-1" }),
    )
    .await;
    server
        .post(
            "/api/v1/agent/register",
            &for_node,
            registration("edge-9", None),
        )
        .await
        .expect(StatusCode::FORBIDDEN);
    let again = server
        .post(
            "/api/v1/agent/register",
            &for_node,
            registration("edge-1", Some("sandbox")),
        )
        .await;
    again.expect(StatusCode::CREATED);
    heartbeat(&server, &old)
        .await
        .expect_problem(StatusCode::UNAUTHORIZED, "invalid_node_credential");
    server
        .post(
            "/api/v1/agent/register",
            &for_node,
            registration("edge-1", None),
        )
        .await
        .expect_problem(StatusCode::UNAUTHORIZED, "join_token_expired");
    let node = server
        .get(&format!("/api/v1/admin/nodes/{node_id}"), &operator.token)
        .await;
    assert_eq!(node.body["runtime"], "sandbox");
    assert_eq!(node.body["isolated"], true);

    // Rotation: asked for by the operator, told at the next heartbeat; the
    // old credential works until the new one is first used.
    let current = again.str("/credential");
    let ack = heartbeat(&server, &current).await;
    assert_eq!(ack.body["rotate_credential"], false);
    server
        .post(
            &format!("/api/v1/admin/nodes/{node_id}/credential/rotate"),
            &operator.token,
            json!({}),
        )
        .await
        .expect(StatusCode::ACCEPTED);
    assert_eq!(
        heartbeat(&server, &current).await.body["rotate_credential"],
        true
    );
    let rotated = server
        .post("/api/v1/agent/credential", &current, json!({}))
        .await;
    rotated.expect(StatusCode::CREATED);
    let next = rotated.str("/credential");
    heartbeat(&server, &current).await.expect(StatusCode::OK);
    let ack = heartbeat(&server, &next).await;
    ack.expect(StatusCode::OK);
    assert_eq!(ack.body["rotate_credential"], false);
    heartbeat(&server, &current)
        .await
        .expect(StatusCode::UNAUTHORIZED);

    // Revocation: refused at once.
    server
        .post(
            &format!("/api/v1/admin/nodes/{node_id}/credential/revoke"),
            &operator.token,
            json!({}),
        )
        .await
        .expect(StatusCode::NO_CONTENT);
    heartbeat(&server, &next)
        .await
        .expect(StatusCode::UNAUTHORIZED);
    server
        .post(
            &format!("/api/v1/admin/nodes/{}/credential/revoke", Uuid::now_v7()),
            &operator.token,
            json!({}),
        )
        .await
        .expect_problem(StatusCode::NOT_FOUND, "node_not_found");
}

/// Registers sandbox nodes `edge-1` and `edge-2` in `r2`; answers their
/// ids and credentials.
async fn two_edge_nodes(server: &TestServer, operator: &Tenant) -> Vec<(Uuid, String)> {
    let token = join_token(server, operator, json!({ "region": "r2" })).await;
    let mut nodes = Vec::new();
    for name in ["edge-1", "edge-2"] {
        let registered = server
            .post(
                "/api/v1/agent/register",
                &token,
                registration(name, Some("sandbox")),
            )
            .await;
        registered.expect(StatusCode::CREATED);
        nodes.push((registered.id("/node_id"), registered.str("/credential")));
    }
    nodes
}

/// An h100x1 order placed on one of the two edge nodes: its id and the
/// node's index (0 for edge-1, 1 for edge-2).
async fn placed_on_edge(server: &TestServer, tenant: &Tenant) -> (Uuid, usize) {
    let order = server
        .order(tenant, json!({ "instance_type": "h100x1", "region": "r2" }))
        .await;
    let placed = server
        .wait_order(tenant, order, "scheduled", |o| o["status"] == "scheduled")
        .await;
    (
        order,
        usize::from(placed["placement"][0]["node_name"] == "edge-2"),
    )
}

async fn agents_report_only_what_makes_sense_for_their_own_work(engine: Engine) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 0).await;
    let credentials: Vec<String> = two_edge_nodes(&server, &operator)
        .await
        .into_iter()
        .map(|(_, credential)| credential)
        .collect();
    let tenant = server.signup("tenant").await;
    let (order, ours) = placed_on_edge(&server, &tenant).await;
    let (mine, theirs) = (&credentials[ours], &credentials[1 - ours]);
    let report = |state: &str, code: Option<i32>| json!({ "order_id": order, "state": state, "exit_code": code });

    // Another node's agent knows nothing of the order.
    server
        .post("/api/v1/agent/status", theirs, report("exited", Some(0)))
        .await
        .expect_problem(StatusCode::NOT_FOUND, "order_not_found");
    // An exit for work the agent never fetched is not believed.
    server
        .post("/api/v1/agent/status", mine, report("exited", Some(0)))
        .await
        .expect_problem(StatusCode::CONFLICT, "not_started");
    let assigned = server.get("/api/v1/agent/assignments", mine).await;
    assigned.expect(StatusCode::OK);
    let assignment = &assigned.body["assignments"][0];
    assert_eq!(
        assignment["limits"],
        json!({ "cpu_milli": 12000, "memory_mib": 131072, "disk_gib": 0 })
    );
    assert_eq!(assignment["ssh_keys"], json!([]));

    let bad_host = json!({ "order_id": order, "state": "running",
                           "access": { "host": "a host; rm -rf", "ports": [] } });
    server
        .post("/api/v1/agent/status", mine, bad_host)
        .await
        .expect(StatusCode::UNPROCESSABLE_ENTITY);
    let running = json!({ "order_id": order, "state": "running", "access": {
        "runtime": "sandbox", "host": "gpu-a17.example",
        "ssh": { "user": "gantry", "port": 42017, "host_key_fingerprint": ED25519_FINGERPRINT },
        "ports": [{ "port": 8888, "node_port": 42018 }]
    } });
    server
        .post("/api/v1/agent/status", mine, running)
        .await
        .expect(StatusCode::OK);
    let view = server
        .get(
            &format!("/api/v1/orgs/{}/orders/{order}", tenant.org_id),
            &tenant.token,
        )
        .await;
    let host = &view.body["access"]["hosts"][0];
    assert_eq!(view.body["access"]["runtime"], "sandbox");
    assert_eq!(
        host["ssh"]["command"],
        "ssh -p 42017 gantry@gpu-a17.example"
    );
    assert_eq!(host["ssh"]["host_key_fingerprint"], ED25519_FINGERPRINT);
    assert_eq!(host["ports"], json!([{ "port": 8888, "node_port": 42018 }]));

    // One exit, then no other.
    server
        .post("/api/v1/agent/status", mine, report("exited", Some(0)))
        .await
        .expect(StatusCode::OK);
    server
        .post("/api/v1/agent/status", mine, report("exited", Some(1)))
        .await
        .expect_problem(StatusCode::NOT_FOUND, "order_not_found");
    let view = server
        .get(
            &format!("/api/v1/orgs/{}/orders/{order}", tenant.org_id),
            &tenant.token,
        )
        .await;
    assert_eq!(view.body["status"], "completed");
}

/// An agent sends a round's reports in one call: each is taken or refused
/// on its own, in order, and a refused one changes nothing.
async fn a_round_of_reports_is_taken_in_one_call_each_on_its_own(engine: Engine) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 0).await;
    let nodes = two_edge_nodes(&server, &operator).await;
    let tenant = server.signup("tenant").await;
    let (order, ours) = placed_on_edge(&server, &tenant).await;
    let (waiting, waiting_on) = placed_on_edge(&server, &tenant).await;
    let (mine, theirs) = (&nodes[ours].1, &nodes[1 - ours].1);
    server
        .get("/api/v1/agent/assignments", mine)
        .await
        .expect(StatusCode::OK);

    // The other node's agent cannot speak for the order, an unknown
    // credential nothing at all, and a malformed body is refused whole:
    // the order stays as it was.
    let its_end = json!({ "reports": [{ "order_id": order, "state": "exited", "exit_code": 0 }] });
    let stolen = server
        .post("/api/v1/agent/statuses", theirs, its_end.clone())
        .await;
    stolen.expect(StatusCode::OK);
    assert_eq!(
        stolen.body["results"][0]["problem"]["code"],
        "order_not_found"
    );
    server
        .post(
            "/api/v1/agent/statuses",
            "gn_not-a-node-credential",
            its_end,
        )
        .await
        .expect(StatusCode::UNAUTHORIZED);
    let json_type = Some("application/json");
    crate::bad_input::raw(
        &server,
        "/api/v1/agent/statuses",
        Some(mine),
        json_type,
        b"{\"reports\": [".to_vec(),
    )
    .await
    .expect_problem(StatusCode::BAD_REQUEST, "malformed_json");
    for body in [
        json!({ "reports": "all of them" }),
        json!({ "reports": [{ "order_id": order, "state": "exploded" }] }),
        json!({ "reports": [{ "order_id": order, "state": "exited", "exit_code": "zero" }] }),
        json!({ "reports": [{ "order_id": order, "state": "exited", "node_id": order }] }),
    ] {
        server
            .post("/api/v1/agent/statuses", mine, body)
            .await
            .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "invalid_body");
    }
    let view = server
        .get(
            &format!("/api/v1/orgs/{}/orders/{order}", tenant.org_id),
            &tenant.token,
        )
        .await;
    assert_eq!(view.body["status"], "provisioning");

    let stranger = Uuid::new_v4();
    let reports = json!({ "reports": [
        { "order_id": order, "state": "running", "access": { "host": "gpu-a17.example", "ports": [] } },
        { "order_id": stranger, "state": "exited", "exit_code": 0 },
        { "order_id": order, "state": "running", "access": { "host": "a host; rm -rf", "ports": [] } },
        { "order_id": order, "state": "exited", "exit_code": 0 },
        { "order_id": order, "state": "exited", "exit_code": 1 },
    ] });
    let taken = server.post("/api/v1/agent/statuses", mine, reports).await;
    taken.expect(StatusCode::OK);
    let results = taken.body["results"].as_array().expect("results");
    let seen: Vec<(Value, Value, Value)> = results
        .iter()
        .map(|r| {
            (
                r["order_id"].clone(),
                r["status"].clone(),
                r["problem"]["code"].clone(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            (json!(order), json!("running"), Value::Null),
            (json!(stranger), Value::Null, json!("order_not_found")),
            (json!(order), Value::Null, json!("validation_failed")),
            (json!(order), json!("completed"), Value::Null),
            (json!(order), Value::Null, json!("order_not_found")),
        ]
    );
    assert_eq!(
        results[2]["problem"]["errors"][0]["field"],
        "reports[2].access.host"
    );
    let view = server
        .get(
            &format!("/api/v1/orgs/{}/orders/{order}", tenant.org_id),
            &tenant.token,
        )
        .await;
    assert_eq!(view.body["status"], "completed");
    assert_eq!(view.body["access"], Value::Null);

    // The other order was never fetched: its ending is refused, and it
    // stays as it was.
    let refused = server
        .post(
            "/api/v1/agent/statuses",
            &nodes[waiting_on].1,
            json!({ "reports": [{ "order_id": waiting, "state": "exited", "exit_code": 0 }] }),
        )
        .await;
    refused.expect(StatusCode::OK);
    assert_eq!(refused.body["results"][0]["problem"]["code"], "not_started");
    let view = server
        .get(
            &format!("/api/v1/orgs/{}/orders/{waiting}", tenant.org_id),
            &tenant.token,
        )
        .await;
    assert_eq!(view.body["status"], "scheduled");

    for reports in [
        json!([]),
        json!(vec![
            json!({ "order_id": waiting, "state": "stopped" });
            257
        ]),
    ] {
        server
            .post(
                "/api/v1/agent/statuses",
                mine,
                json!({ "reports": reports }),
            )
            .await
            .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    }
    server
        .post(
            "/api/v1/agent/statuses",
            &tenant.token,
            json!({ "reports": [] }),
        )
        .await
        .expect(StatusCode::UNAUTHORIZED);
}

/// The long poll on `/agent/assignments` as strangers would use it: a
/// tenant's token, another node's or a revoked credential, and malformed
/// queries; and its own node hears of a cancel while it waits.
async fn waiting_for_assignments_answers_only_its_own_node_and_refuses_bad_calls(engine: Engine) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 0).await;
    let nodes = two_edge_nodes(&server, &operator).await;
    let tenant = server.signup("tenant").await;
    let (order, ours) = placed_on_edge(&server, &tenant).await;
    let (mine, theirs) = (&nodes[ours], &nodes[1 - ours]);
    let server = &server;
    let fetch = |credential: String, query: &str| {
        let path = format!("/api/v1/agent/assignments{query}");
        async move { server.get(&path, &credential).await }
    };

    // Another node waits on its own assignments and learns nothing of ours.
    let other = fetch(theirs.1.clone(), "?wait_ms=0").await;
    other.expect(StatusCode::OK);
    assert_eq!(other.body["assignments"], json!([]));
    // A tenant's session is no node credential.
    fetch(tenant.token.clone(), "?wait_ms=1000")
        .await
        .expect(StatusCode::UNAUTHORIZED);
    for (query, status, code) in [
        (
            "?wait_ms=20001",
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation_failed",
        ),
        ("?wait_ms=soon", StatusCode::BAD_REQUEST, "invalid_query"),
        ("?wait_ms=-1", StatusCode::BAD_REQUEST, "invalid_query"),
        ("?unknown=1", StatusCode::BAD_REQUEST, "invalid_query"),
    ] {
        fetch(mine.1.clone(), query)
            .await
            .expect_problem(status, code);
    }
    let long = format!("?wait_ms=10&since={}", "a".repeat(65));
    fetch(mine.1.clone(), &long)
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");

    // Our node waits on its version; the cancel wakes it with the stop.
    let first = fetch(mine.1.clone(), "").await;
    first.expect(StatusCode::OK);
    assert_eq!(first.body["assignments"][0]["order_id"], order.to_string());
    assert_eq!(first.body["assignments"][0]["action"], "run");
    let version = first.str("/version");
    let waiting = {
        let request = server
            .http
            .get(server.url(&format!(
                "/api/v1/agent/assignments?since={version}&wait_ms=15000"
            )))
            .bearer_auth(&mine.1)
            .send();
        tokio::spawn(request)
    };
    server.cancel(&tenant, order).await;
    let woken: Value = waiting
        .await
        .expect("task")
        .expect("response")
        .json()
        .await
        .expect("assignments");
    assert_ne!(woken["version"], version.as_str());
    assert_eq!(woken["assignments"][0]["action"], "stop");

    // A revoked credential, stolen or not, waits on nothing.
    server
        .post(
            &format!("/api/v1/admin/nodes/{}/credential/revoke", theirs.0),
            &operator.token,
            json!({}),
        )
        .await
        .expect(StatusCode::NO_CONTENT);
    fetch(theirs.1.clone(), "?wait_ms=1000")
        .await
        .expect(StatusCode::UNAUTHORIZED);
}
