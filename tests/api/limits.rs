//! The limits that keep one caller from hurting the others, tried as an
//! abuser would: waiting work per organization and project, sign-in
//! guessing from other addresses, floods of invalid credentials, request
//! ids the audit log cannot hold, and the rate limits themselves (never on
//! health probes, always announced).

use std::net::IpAddr;

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::{Engine, PASSWORD, Tenant, TestServer};

crate::on_both_engines!(
    waiting_work_is_limited_per_organization_and_project,
    a_stranger_cannot_lock_an_account_and_failed_sign_ins_are_audited,
    invalid_credentials_are_refused_unread_once_an_address_failed_too_often,
    request_ids_are_kept_only_when_short_and_printable,
    health_probes_are_never_limited_and_limits_are_announced,
);

/// A client whose requests come from another loopback address, as another
/// machine's would.
fn client_from(address: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(IpAddr::from(address))
        .build()
        .expect("client")
}

fn array(count: i32, project: Option<&str>) -> Value {
    let mut body = json!({
        "instance_type": "h100x1",
        "duration_seconds": 60,
        "job": { "command": "python train.py", "array_count": count },
    });
    if let Some(project) = project {
        body["project_id"] = json!(project);
    }
    body
}

async fn submit(server: &TestServer, tenant: &Tenant, body: Value) -> crate::support::Reply {
    server
        .post(
            &format!("/api/v1/orgs/{}/orders", tenant.org_id),
            &tenant.token,
            body,
        )
        .await
}

async fn waiting_work_is_limited_per_organization_and_project(engine: Engine) {
    let server = TestServer::start_with(engine, |config| config.max_waiting_orders = 25).await;
    let operator = server.operator().await;
    server.cluster(&operator, 1).await;
    // Nothing starts: every order waits.
    let nodes = server.get("/api/v1/admin/nodes", &operator.token).await;
    let node = nodes.items()[0]["id"].as_str().expect("node id").to_owned();
    server
        .post(
            &format!("/api/v1/admin/nodes/{node}/cordon"),
            &operator.token,
            json!({}),
        )
        .await
        .expect(StatusCode::OK);
    let tenant = server.signup("flood").await;
    let bystander = server.signup("bystander").await;

    submit(&server, &tenant, array(20, None))
        .await
        .expect(StatusCode::CREATED);
    let orders_before = server.count("SELECT COUNT(*) FROM orders").await;
    let refused = submit(&server, &tenant, array(6, None)).await;
    refused.expect_problem(StatusCode::TOO_MANY_REQUESTS, "too_many_waiting_orders");
    assert!(
        refused.body["detail"]
            .as_str()
            .is_some_and(|d| d.contains("20 orders waiting") && d.contains("at most 25")),
        "{:#}",
        refused.body
    );
    assert_eq!(
        server.count("SELECT COUNT(*) FROM orders").await,
        orders_before,
        "a refused array leaves no member behind"
    );
    submit(&server, &bystander, array(20, None))
        .await
        .expect(StatusCode::CREATED);
    let limits = format!("/api/v1/orgs/{}/queue-limits", tenant.org_id);
    let seen = server.get(&limits, &tenant.token).await;
    seen.expect(StatusCode::OK);
    assert_eq!(
        (
            &seen.body["max_waiting_orders"],
            &seen.body["default"],
            &seen.body["waiting_orders"]
        ),
        (&json!(25), &json!(true), &json!(20))
    );
    server
        .get(
            &format!("/api/v1/orgs/{}/queue-limits", bystander.org_id),
            &tenant.token,
        )
        .await
        .expect_problem(StatusCode::NOT_FOUND, "organization_not_found");

    // Two arrays at once where only one fits: exactly one is taken.
    let racing = server.signup("racing").await;
    let sent: Vec<_> = (0..2)
        .map(|_| {
            let request = server
                .http
                .post(server.url(&format!("/api/v1/orgs/{}/orders", racing.org_id)))
                .bearer_auth(&racing.token)
                .json(&array(15, None))
                .send();
            tokio::spawn(async move { request.await.map(|r| r.status()) })
        })
        .collect();
    let mut statuses = Vec::new();
    for request in sent {
        statuses.push(request.await.expect("task").expect("response"));
    }
    statuses.sort();
    assert_eq!(
        statuses,
        [StatusCode::CREATED, StatusCode::TOO_MANY_REQUESTS]
    );

    // Forty single orders at once, written in shared transactions: exactly
    // the twenty-five the limit allows are taken.
    let crowd = server.signup("crowd").await;
    let sent: Vec<_> = (0..40)
        .map(|_| {
            let request = server
                .http
                .post(server.url(&format!("/api/v1/orgs/{}/orders", crowd.org_id)))
                .bearer_auth(&crowd.token)
                .json(&json!({ "instance_type": "h100x1" }))
                .send();
            tokio::spawn(async move { request.await.map(|r| r.status()) })
        })
        .collect();
    let mut created = 0;
    for request in sent {
        match request.await.expect("task").expect("response") {
            StatusCode::CREATED => created += 1,
            status => assert_eq!(status, StatusCode::TOO_MANY_REQUESTS),
        }
    }
    assert_eq!(created, 25);
    let crowd_limits = format!("/api/v1/orgs/{}/queue-limits", crowd.org_id);
    let seen = server.get(&crowd_limits, &crowd.token).await;
    assert_eq!(seen.body["waiting_orders"], 25);
    assert_eq!(
        server
            .count(&format!(
                "SELECT COUNT(*) FROM audit_log WHERE action = 'order.create' \
                 AND actor_id = (SELECT id FROM users WHERE email = '{}')",
                crowd.email
            ))
            .await,
        25,
        "one audit row per order taken"
    );

    // Another tenant's orders share those batches: its own are all taken
    // in its own organization, its tries on the full organization's path
    // are refused as unknown, and the full one still refuses its own.
    let neighbour = server.signup("neighbour").await;
    let tries = [
        (&neighbour, neighbour.org_id, 10),
        (&neighbour, crowd.org_id, 5),
        (&crowd, crowd.org_id, 5),
    ];
    let mut sent = Vec::new();
    for (caller, org, count) in tries {
        for _ in 0..count {
            let request = server
                .http
                .post(server.url(&format!("/api/v1/orgs/{org}/orders")))
                .bearer_auth(&caller.token)
                .json(&json!({ "instance_type": "h100x1" }))
                .send();
            let task = tokio::spawn(async move {
                let reply =
                    crate::support::Reply::from_response(request.await.expect("response")).await;
                (reply.status, reply.body)
            });
            sent.push(((caller.user_id, org), task));
        }
    }
    for ((user, org), task) in sent {
        let (status, body) = task.await.expect("task");
        match (user == neighbour.user_id, org == neighbour.org_id) {
            (true, true) => {
                assert_eq!(status, StatusCode::CREATED, "{body:#}");
                assert_eq!(body["org_id"], json!(neighbour.org_id));
            }
            (true, false) => assert_eq!(body["code"], "organization_not_found", "{body:#}"),
            _ => assert_eq!(body["code"], "too_many_waiting_orders", "{body:#}"),
        }
    }
    let seen = server.get(&crowd_limits, &crowd.token).await;
    assert_eq!(seen.body["waiting_orders"], 25);
    assert_eq!(
        server
            .count(&format!(
                "SELECT COUNT(*) FROM orders WHERE created_by = \
                 (SELECT id FROM users WHERE email = '{}')",
                neighbour.email
            ))
            .await,
        10
    );

    // An operator raises the organization's limit and caps one project.
    let project = server
        .post(
            &format!("/api/v1/orgs/{}/projects", tenant.org_id),
            &tenant.token,
            json!({ "name": "sweeps" }),
        )
        .await
        .str("/id");
    let admin = format!("/api/v1/admin/orgs/{}/queue-limits", tenant.org_id);
    server
        .put(&admin, &tenant.token, json!({ "max_waiting_orders": 1000 }))
        .await
        .expect(StatusCode::FORBIDDEN);
    for (body, code) in [
        (json!({ "max_waiting_orders": -1 }), "validation_failed"),
        (
            json!({ "projects": [{ "project_id": uuid::Uuid::new_v4(), "max_waiting_orders": 1 }] }),
            "validation_failed",
        ),
        (json!({ "max_waiting_orders": "many" }), "invalid_body"),
    ] {
        server
            .put(&admin, &operator.token, body)
            .await
            .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, code);
    }
    let set = server
        .put(
            &admin,
            &operator.token,
            json!({ "max_waiting_orders": 1000, "projects": [{ "project_id": project, "max_waiting_orders": 3 }] }),
        )
        .await;
    set.expect(StatusCode::OK);
    assert_eq!(set.body["default"], false);
    assert_eq!(set.body["projects"][0]["max_waiting_orders"], 3);
    submit(&server, &tenant, array(6, None))
        .await
        .expect(StatusCode::CREATED);
    submit(&server, &tenant, array(3, Some(&project)))
        .await
        .expect(StatusCode::CREATED);
    let refused = submit(&server, &tenant, array(1, Some(&project))).await;
    refused.expect_problem(StatusCode::TOO_MANY_REQUESTS, "too_many_waiting_orders");
    assert!(
        refused.body["detail"]
            .as_str()
            .is_some_and(|d| d.contains("the project")),
        "{:#}",
        refused.body
    );
    let seen = server.get(&limits, &tenant.token).await;
    assert_eq!(seen.body["waiting_orders"], 29);
    assert_eq!(seen.body["projects"][0]["waiting_orders"], 3);
}

async fn login_from(
    client: &reqwest::Client,
    server: &TestServer,
    email: &str,
    password: &str,
) -> (StatusCode, Value) {
    let reply = client
        .post(server.url("/api/v1/auth/login"))
        .json(&json!({ "email": email, "password": password }))
        .send()
        .await
        .expect("login");
    let status = reply.status();
    (status, reply.json().await.unwrap_or(Value::Null))
}

async fn a_stranger_cannot_lock_an_account_and_failed_sign_ins_are_audited(engine: Engine) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    let attacker = client_from([127, 0, 0, 2]);
    let limit = server.state.config.login_max_failures;
    for _ in 0..limit {
        let (status, body) = login_from(&attacker, &server, &operator.email, "guess").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body:#}");
    }
    let (status, body) = login_from(&attacker, &server, &operator.email, PASSWORD).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body:#}");
    assert_eq!(body["code"], "too_many_login_attempts");

    // The owner, from their own address, still signs in.
    let (status, body) = login_from(&server.http, &server, &operator.email, PASSWORD).await;
    assert_eq!(status, StatusCode::OK, "{body:#}");
    assert_eq!(
        server
            .count(&format!(
                "SELECT COUNT(*) FROM audit_log WHERE action = 'user.login_failed' \
                 AND target_id = '{}' AND source_address = '127.0.0.2'",
                operator.user_id
            ))
            .await,
        i64::from(limit),
        "every failed sign-in is audited with its address"
    );

    // An address spraying many accounts is refused everywhere.
    let sprayer = client_from([127, 0, 0, 3]);
    for i in 0..limit * 3 {
        let (status, _) = login_from(
            &sprayer,
            &server,
            &format!("nobody{i}@example.com"),
            "guess",
        )
        .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    let (status, _) = login_from(&sprayer, &server, &operator.email, PASSWORD).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    let (status, _) = login_from(&server.http, &server, &operator.email, PASSWORD).await;
    assert_eq!(status, StatusCode::OK);
}

async fn invalid_credentials_are_refused_unread_once_an_address_failed_too_often(engine: Engine) {
    let server = TestServer::start_with(engine, |config| config.failed_auth_per_minute = 30).await;
    let tenant = server.signup("tenant").await;
    let (_, key) = server.api_key(&tenant, "member").await;
    let me = server.url("/api/v1/me");
    let guesser = client_from([127, 0, 0, 4]);
    // A third of the minute's thirty at once.
    for i in 0..10 {
        let forged = format!("{key}{i}");
        let reply = guesser
            .get(&me)
            .bearer_auth(&forged)
            .send()
            .await
            .expect("request");
        assert_eq!(reply.status(), StatusCode::UNAUTHORIZED, "guess {i}");
    }
    let refused = guesser
        .get(&me)
        .bearer_auth(&key)
        .send()
        .await
        .expect("request");
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(refused.headers().contains_key(reqwest::header::RETRY_AFTER));
    let body: Value = refused.json().await.expect("problem");
    assert_eq!(body["code"], "too_many_failed_credentials");
    // Everyone else is served as before.
    let served = server
        .http
        .get(&me)
        .bearer_auth(&key)
        .send()
        .await
        .expect("request");
    assert_eq!(served.status(), StatusCode::OK);
    let anonymous = guesser.get(&me).send().await.expect("request");
    assert_eq!(
        anonymous.status(),
        StatusCode::UNAUTHORIZED,
        "no credentials, nothing refused unread"
    );
}

async fn request_ids_are_kept_only_when_short_and_printable(engine: Engine) {
    let server = TestServer::start(engine).await;
    let tenant = server.signup("tenant").await;
    let projects = server.url(&format!("/api/v1/orgs/{}/projects", tenant.org_id));
    let create = |name: &str, request_id: &str| {
        server
            .http
            .post(&projects)
            .bearer_auth(&tenant.token)
            .header("x-request-id", request_id)
            .json(&json!({ "name": name }))
            .send()
    };
    let long = "r".repeat(65);
    for (name, sent) in [("long", long.as_str()), ("spaced", "has spaces in it")] {
        let reply = create(name, sent).await.expect("request");
        assert_eq!(reply.status(), StatusCode::CREATED, "{sent}");
        let given = reply.headers()["x-request-id"]
            .to_str()
            .expect("id")
            .to_owned();
        assert_ne!(given, sent);
        assert!(reply.headers().contains_key("x-request-id-replaced"));
        assert_eq!(
            server
                .count(&format!(
                    "SELECT COUNT(*) FROM audit_log WHERE request_id = '{given}'"
                ))
                .await,
            1,
            "the audit entry carries the id given instead"
        );
    }
    let kept = "k".repeat(64);
    let reply = create("kept", &kept).await.expect("request");
    assert_eq!(reply.status(), StatusCode::CREATED);
    assert_eq!(reply.headers()["x-request-id"], kept.as_str());
    assert!(!reply.headers().contains_key("x-request-id-replaced"));
}

async fn health_probes_are_never_limited_and_limits_are_announced(engine: Engine) {
    let server = TestServer::start_with(engine, |config| {
        config.rate_limit_per_second = 1;
        config.rate_limit_burst = 3;
    })
    .await;
    for path in ["/healthz", "/readyz"] {
        for _ in 0..20 {
            let reply = server
                .http
                .get(server.url(path))
                .send()
                .await
                .expect("probe");
            assert_eq!(reply.status(), StatusCode::OK, "{path}");
        }
    }
    let tenant = server.signup("tenant").await;
    let me = server.url("/api/v1/me");
    let call = || server.http.get(&me).bearer_auth(&tenant.token).send();
    let first = call().await.expect("request");
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(first.headers()["ratelimit-policy"], "\"caller\";q=3;w=3");
    assert_eq!(first.headers()["ratelimit"], "\"caller\";r=2;t=1");
    let mut last = first;
    for _ in 0..3 {
        last = call().await.expect("request");
    }
    assert_eq!(last.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(last.headers().contains_key(reqwest::header::RETRY_AFTER));
    assert!(
        last.headers()["ratelimit"]
            .to_str()
            .is_ok_and(|v| v.starts_with("\"caller\";r=0;")),
        "{:?}",
        last.headers()
    );
}
