//! Images tenants choose: references checked against the operators'
//! policy (malformed or not allowed: 422 naming the field, nothing
//! written), and registry credentials that are sealed at rest, never shown
//! again, walled off between organizations and handed to a node only with
//! an assignment of their own organization's order.

use reqwest::StatusCode;
use serde_json::json;

use crate::support::{Engine, TestServer};

crate::on_both_engines!(
    orders_name_catalog_images_or_references_the_policy_allows,
    the_image_policy_is_the_operators_and_checked,
    registry_credentials_are_sealed_walled_off_and_handed_to_their_own_orders_only,
);

async fn orders_name_catalog_images_or_references_the_policy_allows(engine: Engine) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 1).await;
    let tenant = server.signup("images").await;
    let orders = format!("/api/v1/orgs/{}/orders", tenant.org_id);
    let refused = |field: &'static str, says: &'static str| {
        move |reply: &crate::support::Reply| {
            reply.expect(StatusCode::UNPROCESSABLE_ENTITY);
            assert_eq!(reply.body["errors"][0]["field"], field, "{}", reply.body);
            let message = reply.body["errors"][0]["message"]
                .as_str()
                .unwrap_or_default();
            assert!(message.contains(says), "{message}");
        }
    };
    // No prefix allowed yet: only the catalog's images.
    let reply = server
        .post(
            &orders,
            &tenant.token,
            json!({ "instance_type": "h100x1", "image": "registry.example/team/train:v3" }),
        )
        .await;
    refused("image", "allows only its catalog's images")(&reply);
    server
        .put(
            "/api/v1/admin/catalog/image-policy",
            &operator.token,
            json!({ "allowed_prefixes": ["registry.example/team", "nvcr.io/nvidia/"] }),
        )
        .await
        .expect(StatusCode::OK);
    for (image, says) in [
        ("registry.example/Team/train", "not a repository name"),
        ("registry.example/team/train:-v3", "is not a tag"),
        ("registry.example/team/train@sha256:1234", "is not a digest"),
        ("registry.example:0/team/train", "no valid port"),
        ("library/train:v3", "is not a host"),
        ("registry.example/teamx/train:v3", "is not allowed"),
        ("nvcr.io/other/pytorch:24.05-py3", "is not allowed"),
    ] {
        let reply = server
            .post(
                &orders,
                &tenant.token,
                json!({ "instance_type": "h100x1", "image": image }),
            )
            .await;
        refused("image", says)(&reply);
    }
    let too_long = format!("registry.example/team/{}", "a".repeat(600));
    let reply = server
        .post(
            &orders,
            &tenant.token,
            json!({ "instance_type": "h100x1", "image": too_long }),
        )
        .await;
    reply.expect(StatusCode::UNPROCESSABLE_ENTITY);
    let reply = server
        .post(
            &orders,
            &tenant.token,
            json!({ "instance_type": "h100x1", "job": { "command": "true", "image": "evil.example/x:1" } }),
        )
        .await;
    refused("job.image", "is not allowed")(&reply);
    server
        .post(
            &orders,
            &tenant.token,
            json!({ "instance_type": "h100x1", "image": "pytorch" }),
        )
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "unknown_image");
    // Nothing of the refused orders was written.
    assert_eq!(server.count("SELECT COUNT(*) FROM orders").await, 0);

    // An allowed reference is taken whole (a missing tag is `latest`).
    let order = server
        .order(
            &tenant,
            json!({ "instance_type": "h100x1", "image": "registry.example/team/train" }),
        )
        .await;
    let view = server
        .get(&format!("{orders}/{order}"), &tenant.token)
        .await;
    view.expect(StatusCode::OK);
    assert_eq!(view.body["image"], "registry.example/team/train:latest");
    let digest = format!("nvcr.io/nvidia/pytorch@sha256:{}", "0".repeat(64));
    let job = server
        .order(
            &tenant,
            json!({ "instance_type": "h100x1", "job": { "command": "true", "image": digest } }),
        )
        .await;
    let view = server.get(&format!("{orders}/{job}"), &tenant.token).await;
    assert_eq!(view.body["image"], digest.as_str());
}

async fn the_image_policy_is_the_operators_and_checked(engine: Engine) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    let tenant = server.signup("tenant").await;
    let path = "/api/v1/admin/catalog/image-policy";
    server
        .put(
            path,
            &tenant.token,
            json!({ "allowed_prefixes": ["registry.example"] }),
        )
        .await
        .expect(StatusCode::FORBIDDEN);
    let reply = server
        .put(
            path,
            &operator.token,
            json!({ "allowed_prefixes": ["registry.example", "no-registry/team", "bad host.example"] }),
        )
        .await;
    reply.expect(StatusCode::UNPROCESSABLE_ENTITY);
    let fields: Vec<&str> = reply.body["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .filter_map(|e| e["field"].as_str())
        .collect();
    assert_eq!(fields, ["allowed_prefixes[1]", "allowed_prefixes[2]"]);
    let many: Vec<String> = (0..101).map(|i| format!("r{i}.example")).collect();
    server
        .put(path, &operator.token, json!({ "allowed_prefixes": many }))
        .await
        .expect(StatusCode::UNPROCESSABLE_ENTITY);
    server
        .put(
            path,
            &operator.token,
            json!({ "allowed_prefixes": "registry.example" }),
        )
        .await
        .expect(StatusCode::UNPROCESSABLE_ENTITY);
    let policy = server
        .get("/api/v1/catalog/image-policy", &tenant.token)
        .await;
    policy.expect(StatusCode::OK);
    assert_eq!(
        policy.body["allowed_prefixes"],
        json!([]),
        "nothing was written"
    );
    server
        .put(
            path,
            &operator.token,
            json!({ "allowed_prefixes": ["registry.example/team/", "nvcr.io", "nvcr.io"] }),
        )
        .await
        .expect(StatusCode::OK);
    let policy = server
        .get("/api/v1/catalog/image-policy", &tenant.token)
        .await;
    assert_eq!(
        policy.body["allowed_prefixes"],
        json!(["nvcr.io", "registry.example/team/"])
    );
    let audit = server.get("/api/v1/admin/audit-log", &operator.token).await;
    assert!(
        audit
            .items()
            .iter()
            .any(|row| row["action"] == "image_policy.set"),
        "{}",
        audit.body
    );
}

async fn registry_credentials_are_sealed_walled_off_and_handed_to_their_own_orders_only(
    engine: Engine,
) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 0).await;
    server
        .put(
            "/api/v1/admin/catalog/image-policy",
            &operator.token,
            json!({ "allowed_prefixes": ["registry.example"] }),
        )
        .await
        .expect(StatusCode::OK);
    let (a, b) = (server.signup("a").await, server.signup("b").await);
    let path = |org: uuid::Uuid| format!("/api/v1/orgs/{org}/registry-credentials");
    let password = "a-registry-token-of-a";
    // Bad input, field by field; nothing stored.
    for (body, field) in [
        (
            json!({ "registry": "not a host", "username": "u", "password": "p" }),
            "registry",
        ),
        (
            json!({ "registry": "registry.example:0", "username": "u", "password": "p" }),
            "registry",
        ),
        (
            json!({ "registry": "registry.example", "username": " ", "password": "p" }),
            "username",
        ),
        (
            json!({ "registry": "registry.example", "username": "u", "password": "" }),
            "password",
        ),
        (
            json!({ "registry": "registry.example", "username": "u", "password": "x".repeat(9000) }),
            "password",
        ),
    ] {
        let reply = server.post(&path(a.org_id), &a.token, body).await;
        reply.expect(StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(reply.body["errors"][0]["field"], field, "{}", reply.body);
    }
    server
        .post(
            &path(a.org_id),
            &a.token,
            json!({ "registry": "registry.example", "username": "u", "password": 3 }),
        )
        .await
        .expect(StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        server
            .count("SELECT COUNT(*) FROM registry_credentials")
            .await,
        0
    );

    let stored = server
        .post(
            &path(a.org_id),
            &a.token,
            json!({ "registry": "Registry.Example", "username": "team-a", "password": password }),
        )
        .await;
    stored.expect(StatusCode::CREATED);
    assert_eq!(stored.body["registry"], "registry.example");
    assert!(stored.body.get("password").is_none());
    let id = stored.id("/id");
    server
        .post(
            &path(a.org_id),
            &a.token,
            json!({ "registry": "registry.example", "username": "x", "password": "y" }),
        )
        .await
        .expect_problem(StatusCode::CONFLICT, "registry_credential_exists");
    // Sealed at rest, never shown again.
    assert_eq!(
        server
            .count(&format!(
                "SELECT COUNT(*) FROM registry_credentials WHERE secret LIKE '%{password}%'"
            ))
            .await,
        0
    );
    let listed = server.get(&path(a.org_id), &a.token).await;
    listed.expect(StatusCode::OK);
    assert!(!listed.body.to_string().contains(password));
    // Walled off: B neither sees nor deletes A's, in either organization's
    // path; a member of A's below admin may not either.
    server
        .get(&path(a.org_id), &b.token)
        .await
        .expect(StatusCode::NOT_FOUND);
    for org in [a.org_id, b.org_id] {
        server
            .delete(&format!("{}/{id}", path(org)), &b.token)
            .await
            .expect(StatusCode::NOT_FOUND);
    }
    let member = server.member_of(&a, "member-of-a", "member").await;
    server
        .get(&path(a.org_id), &member.token)
        .await
        .expect(StatusCode::FORBIDDEN);

    // A node gets A's login with A's order's assignment, and none with
    // B's order of the same image.
    let node = server.join_agent(&operator, "r1", "gpu-box", 8).await;
    let image = "registry.example/team/train:v3";
    let order_a = server
        .order(&a, json!({ "instance_type": "h100x1", "image": image }))
        .await;
    let order_b = server
        .order(&b, json!({ "instance_type": "h100x1", "image": image }))
        .await;
    let mut assignments = serde_json::Value::Null;
    for _ in 0..100 {
        let reply = server.get("/api/v1/agent/assignments", &node).await;
        reply.expect(StatusCode::OK);
        if reply.body["assignments"]
            .as_array()
            .is_some_and(|a| a.len() == 2)
        {
            assignments = reply.body["assignments"].clone();
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let of = |order: uuid::Uuid| {
        assignments
            .as_array()
            .and_then(|all| all.iter().find(|x| x["order_id"] == order.to_string()))
            .cloned()
            .unwrap_or_else(|| panic!("no assignment of {order}: {assignments}"))
    };
    let (mine, theirs) = (of(order_a), of(order_b));
    assert_eq!(mine["image"]["reference"], image);
    assert_eq!(
        mine["image"]["login"],
        json!({ "username": "team-a", "password": password })
    );
    assert_eq!(theirs["image"]["reference"], image);
    assert!(theirs["image"]["login"].is_null(), "{theirs}");

    // Deleted, it is gone from the next assignment too.
    server
        .delete(&format!("{}/{id}", path(a.org_id)), &a.token)
        .await
        .expect(StatusCode::NO_CONTENT);
    let reply = server.get("/api/v1/agent/assignments", &node).await;
    let mine = reply.body["assignments"]
        .as_array()
        .and_then(|all| all.iter().find(|x| x["order_id"] == order_a.to_string()))
        .cloned()
        .expect("A's assignment");
    assert!(mine["image"]["login"].is_null());
}
