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

/// Every `$ref` names a schema the document holds; a dangling one breaks
/// client generators (the console's among them).
#[test]
fn every_reference_resolves() {
    fn refs<'a>(value: &'a serde_json::Value, found: &mut Vec<&'a str>) {
        match value {
            serde_json::Value::Object(map) => {
                if let Some(serde_json::Value::String(target)) = map.get("$ref") {
                    found.push(target);
                }
                map.values().for_each(|v| refs(v, found));
            }
            serde_json::Value::Array(items) => items.iter().for_each(|v| refs(v, found)),
            _ => {}
        }
    }
    let document: serde_json::Value = serde_json::from_str(COMMITTED).expect("committed json");
    let mut found = Vec::new();
    refs(&document, &mut found);
    assert!(!found.is_empty());
    let dangling: Vec<&str> = found
        .into_iter()
        .filter(|target| {
            let pointer = target.strip_prefix('#').unwrap_or(target);
            document.pointer(pointer).is_none()
        })
        .collect();
    assert!(dangling.is_empty(), "dangling references: {dangling:?}");
}
