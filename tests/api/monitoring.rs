//! `/metrics` on the main listener: it names tenants, so it answers only
//! to the configured scrape token, and not at all without one.

use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::support::{Engine, TestServer};

crate::on_both_engines!(
    metrics_on_the_main_listener_need_the_scrape_token,
    gpu_telemetry_is_exposed_per_gpu_with_the_organization_holding_it,
);

const TOKEN: &str = "scrape-secret-7f3a";

/// One scrape with the token, in Prometheus's text format.
async fn scrape(server: &TestServer) -> String {
    let scraped = server
        .http
        .get(server.url("/metrics"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("scrape");
    assert_eq!(scraped.status(), StatusCode::OK);
    assert!(
        scraped.headers()[reqwest::header::CONTENT_TYPE]
            .to_str()
            .is_ok_and(|t| t.starts_with("text/plain; version=0.0.4"))
    );
    scraped.text().await.expect("text")
}

async fn metrics_on_the_main_listener_need_the_scrape_token(engine: Engine) {
    let closed = TestServer::start(engine).await;
    closed
        .call(Method::GET, "/metrics", None, None)
        .await
        .expect_problem(StatusCode::NOT_FOUND, "route_not_found");

    let server = TestServer::start_with(engine, |config| {
        config.metrics_token = Some(TOKEN.into());
    })
    .await;
    server
        .call(Method::GET, "/metrics", None, None)
        .await
        .expect_problem(StatusCode::UNAUTHORIZED, "invalid_token");
    server
        .call(Method::GET, "/metrics", Some("scrape-secret-7f3b"), None)
        .await
        .expect_problem(StatusCode::UNAUTHORIZED, "invalid_token");
    let operator = server.operator().await;
    server
        .call(Method::GET, "/metrics", Some(&operator.token), None)
        .await
        .expect_problem(StatusCode::UNAUTHORIZED, "invalid_token");

    server.call(Method::GET, "/healthz", None, None).await;
    let text = scrape(&server).await;
    assert!(
        text.contains("# TYPE gantry_http_requests_total counter"),
        "{text}"
    );
    assert!(
        text.contains(r#"route="/healthz""#),
        "requests are labelled by route: {text}"
    );
}

/// Tests share one process, and so one recorder: the node's name is unique.
async fn gpu_telemetry_is_exposed_per_gpu_with_the_organization_holding_it(engine: Engine) {
    let server = TestServer::start_with(engine, |config| {
        config.metrics_token = Some(TOKEN.into());
    })
    .await;
    let operator = server.operator().await;
    server.cluster(&operator, 1).await;
    let tenant = server.signup("tenant").await;
    let node = format!("edge-{}", uuid::Uuid::new_v4().simple());
    let credential = server.join_agent(&operator, "r2", &node, 2).await;
    let order = server
        .order(
            &tenant,
            json!({ "instance_type": "h100x1", "region": "r2" }),
        )
        .await;
    let placed = server
        .wait_order(&tenant, order, "placed", |o| o["status"] != "queued")
        .await;
    let held = placed["placement"][0]["gpus"][0]
        .as_u64()
        .or_else(|| placed["placement"][0]["gpu_ids"][0].as_u64())
        .expect("the GPU it holds");

    server
        .post(
            "/api/v1/agent/heartbeat",
            &credential,
            json!({ "gpus": ([0, 1].map(|i| json!({
                "index": i, "utilization_pct": if i == held { 97 } else { 0 },
                "memory_used_mib": if i == held { 40960 } else { 0 },
                "temperature_c": 70 + i, "power_w": 600 + i,
            }))) }),
        )
        .await
        .expect(StatusCode::OK);
    let text = scrape(&server).await;
    let org_name = tenant_org_name(&server, &tenant).await;
    let free = 1 - held;
    for (metric, gpu, organization, value) in [
        (
            "gantry_gpu_utilization_ratio",
            held,
            org_name.as_str(),
            "0.97",
        ),
        (
            "gantry_gpu_memory_used_bytes",
            held,
            org_name.as_str(),
            "42949672960",
        ),
        (
            "gantry_gpu_temperature_celsius",
            free,
            "",
            &format!("{}", 70 + free),
        ),
        (
            "gantry_gpu_power_watts",
            free,
            "",
            &format!("{}", 600 + free),
        ),
    ] {
        let org_id = if organization.is_empty() {
            String::new()
        } else {
            tenant.org_id.to_string()
        };
        let line = format!(
            r#"{metric}{{node="{node}",gpu="{gpu}",organization="{organization}",organization_id="{org_id}"}} {value}"#
        );
        assert!(text.lines().any(|l| l == line), "{line} not in:\n{text}");
    }
}

async fn tenant_org_name(server: &TestServer, tenant: &crate::support::Tenant) -> String {
    let org = server
        .get(&format!("/api/v1/orgs/{}", tenant.org_id), &tenant.token)
        .await;
    org.expect(StatusCode::OK);
    org.str("/name")
}
