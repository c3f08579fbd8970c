//! Behind a proxy: `X-Forwarded-For` names the client in audit rows and
//! rate limits only when the connection comes from a configured proxy.

use reqwest::StatusCode;
use serde_json::json;

use crate::support::{Engine, PASSWORD, TestServer};

crate::on_both_engines!(forwarded_addresses_are_believed_only_from_trusted_proxies);

/// Signs up through a "proxy" that forwards `chain`, and answers the source
/// address the audit log recorded for the new organization.
async fn recorded_source(server: &TestServer, chain: &str) -> String {
    let email = format!("p-{}@example.com", uuid::Uuid::new_v4().simple());
    let reply = server
        .http
        .post(server.url("/api/v1/auth/signup"))
        .header("x-forwarded-for", chain)
        .json(
            &json!({ "email": email, "password": PASSWORD, "name": "P", "organization": "P org" }),
        )
        .send()
        .await
        .expect("sign up");
    assert_eq!(reply.status(), StatusCode::CREATED);
    let body: serde_json::Value = reply.json().await.expect("json");
    let org = body["organization"]["id"].as_str().expect("org");
    let token = body["access_token"].as_str().expect("token");
    let log = server
        .get(&format!("/api/v1/orgs/{org}/audit-log"), token)
        .await;
    log.expect(StatusCode::OK);
    let sources: Vec<&str> = log
        .items()
        .iter()
        .filter_map(|row| row["source_address"].as_str())
        .collect();
    assert!(!sources.is_empty(), "{:#}", log.body);
    assert!(sources.iter().all(|s| *s == sources[0]), "{sources:?}");
    sources[0].to_owned()
}

async fn forwarded_addresses_are_believed_only_from_trusted_proxies(engine: Engine) {
    let direct = TestServer::start(engine).await;
    assert_eq!(recorded_source(&direct, "203.0.113.7").await, "127.0.0.1");

    let proxied = TestServer::start_with(engine, |config| {
        config.trusted_proxies = vec!["127.0.0.0/8".into()];
    })
    .await;
    assert_eq!(
        recorded_source(&proxied, "203.0.113.7").await,
        "203.0.113.7"
    );
    // What a client wrote itself, left of what the proxy added, is ignored.
    assert_eq!(
        recorded_source(&proxied, "198.51.100.1, 203.0.113.7").await,
        "203.0.113.7"
    );

    // Failed credentials are counted per forwarded client: one client
    // refused for bad tokens leaves another behind the same proxy alone.
    let bad = |from: &'static str| {
        proxied
            .http
            .get(proxied.url("/api/v1/me"))
            .bearer_auth("not-a-token")
            .header("x-forwarded-for", from)
            .send()
    };
    let mut refused = false;
    for _ in 0..200 {
        if bad("203.0.113.66").await.expect("request").status() == StatusCode::TOO_MANY_REQUESTS {
            refused = true;
            break;
        }
    }
    assert!(refused, "a client sending bad tokens is refused in the end");
    assert_eq!(
        bad("203.0.113.67").await.expect("request").status(),
        StatusCode::UNAUTHORIZED
    );
}
