//! What the web console needs beyond the tenant API: the operator's views
//! across tenants (orders, who holds each GPU, GPU telemetry) and the built
//! console itself, served beside the API.

use chrono::{TimeDelta, Utc};
use reqwest::StatusCode;
use reqwest::header::{
    ACCEPT_ENCODING, CACHE_CONTROL, CONTENT_ENCODING, CONTENT_SECURITY_POLICY, CONTENT_TYPE,
};
use sea_orm::{ActiveModelTrait, Set};
use serde_json::json;

use crate::support::{Engine, TestServer};

crate::on_both_engines!(operator_views_span_tenants_and_tenants_cannot_use_them);

async fn operator_views_span_tenants_and_tenants_cannot_use_them(engine: Engine) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 2).await;
    let alpha = server.signup("alpha").await;
    let bravo = server.signup("bravo").await;
    let running = server
        .order(&alpha, json!({ "instance_type": "h100x4" }))
        .await;
    server.wait_status(&alpha, running, "running").await;
    let other = server
        .order(&bravo, json!({ "instance_type": "h100x1" }))
        .await;
    server.wait_status(&bravo, other, "running").await;

    // Every tenant's orders, filtered by organization and status.
    let all = server.get("/api/v1/admin/orders", &operator.token).await;
    all.expect(StatusCode::OK);
    let orgs: Vec<String> = all
        .items()
        .iter()
        .map(|o| o["org_id"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert!(orgs.contains(&alpha.org_id.to_string()) && orgs.contains(&bravo.org_id.to_string()));
    let only_alpha = server
        .get(
            &format!(
                "/api/v1/admin/orders?org_id={}&status=running",
                alpha.org_id
            ),
            &operator.token,
        )
        .await;
    only_alpha.expect(StatusCode::OK);
    assert_eq!(only_alpha.items().len(), 1);
    assert_eq!(only_alpha.items()[0]["id"], running.to_string());
    server
        .get("/api/v1/admin/orders?status=sleeping", &operator.token)
        .await
        .expect(StatusCode::BAD_REQUEST);

    // Each held GPU names its order and that order's organization.
    let nodes = server.get("/api/v1/admin/nodes", &operator.token).await;
    nodes.expect(StatusCode::OK);
    let gpus: Vec<&serde_json::Value> = nodes
        .items()
        .iter()
        .flat_map(|n| n["gpus"].as_array().into_iter().flatten())
        .collect();
    let held_by = |org: uuid::Uuid| {
        gpus.iter()
            .filter(|g| g["org_id"] == org.to_string())
            .count()
    };
    assert_eq!(held_by(alpha.org_id), 4);
    assert_eq!(held_by(bravo.org_id), 1);
    assert!(
        gpus.iter()
            .all(|g| g["order_id"].is_null() == g["org_id"].is_null())
    );

    // Telemetry: the window's readings only, oldest first.
    let node_id = nodes.items()[0]["id"].as_str().expect("node id").to_owned();
    let node_uuid: uuid::Uuid = node_id.parse().expect("uuid");
    let now = Utc::now();
    for (minutes_ago, utilization) in [(20, 10), (2, 90), (1, 95)] {
        gantry_entities::gpu_telemetry::ActiveModel {
            node_id: Set(node_uuid),
            gpu_index: Set(0),
            sampled_at: Set(now - TimeDelta::minutes(minutes_ago)),
            utilization_pct: Set(utilization),
            memory_used_mib: Set(1024),
            temperature_c: Set(60),
            power_w: Set(500),
        }
        .insert(server.db())
        .await
        .expect("telemetry row");
    }
    let path = format!("/api/v1/admin/nodes/{node_id}/telemetry");
    let recent = server.get(&path, &operator.token).await;
    recent.expect(StatusCode::OK);
    let readings: Vec<i64> = recent
        .body
        .as_array()
        .expect("array")
        .iter()
        .map(|r| r["utilization_pct"].as_i64().unwrap_or(-1))
        .collect();
    assert_eq!(readings, vec![90, 95]);
    let longer = server
        .get(&format!("{path}?minutes=30"), &operator.token)
        .await;
    assert_eq!(longer.body.as_array().map(Vec::len), Some(3));
    for bad in ["0", "1441", "soon"] {
        server
            .get(&format!("{path}?minutes={bad}"), &operator.token)
            .await
            .expect(StatusCode::BAD_REQUEST);
    }
    server
        .get(
            &format!("/api/v1/admin/nodes/{}/telemetry", uuid::Uuid::now_v7()),
            &operator.token,
        )
        .await
        .expect_problem(StatusCode::NOT_FOUND, "node_not_found");

    // None of it is open to tenants.
    for route in ["/api/v1/admin/orders".to_owned(), path] {
        server
            .get(&route, &alpha.token)
            .await
            .expect_problem(StatusCode::FORBIDDEN, "forbidden");
    }
}

#[tokio::test]
async fn the_built_console_is_served_beside_the_api() {
    let dir =
        std::env::temp_dir().join(format!("gantry-console-{}", uuid::Uuid::now_v7().simple()));
    std::fs::create_dir_all(dir.join("assets")).expect("console dir");
    std::fs::write(
        dir.join("index.html"),
        "<!doctype html><title>Gantry</title>",
    )
    .expect("index");
    std::fs::write(
        dir.join("assets/app-1a2b3c.js"),
        "console.log('gantry')".repeat(50),
    )
    .expect("asset");
    let console_dir = dir.clone();
    let server = TestServer::start_with(Engine::Sqlite, move |config| {
        config.console_dir = console_dir
    })
    .await;

    // The app at `/` and at any console path, so reloads and links work.
    for path in ["/", "/orgs/0/orders", "/admin/capacity"] {
        let page = server
            .http
            .get(server.url(path))
            .send()
            .await
            .expect("page");
        assert_eq!(page.status(), StatusCode::OK, "{path}");
        assert_eq!(page.headers()[CACHE_CONTROL], "no-cache");
        let policy = page.headers()[CONTENT_SECURITY_POLICY]
            .to_str()
            .expect("policy");
        assert!(policy.starts_with("default-src 'self'"), "{policy}");
        assert!(
            page.text()
                .await
                .expect("body")
                .contains("<title>Gantry</title>")
        );
    }
    // Hashed assets are cached for good, and compressed when asked.
    let asset = server
        .http
        .get(server.url("/assets/app-1a2b3c.js"))
        .send()
        .await
        .expect("asset");
    assert_eq!(asset.status(), StatusCode::OK);
    assert!(
        asset.headers()[CACHE_CONTROL]
            .to_str()
            .expect("cache")
            .contains("immutable")
    );
    // The build writes a .gz beside each asset; browsers that take gzip get it.
    std::fs::write(dir.join("assets/app-1a2b3c.js.gz"), b"gzip bytes").expect("gz");
    let compressed = server
        .http
        .get(server.url("/assets/app-1a2b3c.js"))
        .header(ACCEPT_ENCODING, "gzip")
        .send()
        .await
        .expect("compressed asset");
    assert_eq!(compressed.headers()[CONTENT_ENCODING], "gzip");
    assert_eq!(
        compressed.bytes().await.expect("body").as_ref(),
        b"gzip bytes"
    );

    // The API keeps its own answers: unknown routes are problems, not pages.
    let unknown = server
        .http
        .get(server.url("/api/v1/no-such-route"))
        .send()
        .await
        .expect("unknown");
    assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
    assert_eq!(unknown.headers()[CONTENT_TYPE], "application/problem+json");
    let posted = server
        .http
        .post(server.url("/"))
        .send()
        .await
        .expect("post");
    assert_eq!(posted.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(posted.headers()[CONTENT_TYPE], "application/problem+json");
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test]
async fn without_a_built_console_only_the_api_answers() {
    let server = TestServer::start_with(Engine::Sqlite, |config| {
        config.console_dir = std::env::temp_dir().join("gantry-no-console-here");
    })
    .await;
    let root = server.http.get(server.url("/")).send().await.expect("root");
    assert_eq!(root.status(), StatusCode::NOT_FOUND);
    assert_eq!(root.headers()[CONTENT_TYPE], "application/problem+json");
}

#[tokio::test]
async fn the_built_manual_is_served_at_docs() {
    let dir = std::env::temp_dir().join(format!("gantry-docs-{}", uuid::Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).expect("docs dir");
    std::fs::write(
        dir.join("index.html"),
        "<title>Gantry</title><a href=\"jobs.html\">Jobs</a>",
    )
    .expect("index");
    std::fs::write(dir.join("jobs.html"), "<h1>Jobs</h1>").expect("page");
    let docs_dir = dir.clone();
    let server = TestServer::start_with(Engine::Sqlite, move |config| {
        config.docs_dir = docs_dir;
    })
    .await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    // `/docs` is sent to `/docs/`, where the book's relative links resolve.
    let bare = client.get(server.url("/docs")).send().await.expect("bare");
    assert_eq!(bare.status(), StatusCode::PERMANENT_REDIRECT);
    assert_eq!(bare.headers()["location"], "/docs/");
    for (path, text) in [
        ("/docs/", "<title>Gantry</title>"),
        ("/docs/jobs.html", "<h1>Jobs</h1>"),
    ] {
        let page = client.get(server.url(path)).send().await.expect("page");
        assert_eq!(page.status(), StatusCode::OK, "{path}");
        assert!(page.text().await.expect("body").contains(text), "{path}");
    }
    let missing = client
        .get(server.url("/docs/no-such-page.html"))
        .send()
        .await
        .expect("missing");
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    std::fs::remove_dir_all(&dir).ok();
}
