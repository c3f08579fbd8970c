//! Browser sessions: the refresh token in an httpOnly cookie renews the
//! short access token, is used once, and a reused one ends the whole
//! sign-in; signing out and changing the password end sessions; a missing,
//! forged, expired or revoked cookie is a 401 problem, never a 500.

use chrono::TimeDelta;
use reqwest::StatusCode;
use serde_json::json;

use crate::support::{Engine, Reply, TestServer};

crate::on_both_engines!(
    a_refresh_token_renews_the_session_once_and_reuse_ends_it,
    signing_out_and_changing_the_password_end_sessions,
    refreshing_without_a_valid_cookie_is_refused,
);

const PASSWORD: &str = "correct horse battery staple";

/// The refresh token a reply's `Set-Cookie` carries (empty when cleared).
fn refresh_cookie(reply: &Reply) -> String {
    let header = reply
        .headers
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("gantry_refresh="))
        .unwrap_or_else(|| panic!("a refresh cookie: {:?}", reply.headers))
        .to_owned();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/api/v1/auth"] {
        assert!(header.contains(attribute), "{header} lacks {attribute}");
    }
    header
        .trim_start_matches("gantry_refresh=")
        .split(';')
        .next()
        .unwrap_or_default()
        .to_owned()
}

async fn with_cookie(server: &TestServer, path: &str, cookie: &str) -> Reply {
    let response = server
        .http
        .post(server.url(path))
        .header("cookie", format!("gantry_refresh={cookie}"))
        .send()
        .await
        .expect("request");
    Reply::from_response(response).await
}

async fn refresh(server: &TestServer, cookie: &str) -> Reply {
    with_cookie(server, "/api/v1/auth/refresh", cookie).await
}

/// A new user, signed in: the login reply.
async fn signed_in(server: &TestServer, label: &str) -> (String, Reply) {
    let email = format!("{label}-{}@example.com", uuid::Uuid::new_v4().simple());
    server
        .call(
            reqwest::Method::POST,
            "/api/v1/auth/signup",
            None,
            Some(json!({ "email": email, "password": PASSWORD, "name": label, "organization": label })),
        )
        .await
        .expect(StatusCode::CREATED);
    let login = server.login(&email, PASSWORD).await;
    login.expect(StatusCode::OK);
    (email, login)
}

async fn a_refresh_token_renews_the_session_once_and_reuse_ends_it(engine: Engine) {
    let server = TestServer::start(engine).await;
    let (email, login) = signed_in(&server, "renewer").await;
    let first = refresh_cookie(&login);

    let renewed = refresh(&server, &first).await;
    renewed.expect(StatusCode::OK);
    let token = renewed.body["access_token"]
        .as_str()
        .expect("token")
        .to_owned();
    server
        .get("/api/v1/me", &token)
        .await
        .expect(StatusCode::OK);
    let second = refresh_cookie(&renewed);
    assert_ne!(first, second, "the refresh token rotates");
    let third = refresh_cookie(refresh(&server, &second).await.expect(StatusCode::OK));

    // The first token again: someone holds a copy. The whole sign-in ends,
    // the newest token too, and the audit log says so.
    refresh(&server, &first)
        .await
        .expect_problem(StatusCode::UNAUTHORIZED, "session_ended");
    refresh(&server, &third)
        .await
        .expect_problem(StatusCode::UNAUTHORIZED, "session_ended");
    assert_eq!(
        server
            .count("SELECT COUNT(*) FROM audit_log WHERE action = 'session.refresh_reused'")
            .await,
        1
    );

    // Another sign-in of the same user is not touched.
    let other = refresh_cookie(&server.login(&email, PASSWORD).await);
    refresh(&server, &other).await.expect(StatusCode::OK);

    // An unused session expires with its refresh token.
    let idle = refresh_cookie(&server.login(&email, PASSWORD).await);
    server.state.clock.advance(TimeDelta::seconds(
        i64::try_from(server.state.config.refresh_ttl_seconds).expect("ttl") + 1,
    ));
    refresh(&server, &idle)
        .await
        .expect_problem(StatusCode::UNAUTHORIZED, "session_ended");
}

async fn signing_out_and_changing_the_password_end_sessions(engine: Engine) {
    let server = TestServer::start(engine).await;
    let (email, login) = signed_in(&server, "leaver").await;
    let cookie = refresh_cookie(&login);
    let out = with_cookie(&server, "/api/v1/auth/logout", &cookie).await;
    out.expect(StatusCode::NO_CONTENT);
    assert_eq!(refresh_cookie(&out), "", "the cookie is cleared");
    refresh(&server, &cookie)
        .await
        .expect_problem(StatusCode::UNAUTHORIZED, "session_ended");

    // Two sessions; a password change ends both.
    let laptop = server.login(&email, PASSWORD).await;
    let phone = refresh_cookie(&server.login(&email, PASSWORD).await);
    let token = laptop.body["access_token"]
        .as_str()
        .expect("token")
        .to_owned();
    let laptop = refresh_cookie(&laptop);
    let change =
        |current: &str, new: &str| json!({ "current_password": current, "new_password": new });
    server
        .post(
            "/api/v1/me/password",
            &token,
            change("not my password", "a brand new passphrase"),
        )
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "wrong_password");
    server
        .post("/api/v1/me/password", &token, change(PASSWORD, "short"))
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    let phone = refresh_cookie(&refresh(&server, &phone).await);
    let laptop = refresh_cookie(&refresh(&server, &laptop).await);
    server
        .post(
            "/api/v1/me/password",
            &token,
            change(PASSWORD, "a brand new passphrase"),
        )
        .await
        .expect(StatusCode::NO_CONTENT);
    for session in [phone, laptop] {
        refresh(&server, &session)
            .await
            .expect_problem(StatusCode::UNAUTHORIZED, "session_ended");
    }
    server
        .login(&email, PASSWORD)
        .await
        .expect_problem(StatusCode::UNAUTHORIZED, "invalid_credentials");
    server
        .login(&email, "a brand new passphrase")
        .await
        .expect(StatusCode::OK);
}

async fn refreshing_without_a_valid_cookie_is_refused(engine: Engine) {
    let server = TestServer::start(engine).await;
    let bare = server
        .call(reqwest::Method::POST, "/api/v1/auth/refresh", None, None)
        .await;
    bare.expect_problem(StatusCode::UNAUTHORIZED, "session_ended");
    for forged in ["x", "AAAA", &"A".repeat(4096), "%00%ff"] {
        refresh(&server, forged)
            .await
            .expect_problem(StatusCode::UNAUTHORIZED, "session_ended");
    }
    // Signing out without a session is harmless.
    with_cookie(&server, "/api/v1/auth/logout", "nothing")
        .await
        .expect(StatusCode::NO_CONTENT);
}
