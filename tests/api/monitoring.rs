//! `/metrics` on the main listener: it names tenants, so it answers only
//! to the configured scrape token, and not at all without one.

use reqwest::{Method, StatusCode};

use crate::support::{Engine, TestServer};

crate::on_both_engines!(metrics_on_the_main_listener_need_the_scrape_token);

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
