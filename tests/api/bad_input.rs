//! Bad input gets the right 4xx problem, never a 5xx, and changes nothing.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::support::{Engine, JWT_SECRET, PASSWORD, TestServer};

crate::on_both_engines!(
    malformed_bodies,
    invalid_account_data,
    bad_credentials_and_tokens,
    bad_paths_and_parameters
);

fn session_token(secret: &str, sub: &str, issued: i64, expires: i64) -> String {
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &json!({ "sub": sub, "iss": "gantry", "iat": issued, "exp": expires }),
        &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()).expect("key"),
    )
    .expect("token")
}

/// Sends a raw body with a content type and returns the reply.
pub(crate) async fn raw(
    server: &TestServer,
    path: &str,
    token: Option<&str>,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> crate::support::Reply {
    let mut request = server.http.post(server.url(path)).body(body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(content_type) = content_type {
        request = request.header("content-type", content_type);
    }
    crate::support::Reply::from_response(request.send().await.expect("send")).await
}

/// Posts a 300 KiB JSON body over a raw connection. The server answers 413
/// from the headers alone and closes the connection while the body is still
/// being written; an HTTP client library reports that as a broken pipe, so
/// this writes what it can and then reads the answer.
async fn oversize(server: &TestServer, path: &str, token: Option<&str>) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let body = format!("{{\"name\": \"{}\"}}", "x".repeat(300 * 1024));
    let authorization = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let address = server.base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(address)
        .await
        .expect("connect");
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {address}\r\n{authorization}Content-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.expect("write head");
    stream.write_all(body.as_bytes()).await.ok();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.ok();
    let response = String::from_utf8_lossy(&response);
    assert!(response.starts_with("HTTP/1.1 413"), "{response}");
    assert!(
        response
            .to_ascii_lowercase()
            .contains("content-type: application/problem+json"),
        "{response}"
    );
    assert!(
        response.contains("\"code\":\"payload_too_large\""),
        "{response}"
    );
}

async fn malformed_bodies(engine: Engine) {
    let server = TestServer::start(engine).await;
    let alice = server.signup("alice").await;
    let projects = format!("/api/v1/orgs/{}/projects", alice.org_id);
    let before = server.table_counts().await;
    let json_type = Some("application/json");

    for (path, token) in [
        ("/api/v1/auth/signup", None),
        (projects.as_str(), Some(alice.token.as_str())),
    ] {
        raw(&server, path, token, json_type, b"{\"name\": ".to_vec())
            .await
            .expect_problem(StatusCode::BAD_REQUEST, "malformed_json");
        raw(
            &server,
            path,
            token,
            json_type,
            b"{\"name\": \"x\",}".to_vec(),
        )
        .await
        .expect_problem(StatusCode::BAD_REQUEST, "malformed_json");
        raw(&server, path, token, None, b"{\"name\": \"x\"}".to_vec())
            .await
            .expect_problem(StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type");
        raw(
            &server,
            path,
            token,
            Some("text/plain"),
            b"{\"name\": \"x\"}".to_vec(),
        )
        .await
        .expect_problem(StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type");
        oversize(&server, path, token).await;
    }

    let signup = |body: serde_json::Value| {
        server.call(Method::POST, "/api/v1/auth/signup", None, Some(body))
    };
    // Wrong types, missing fields, unknown fields.
    signup(json!({ "email": 5, "password": PASSWORD, "name": "a", "organization": "b" }))
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "invalid_body");
    signup(json!({ "email": "a@example.com", "password": PASSWORD, "organization": "b" }))
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "invalid_body");
    // Without an organization only an invited email may sign up.
    signup(json!({ "email": "a@example.com", "password": PASSWORD, "name": "a" }))
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    signup(json!({ "email": "a@example.com", "password": PASSWORD, "name": "a", "organization": "b", "is_operator": true }))
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "invalid_body");
    signup(json!("just a string"))
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "invalid_body");
    server
        .post(&projects, &alice.token, json!({ "name": ["list"] }))
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "invalid_body");
    server
        .post(
            &format!("/api/v1/orgs/{}/members", alice.org_id),
            &alice.token,
            json!({ "email": alice.email, "role": "god" }),
        )
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "invalid_body");

    // Empty and over-long names, bad key settings.
    let invalid = server
        .post(
            &projects,
            &alice.token,
            json!({ "name": "   ", "description": "d".repeat(1001) }),
        )
        .await;
    invalid.expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    let fields: Vec<&str> = invalid.body["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .filter_map(|e| e["field"].as_str())
        .collect();
    assert_eq!(fields, ["name", "description"]);
    let keys = format!("/api/v1/orgs/{}/api-keys", alice.org_id);
    server
        .post(&keys, &alice.token, json!({ "name": "k", "role": "owner" }))
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    server
        .post(
            &keys,
            &alice.token,
            json!({ "name": "k", "role": "member", "expires_at": "2001-01-01T00:00:00Z" }),
        )
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    server
        .post(
            &keys,
            &alice.token,
            json!({ "name": "k", "role": "member", "expires_at": "next tuesday" }),
        )
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "invalid_body");
    server
        .patch(
            &format!("/api/v1/orgs/{}", alice.org_id),
            &alice.token,
            json!({ "name": "" }),
        )
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");

    let too_long_key = server
        .keyed_post(
            &projects,
            &alice.token,
            &"k".repeat(300),
            &json!({ "name": "never" }),
        )
        .send()
        .await
        .expect("send");
    crate::support::Reply::from_response(too_long_key)
        .await
        .expect_problem(StatusCode::BAD_REQUEST, "invalid_idempotency_key");

    assert_eq!(server.table_counts().await, before);
}

async fn invalid_account_data(engine: Engine) {
    let server = TestServer::start(engine).await;
    let alice = server.signup("alice").await;
    let before = server.table_counts().await;
    let signup = |email: &str, password: &str| {
        server.call(
            Method::POST,
            "/api/v1/auth/signup",
            None,
            Some(json!({ "email": email, "password": password, "name": "n", "organization": "o" })),
        )
    };

    for email in [
        "not-an-email",
        "a@",
        "@example.com",
        "a b@example.com",
        "a@localhost",
    ] {
        let reply = signup(email, PASSWORD).await;
        reply.expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
        assert_eq!(reply.body["errors"][0]["field"], "email", "{email}");
    }
    for password in [
        "short",
        "aaaaaaaaaaaaaaa",
        "password12345",
        &"long enough ".repeat(12),
    ] {
        let reply = signup("new@example.com", password).await;
        reply.expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
        assert_eq!(reply.body["errors"][0]["field"], "password", "{password}");
    }
    signup(&alice.email, PASSWORD)
        .await
        .expect_problem(StatusCode::CONFLICT, "email_taken");
    signup(&alice.email.to_uppercase(), PASSWORD)
        .await
        .expect_problem(StatusCode::CONFLICT, "email_taken");

    assert_eq!(server.table_counts().await, before);
}

async fn bad_credentials_and_tokens(engine: Engine) {
    // Without the identity cache, so every check reads the database.
    let server = TestServer::start_with(engine, |c| c.auth_cache_seconds = 0).await;
    let alice = server.signup("alice").await;
    let (key_id, key) = server.api_key(&alice, "member").await;
    let (expiring_id, expiring) = server.api_key(&alice, "viewer").await;
    sea_orm::ActiveModelTrait::update(
        gantry_entities::api_key::ActiveModel {
            id: sea_orm::Set(expiring_id),
            expires_at: sea_orm::Set(Some(chrono::Utc::now() - chrono::Duration::seconds(1))),
            ..Default::default()
        },
        server.db(),
    )
    .await
    .expect("expire the key");
    server
        .delete(
            &format!("/api/v1/orgs/{}/api-keys/{key_id}", alice.org_id),
            &alice.token,
        )
        .await
        .expect(StatusCode::NO_CONTENT);
    let before = server.table_counts().await;

    let login = |email: &str, password: &str| {
        server.call(
            Method::POST,
            "/api/v1/auth/login",
            None,
            Some(json!({ "email": email, "password": password })),
        )
    };
    login(&alice.email, "wrong horse battery staple")
        .await
        .expect_problem(StatusCode::UNAUTHORIZED, "invalid_credentials");
    login("nobody@example.com", PASSWORD)
        .await
        .expect_problem(StatusCode::UNAUTHORIZED, "invalid_credentials");
    login("not an email", PASSWORD)
        .await
        .expect_problem(StatusCode::UNAUTHORIZED, "invalid_credentials");

    let now = chrono::Utc::now().timestamp();
    let sub = alice.user_id.to_string();
    let expired = session_token(JWT_SECRET, &sub, now - 3600, now - 1);
    let forged = session_token(
        "another-secret-0123456789abcdef0123456789",
        &sub,
        now,
        now + 600,
    );
    let none_alg = format!(
        "{}.{}.",
        URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"JWT"}"#),
        URL_SAFE_NO_PAD.encode(
            json!({ "sub": sub, "iss": "gantry", "iat": now, "exp": now + 600 }).to_string()
        )
    );
    let tampered = {
        let valid = session_token(JWT_SECRET, &sub, now, now + 600);
        let mut parts: Vec<String> = valid.split('.').map(str::to_owned).collect();
        parts[1] = URL_SAFE_NO_PAD.encode(
            json!({ "sub": uuid::Uuid::new_v4(), "iss": "gantry", "iat": now, "exp": now + 600 })
                .to_string(),
        );
        parts.join(".")
    };
    let wrong_issuer = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &json!({ "sub": sub, "iss": "someone-else", "iat": now, "exp": now + 600 }),
        &jsonwebtoken::EncodingKey::from_secret(JWT_SECRET.as_bytes()).expect("key"),
    )
    .expect("token");
    let server = &server;
    let me = |token: String| async move { server.get("/api/v1/me", &token).await };
    me(expired)
        .await
        .expect_problem(StatusCode::UNAUTHORIZED, "token_expired");
    for token in [
        forged,
        none_alg,
        tampered,
        wrong_issuer,
        "garbage".to_owned(),
    ] {
        me(token)
            .await
            .expect_problem(StatusCode::UNAUTHORIZED, "invalid_token");
    }
    me(key)
        .await
        .expect_problem(StatusCode::UNAUTHORIZED, "api_key_revoked");
    me(expiring)
        .await
        .expect_problem(StatusCode::UNAUTHORIZED, "api_key_expired");
    me(format!(
        "gk_{}_{}",
        uuid::Uuid::new_v4().simple(),
        "A".repeat(43)
    ))
    .await
    .expect_problem(StatusCode::UNAUTHORIZED, "invalid_api_key");
    me("gk_short".to_owned())
        .await
        .expect_problem(StatusCode::UNAUTHORIZED, "invalid_api_key");

    server
        .call(Method::GET, "/api/v1/me", None, None)
        .await
        .expect_problem(StatusCode::UNAUTHORIZED, "unauthenticated");
    let basic = server
        .http
        .get(server.url("/api/v1/me"))
        .header("authorization", "Basic YWxpY2U6cGFzc3dvcmQ=")
        .send()
        .await
        .expect("send");
    crate::support::Reply::from_response(basic)
        .await
        .expect_problem(StatusCode::UNAUTHORIZED, "invalid_authorization");

    // A token for a user that does not exist.
    let ghost = session_token(
        JWT_SECRET,
        &uuid::Uuid::new_v4().to_string(),
        now,
        now + 600,
    );
    me(ghost)
        .await
        .expect_problem(StatusCode::UNAUTHORIZED, "invalid_token");

    // Nothing changed but the audit log, which records the three failed
    // sign-ins and nothing else.
    let audit = |counts: Vec<(String, i64)>| {
        let (audit, rest): (Vec<_>, Vec<_>) =
            counts.into_iter().partition(|(t, _)| t == "audit_log");
        (audit.first().map_or(0, |(_, n)| *n), rest)
    };
    let (audit_before, rest_before) = audit(before);
    let (audit_after, rest_after) = audit(server.table_counts().await);
    assert_eq!(rest_after, rest_before);
    assert_eq!(audit_after - audit_before, 3);
    assert_eq!(
        server
            .count("SELECT COUNT(*) FROM audit_log WHERE action = 'user.login_failed'")
            .await,
        3
    );
}

async fn bad_paths_and_parameters(engine: Engine) {
    let server = TestServer::start(engine).await;
    let alice = server.signup("alice").await;
    let before = server.table_counts().await;
    let org = format!("/api/v1/orgs/{}", alice.org_id);

    server
        .get("/api/v1/orgs/not-a-uuid", &alice.token)
        .await
        .expect_problem(StatusCode::NOT_FOUND, "organization_not_found");
    server
        .get(
            &format!("/api/v1/orgs/{}", uuid::Uuid::new_v4()),
            &alice.token,
        )
        .await
        .expect_problem(StatusCode::NOT_FOUND, "organization_not_found");
    server
        .get(&format!("{org}/projects/nope"), &alice.token)
        .await
        .expect_problem(StatusCode::NOT_FOUND, "project_not_found");
    server
        .delete(
            &format!("{org}/api-keys/{}", uuid::Uuid::new_v4()),
            &alice.token,
        )
        .await
        .expect_problem(StatusCode::NOT_FOUND, "api_key_not_found");
    server
        .get(&format!("{org}/projects?cursor=%%%"), &alice.token)
        .await
        .expect_problem(StatusCode::BAD_REQUEST, "invalid_cursor");
    server
        .get(&format!("{org}/projects?limit=0"), &alice.token)
        .await
        .expect_problem(StatusCode::BAD_REQUEST, "invalid_limit");
    server
        .get(&format!("{org}/projects?limit=500"), &alice.token)
        .await
        .expect_problem(StatusCode::BAD_REQUEST, "invalid_limit");
    server
        .get(&format!("{org}/projects?limit=ten"), &alice.token)
        .await
        .expect_problem(StatusCode::BAD_REQUEST, "invalid_query");
    server
        .get("/api/v1/no-such-route", &alice.token)
        .await
        .expect_problem(StatusCode::NOT_FOUND, "route_not_found");
    server
        .call(Method::PUT, &org, Some(&alice.token), Some(json!({})))
        .await
        .expect_problem(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed");

    assert_eq!(server.table_counts().await, before);
}
