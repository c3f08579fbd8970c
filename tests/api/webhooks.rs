//! Webhooks end to end: a real receiver, started as its own process, checks
//! every signature with the Standard Webhooks package from PyPI (not the
//! server's code) and sees an order's life in order; a receiver that
//! answers 500 twice gets the event on the third attempt with the same id;
//! endpoints refuse bad URLs, blocked addresses and unknown event types;
//! and one tenant never sees or changes another's endpoints.

use std::time::Duration;

use chrono::TimeDelta;
use reqwest::StatusCode;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::receiver::Receiver;
use crate::support::{Engine, Tenant, TestServer};

crate::on_both_engines!(
    an_orders_life_reaches_a_receiver_that_verifies_every_signature,
    endpoints_refuse_bad_urls_blocked_addresses_and_unknown_types,
);

async fn webhook_server(engine: Engine) -> TestServer {
    TestServer::start_with(engine, |config| {
        config.webhook_allowed_networks = vec!["127.0.0.0/8".into()];
        config.webhook_allow_http = true;
    })
    .await
}

/// The endpoint's delivery log once `done` holds (the server records an
/// answer just after the receiver gave it), for up to 5 s.
async fn deliveries_once(
    server: &TestServer,
    tenant: &Tenant,
    endpoint: Uuid,
    done: impl Fn(&[Value]) -> bool,
) -> Vec<Value> {
    let path = format!(
        "/api/v1/orgs/{}/webhooks/{endpoint}/deliveries",
        tenant.org_id
    );
    let mut items = Vec::new();
    for _ in 0..50 {
        let log = server.get(&path, &tenant.token).await;
        log.expect(StatusCode::OK);
        items = log.items().clone();
        if done(&items) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    items
}

/// Registers `url` for `tenant` and returns the endpoint's id and secret.
async fn register(server: &TestServer, tenant: &Tenant, url: &str, types: Value) -> (Uuid, String) {
    let created = server
        .post(
            &format!("/api/v1/orgs/{}/webhooks", tenant.org_id),
            &tenant.token,
            json!({ "url": url, "description": "CI", "event_types": types }),
        )
        .await;
    created.expect(StatusCode::CREATED);
    (created.id("/id"), created.str("/secret"))
}

fn types_of(requests: &[Value]) -> Vec<String> {
    requests
        .iter()
        .filter_map(|r| r["type"].as_str().map(str::to_owned))
        .collect()
}

async fn an_orders_life_reaches_a_receiver_that_verifies_every_signature(engine: Engine) {
    let server = webhook_server(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 1).await;
    let tenant = server.signup("tenant").await;
    let receiver = Receiver::start(&[]);
    let (endpoint, secret) = register(&server, &tenant, &receiver.url(), json!([])).await;
    assert!(secret.starts_with("whsec_"));
    receiver.set_secret(&secret).await;

    let order = server
        .order(
            &tenant,
            json!({ "instance_type": "h100x1", "name": "hooked" }),
        )
        .await;
    server.wait_status(&tenant, order, "running").await;
    server.cancel(&tenant, order).await;
    let requests = receiver
        .wait("queued, started and cancelled", |r| {
            types_of(r).contains(&"order.cancelled".to_owned())
        })
        .await;

    // In the order they happened, each verified, each id once.
    assert_eq!(
        types_of(&requests),
        ["order.queued", "order.started", "order.cancelled"]
    );
    assert!(
        requests.iter().all(|r| r["verified"] == true),
        "{requests:#?}"
    );
    let mut ids: Vec<&str> = requests.iter().filter_map(|r| r["id"].as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 3);
    let started = &requests[1]["body"];
    assert_eq!(started["data"]["order"]["id"], order.to_string());
    assert_eq!(started["data"]["order"]["name"], "hooked");
    assert_eq!(started["data"]["order"]["status"], "running");
    assert!(
        started["timestamp"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z'))
    );

    // The delivery log says the same, with each attempt's answer, once the
    // server has recorded the answers the receiver already gave.
    let deliveries = deliveries_once(&server, &tenant, endpoint, |d| {
        d.len() == 3 && d.iter().all(|d| d["status"] == "succeeded")
    })
    .await;
    for delivery in &deliveries {
        assert_eq!(delivery["status"], "succeeded", "{delivery:#}");
        assert_eq!(delivery["attempt_log"][0]["status_code"], 200);
        assert_eq!(delivery["attempt_log"][0]["response_excerpt"], "received");
    }

    // Preempted: told first, with the deadline by which it must save its
    // work (the grace period), then stopped and queued again.
    let spot = server
        .order(
            &tenant,
            json!({ "instance_type": "h100x8", "pricing_class": "spot", "priority_class": "preemptible", "workload_class": "batch" }),
        )
        .await;
    server.wait_status(&tenant, spot, "running").await;
    let production = server
        .order(
            &tenant,
            json!({ "instance_type": "h100x8", "priority_class": "production" }),
        )
        .await;
    let of = |requests: &[Value], order: Uuid| -> Vec<Value> {
        requests
            .iter()
            .filter(|r| r["body"]["data"]["order"]["id"] == order.to_string())
            .cloned()
            .collect()
    };
    let requests = receiver
        .wait("the preemption notice", |r| {
            types_of(&of(r, spot)).contains(&"order.preemption_scheduled".to_owned())
        })
        .await;
    let notice = of(&requests, spot)
        .into_iter()
        .find(|r| r["type"] == "order.preemption_scheduled")
        .expect("the notice");
    let time = |pointer: &str| {
        chrono::DateTime::parse_from_rfc3339(
            notice["body"]
                .pointer(pointer)
                .and_then(Value::as_str)
                .unwrap_or_default(),
        )
        .unwrap_or_else(|e| panic!("{pointer} in {notice:#}: {e}"))
    };
    let grace = time("/data/deadline") - time("/timestamp");
    assert!((25..=35).contains(&grace.num_seconds()), "{notice:#}");
    server.state.clock.advance(TimeDelta::seconds(31));
    server.wait_status(&tenant, production, "running").await;
    server.cancel(&tenant, production).await;
    server.cancel(&tenant, spot).await;
    let requests = receiver
        .wait("both cancelled", |r| {
            [spot, production]
                .iter()
                .all(|o| types_of(&of(r, *o)).contains(&"order.cancelled".to_owned()))
        })
        .await;
    let spot_life = types_of(&of(&requests, spot));
    assert_eq!(
        spot_life[..4],
        [
            "order.queued",
            "order.started",
            "order.preemption_scheduled",
            "order.preempted"
        ],
        "{spot_life:?}"
    );
    assert_eq!(
        spot_life.last().map(String::as_str),
        Some("order.cancelled")
    );
    assert!(requests.iter().all(|r| r["verified"] == true));
    let before = requests.len();

    // Only the types asked for: a filter on order.started leaves the next
    // order's queued and cancelled events out.
    server
        .patch(
            &format!("/api/v1/orgs/{}/webhooks/{endpoint}", tenant.org_id),
            &tenant.token,
            json!({ "event_types": ["order.started"] }),
        )
        .await
        .expect(StatusCode::OK);
    let second = server
        .order(&tenant, json!({ "instance_type": "h100x1" }))
        .await;
    server.wait_status(&tenant, second, "running").await;
    server.cancel(&tenant, second).await;
    let requests = receiver
        .wait("the second start", |r| {
            r.iter()
                .any(|e| e["body"]["data"]["order"]["id"] == second.to_string())
        })
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let requests_after = receiver.requests();
    assert_eq!(requests_after.len(), requests.len(), "{requests_after:#?}");
    assert_eq!(types_of(&requests_after)[before..], ["order.started"]);

    // A rotated secret: both sign during the overlap, and the receiver,
    // knowing only the new one, still verifies.
    let rotated = server
        .post(
            &format!(
                "/api/v1/orgs/{}/webhooks/{endpoint}/rotate-secret",
                tenant.org_id
            ),
            &tenant.token,
            json!({ "overlap_seconds": 3600 }),
        )
        .await;
    rotated.expect(StatusCode::OK);
    let new_secret = rotated.str("/secret");
    assert_ne!(new_secret, secret);
    receiver.set_secret(&new_secret).await;
    server
        .post(
            &format!("/api/v1/orgs/{}/webhooks/{endpoint}/test", tenant.org_id),
            &tenant.token,
            json!({}),
        )
        .await
        .expect(StatusCode::ACCEPTED);
    let requests = receiver
        .wait("the test event", |r| {
            types_of(r).contains(&"webhook.test".to_owned())
        })
        .await;
    let test = requests.last().expect("the test event");
    assert_eq!(test["verified"], true);
    assert_eq!(test["body"]["data"]["endpoint_id"], endpoint.to_string());

    // Another tenant neither sees nor changes the endpoint.
    let other = server.signup("other").await;
    for (method, path) in [
        (
            "GET",
            format!("/api/v1/orgs/{}/webhooks/{endpoint}", other.org_id),
        ),
        (
            "GET",
            format!("/api/v1/orgs/{}/webhooks/{endpoint}", tenant.org_id),
        ),
        (
            "DELETE",
            format!("/api/v1/orgs/{}/webhooks/{endpoint}", other.org_id),
        ),
    ] {
        let reply = match method {
            "GET" => server.get(&path, &other.token).await,
            _ => server.delete(&path, &other.token).await,
        };
        assert!(
            reply.status == StatusCode::NOT_FOUND,
            "{method} {path}: {}",
            reply.status
        );
    }
    server
        .get(
            &format!("/api/v1/orgs/{}/webhooks/{endpoint}", tenant.org_id),
            &tenant.token,
        )
        .await
        .expect(StatusCode::OK);
}

async fn endpoints_refuse_bad_urls_blocked_addresses_and_unknown_types(engine: Engine) {
    let server = TestServer::start(engine).await;
    let tenant = server.signup("tenant").await;
    let path = format!("/api/v1/orgs/{}/webhooks", tenant.org_id);
    for (body, field) in [
        (json!({ "url": "not a url" }), "url"),
        (json!({ "url": "http://hooks.example.com/x" }), "url"),
        (json!({ "url": "https://127.0.0.1/x" }), "url"),
        (json!({ "url": "https://10.0.0.8/x" }), "url"),
        (
            json!({ "url": "https://169.254.169.254/latest/meta-data" }),
            "url",
        ),
        (json!({ "url": "https://[::1]/x" }), "url"),
        (
            json!({ "url": "https://user:pw@hooks.example.com/x" }),
            "url",
        ),
        (
            json!({ "url": "https://hooks.example.com/x", "event_types": ["order.exploded"] }),
            "event_types",
        ),
        (
            json!({ "url": format!("https://hooks.example.com/{}", "a".repeat(2100)) }),
            "url",
        ),
    ] {
        let reply = server.post(&path, &tenant.token, body.clone()).await;
        reply.expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
        assert_eq!(reply.body["errors"][0]["field"], field, "{body}");
    }
    server
        .post(&path, &tenant.token, json!({ "url": 7 }))
        .await
        .expect(StatusCode::UNPROCESSABLE_ENTITY);
    server
        .post(
            &path,
            &tenant.token,
            json!({ "url": "https://hooks.example.com/x", "secret": "mine" }),
        )
        .await
        .expect(StatusCode::UNPROCESSABLE_ENTITY);
    let reply = server.get(&path, &tenant.token).await;
    reply.expect(StatusCode::OK);
    assert_eq!(reply.body, json!([]), "nothing was registered");
    assert_eq!(
        server.count("SELECT COUNT(*) FROM webhook_endpoints").await,
        0
    );

    // A public name passes registration; one that resolves inside the
    // network is refused when a delivery connects, and the attempt says so.
    let (endpoint, _) = register(&server, &tenant, "https://localhost/hook", json!([])).await;
    server
        .post(&format!("{path}/{endpoint}/test"), &tenant.token, json!({}))
        .await
        .expect(StatusCode::ACCEPTED);
    let deliveries = format!("{path}/{endpoint}/deliveries");
    let mut error = String::new();
    for _ in 0..100 {
        let log = server.get(&deliveries, &tenant.token).await;
        if let Some(e) = log.items()[0]["attempt_log"][0]["error"].as_str() {
            error = e.to_owned();
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        error.contains("loopback") && (error.contains("127.0.0.1") || error.contains("::1")),
        "{error}"
    );
    let unknown = Uuid::now_v7();
    server
        .get(&format!("{path}/{unknown}"), &tenant.token)
        .await
        .expect_problem(StatusCode::NOT_FOUND, "webhook_endpoint_not_found");
    server
        .post(
            &format!("{path}/{endpoint}/rotate-secret"),
            &tenant.token,
            json!({ "overlap_seconds": -1 }),
        )
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    // A member who is not an admin reads nothing of it.
    let member = server.member_of(&tenant, "member", "member").await;
    server
        .get(&path, &member.token)
        .await
        .expect(StatusCode::FORBIDDEN);
}

/// A receiver that answers 500 twice gets the event on the third attempt,
/// with the same `webhook-id` each time, on the published schedule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_answering_500_twice_gets_the_event_on_the_third_attempt() {
    let server = webhook_server(Engine::Sqlite).await;
    let tenant = server.signup("tenant").await;
    let receiver = Receiver::start(&["--fail-first", "2"]);
    let (endpoint, secret) = register(&server, &tenant, &receiver.url(), json!([])).await;
    receiver.set_secret(&secret).await;
    server
        .post(
            &format!("/api/v1/orgs/{}/webhooks/{endpoint}/test", tenant.org_id),
            &tenant.token,
            json!({}),
        )
        .await
        .expect(StatusCode::ACCEPTED);
    receiver.wait("the first attempt", |r| r.len() == 1).await;
    // Nothing more before the 5 s of the schedule pass.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(receiver.requests().len(), 1);
    server.state.clock.advance(TimeDelta::seconds(5));
    receiver.wait("the second attempt", |r| r.len() == 2).await;
    server.state.clock.advance(TimeDelta::minutes(5));
    let requests = receiver.wait("the third attempt", |r| r.len() == 3).await;

    let answered: Vec<&Value> = requests.iter().map(|r| &r["answered"]).collect();
    assert_eq!(answered, [500, 500, 200]);
    assert!(requests.iter().all(|r| r["verified"] == true));
    assert!(requests.iter().all(|r| r["id"] == requests[0]["id"]));
    let log = deliveries_once(&server, &tenant, endpoint, |d| {
        d[0]["status"] == "succeeded"
    })
    .await;
    let delivery = &log[0];
    assert_eq!(delivery["status"], "succeeded");
    assert_eq!(delivery["attempts"], 3);
    let codes: Vec<&Value> = delivery["attempt_log"]
        .as_array()
        .expect("attempts")
        .iter()
        .map(|a| &a["status_code"])
        .collect();
    assert_eq!(codes, [500, 500, 200]);
    assert_eq!(delivery["attempt_log"][0]["response_excerpt"], "try again");
}

/// An endpoint that has failed for five days is turned off and its
/// organization told in its audit log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_failing_for_five_days_is_turned_off_and_its_organization_told() {
    let server = webhook_server(Engine::Sqlite).await;
    let tenant = server.signup("tenant").await;
    let receiver = Receiver::start(&["--fail-first", "1000"]);
    let (endpoint, _) = register(&server, &tenant, &receiver.url(), json!([])).await;
    let path = format!("/api/v1/orgs/{}/webhooks/{endpoint}", tenant.org_id);
    server
        .post(&format!("{path}/test"), &tenant.token, json!({}))
        .await
        .expect(StatusCode::ACCEPTED);
    receiver.wait("the first attempt", |r| r.len() == 1).await;
    // Each step passes the next retry; the schedule's eight attempts span
    // about 38 hours, so a second event keeps the endpoint failing.
    for (step, seconds) in [5, 300, 1_800, 7_200, 18_000, 36_000, 36_000]
        .into_iter()
        .enumerate()
    {
        server.state.clock.advance(TimeDelta::seconds(seconds));
        receiver
            .wait("the next attempt", |r| r.len() == step + 2)
            .await;
    }
    server.state.clock.advance(TimeDelta::days(4));
    server
        .post(&format!("{path}/test"), &tenant.token, json!({}))
        .await
        .expect(StatusCode::ACCEPTED);
    receiver
        .wait("an attempt past five days", |r| r.len() == 9)
        .await;
    let mut current = Value::Null;
    for _ in 0..50 {
        current = server.get(&path, &tenant.token).await.body;
        if current["enabled"] == false {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(current["enabled"], false, "{current:#}");
    assert!(
        current["disabled_reason"]
            .as_str()
            .is_some_and(|r| r.contains("5 days"))
    );
    let audit = server
        .get(
            &format!("/api/v1/orgs/{}/audit-log", tenant.org_id),
            &tenant.token,
        )
        .await;
    assert!(
        audit
            .items()
            .iter()
            .any(|row| row["action"] == "webhook.endpoint_disabled"),
        "{:#}",
        audit.body
    );
    // The first delivery used its eight attempts and failed.
    let log = server
        .get(&format!("{path}/deliveries"), &tenant.token)
        .await;
    let first = log.items().last().expect("the first delivery");
    assert_eq!(first["status"], "failed");
    assert_eq!(first["attempts"], 8);
}

/// A redirect is an answer, not a way elsewhere: the attempt records the
/// 307 and the address it points to never hears from the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_is_not_followed() {
    let server = webhook_server(Engine::Sqlite).await;
    let tenant = server.signup("tenant").await;
    let elsewhere = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let target = format!("http://{}/stolen", elsewhere.local_addr().expect("address"));
    let redirecting = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!(
        "http://{}/hooks",
        redirecting.local_addr().expect("address")
    );
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        while let Ok((mut stream, _)) = redirecting.accept().await {
            // The request's head is enough to answer it.
            let mut request = Vec::new();
            let mut chunk = [0u8; 4096];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(read) => request.extend_from_slice(&chunk[..read]),
                }
            }
            let answer = format!(
                "HTTP/1.1 307 Temporary Redirect\r\nlocation: {target}\r\ncontent-length: 5\r\nconnection: close\r\n\r\nmoved"
            );
            stream.write_all(answer.as_bytes()).await.ok();
        }
    });
    let (endpoint, _) = register(&server, &tenant, &url, json!([])).await;
    server
        .post(
            &format!("/api/v1/orgs/{}/webhooks/{endpoint}/test", tenant.org_id),
            &tenant.token,
            json!({}),
        )
        .await
        .expect(StatusCode::ACCEPTED);
    let log = deliveries_once(&server, &tenant, endpoint, |d| {
        d[0]["attempt_log"][0]["status_code"] == 307
    })
    .await;
    assert_eq!(log[0]["attempt_log"][0]["status_code"], 307, "{log:#?}");
    assert_eq!(
        log[0]["status"], "pending",
        "a redirect is a failed attempt"
    );
    let reached = tokio::time::timeout(Duration::from_millis(500), elsewhere.accept()).await;
    assert!(reached.is_err(), "the redirect's target was reached");
}
