//! The committed OpenAPI document is the contract: it must equal what the
//! code generates and what the server serves.

use reqwest::StatusCode;

use crate::support::{Engine, TestServer};

const COMMITTED: &str = include_str!("../../openapi/openapi.json");

#[test]
fn committed_document_matches_the_code() {
    let generated = gantry_server::openapi::to_committed_json().expect("document");
    assert!(
        generated == COMMITTED,
        "openapi/openapi.json is out of date with the code; regenerate it with \
         `cargo run -p gantry-server --bin gantry -- openapi > openapi/openapi.json`"
    );
}

#[tokio::test]
async fn served_document_matches_the_committed_one() {
    let server = TestServer::start(Engine::Sqlite).await;
    let served = server
        .http
        .get(server.url("/api/v1/openapi.json"))
        .send()
        .await
        .expect("openapi");
    assert_eq!(served.status(), StatusCode::OK);
    let served: serde_json::Value = served.json().await.expect("json");
    let committed: serde_json::Value = serde_json::from_str(COMMITTED).expect("committed json");
    assert_eq!(served, committed);
    assert_eq!(served["openapi"], "3.1.0");
}
