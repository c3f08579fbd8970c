//! Invitations: an admin invites an email that has no account; signing up
//! with it joins the organization with the invited role. Invitations are
//! the organization's own, used once, revocable, and refused for emails
//! that already have an account.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::support::{Engine, TestServer};

crate::on_both_engines!(
    an_invited_email_joins_with_its_role_on_sign_up,
    an_invited_email_may_sign_up_without_an_organization_of_its_own,
    invitations_are_the_organizations_own_and_refuse_bad_input,
);

async fn sign_up(server: &TestServer, email: &str) -> Value {
    let reply = server
        .call(
            Method::POST,
            "/api/v1/auth/signup",
            None,
            Some(
                json!({ "email": email, "password": crate::support::PASSWORD,
                         "name": "Carol", "organization": "Carol's own" }),
            ),
        )
        .await;
    reply.expect(StatusCode::CREATED);
    reply.body.clone()
}

async fn an_invited_email_may_sign_up_without_an_organization_of_its_own(engine: Engine) {
    let server = TestServer::start(engine).await;
    let owner = server.signup("owner").await;
    // The same sign-up, without an organization of its own, twice.
    let sign_up = || {
        server.call(
            Method::POST,
            "/api/v1/auth/signup",
            None,
            Some(json!({ "email": "dan@example.com", "password": crate::support::PASSWORD, "name": "Dan" })),
        )
    };
    // Not invited: the organization is required, and nothing is created.
    let refused = sign_up().await;
    refused.expect(StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(refused.body["errors"][0]["field"], "organization");
    server
        .post(
            &format!("/api/v1/orgs/{}/invitations", owner.org_id),
            &owner.token,
            json!({ "email": "dan@example.com", "role": "viewer" }),
        )
        .await
        .expect(StatusCode::CREATED);
    // Invited: the same sign-up joins, owns nothing, and lands in the
    // organization that invited it.
    let joined = sign_up().await;
    joined.expect(StatusCode::CREATED);
    assert_eq!(joined.body["organization"]["id"], json!(owner.org_id));
    let token = joined.body["access_token"].as_str().expect("token");
    let me = server.get("/api/v1/me", token).await;
    assert_eq!(
        me.body["memberships"],
        json!([{ "organization": me.body["memberships"][0]["organization"], "role": "viewer" }])
    );
    assert_eq!(
        me.body["memberships"][0]["organization"]["id"],
        json!(owner.org_id)
    );
}

async fn an_invited_email_joins_with_its_role_on_sign_up(engine: Engine) {
    let server = TestServer::start(engine).await;
    let owner = server.signup("owner").await;
    let invitations = format!("/api/v1/orgs/{}/invitations", owner.org_id);
    let invited = server
        .post(
            &invitations,
            &owner.token,
            json!({ "email": "Carol@Example.com", "role": "member" }),
        )
        .await;
    invited.expect(StatusCode::CREATED);
    assert_eq!(invited.body["email"], "carol@example.com");
    let pending = server.get(&invitations, &owner.token).await;
    assert_eq!(pending.body.as_array().map(Vec::len), Some(1));

    let carol = sign_up(&server, "carol@example.com").await;
    let token = carol["access_token"].as_str().expect("token");
    let me = server.get("/api/v1/me", token).await;
    let mut roles: Vec<(String, String)> = me.body["memberships"]
        .as_array()
        .expect("memberships")
        .iter()
        .map(|m| {
            (
                m["organization"]["id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                m["role"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    roles.sort();
    let mut expected = vec![
        (owner.org_id.to_string(), "member".to_owned()),
        (
            carol["organization"]["id"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            "owner".to_owned(),
        ),
    ];
    expected.sort();
    assert_eq!(roles, expected);
    // Used once: nothing pending, and the owner's log says who joined.
    let pending = server.get(&invitations, &owner.token).await;
    assert_eq!(pending.body, json!([]));
    let log = server
        .get(
            &format!("/api/v1/orgs/{}/audit-log", owner.org_id),
            &owner.token,
        )
        .await;
    assert!(
        log.items()
            .iter()
            .any(|e| e["action"] == "invitation.accept" && e["actor_email"] == "carol@example.com"),
        "{:#}",
        log.body
    );
    // The new member works in the organization at once.
    server
        .get(&format!("/api/v1/orgs/{}/orders", owner.org_id), token)
        .await
        .expect(StatusCode::OK);
}

async fn invitations_are_the_organizations_own_and_refuse_bad_input(engine: Engine) {
    let server = TestServer::start(engine).await;
    let owner = server.signup("owner").await;
    let stranger = server.signup("stranger").await;
    let viewer = server.member_of(&owner, "viewer", "viewer").await;
    let invitations = format!("/api/v1/orgs/{}/invitations", owner.org_id);
    let dave = server
        .post(
            &invitations,
            &owner.token,
            json!({ "email": "dave@example.com", "role": "admin" }),
        )
        .await;
    dave.expect(StatusCode::CREATED);
    let dave_id = dave.body["id"].as_str().expect("id").to_owned();

    let before = server.count("SELECT COUNT(*) FROM invitations").await;
    for (body, status, code) in [
        (
            json!({ "email": "dave@example.com", "role": "member" }),
            StatusCode::CONFLICT,
            "already_invited",
        ),
        (
            json!({ "email": stranger.email, "role": "member" }),
            StatusCode::CONFLICT,
            "user_exists",
        ),
        (
            json!({ "email": "not an email", "role": "member" }),
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation_failed",
        ),
        (
            json!({ "email": "x@example.com", "role": "emperor" }),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_body",
        ),
        (
            json!({ "email": "x@example.com" }),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_body",
        ),
    ] {
        server
            .post(&invitations, &owner.token, body)
            .await
            .expect_problem(status, code);
    }
    // A viewer may not invite; another tenant sees no such organization.
    server
        .post(
            &invitations,
            &viewer.token,
            json!({ "email": "x@example.com", "role": "member" }),
        )
        .await
        .expect_problem(StatusCode::FORBIDDEN, "forbidden");
    server
        .get(&invitations, &stranger.token)
        .await
        .expect_problem(StatusCode::NOT_FOUND, "organization_not_found");
    server
        .delete(
            &format!("/api/v1/orgs/{}/invitations/{dave_id}", stranger.org_id),
            &stranger.token,
        )
        .await
        .expect_problem(StatusCode::NOT_FOUND, "invitation_not_found");
    assert_eq!(
        server.count("SELECT COUNT(*) FROM invitations").await,
        before
    );

    // Revoked, the invitation joins nobody.
    server
        .delete(&format!("{invitations}/{dave_id}"), &owner.token)
        .await
        .expect(StatusCode::NO_CONTENT);
    server
        .delete(&format!("{invitations}/{dave_id}"), &owner.token)
        .await
        .expect_problem(StatusCode::NOT_FOUND, "invitation_not_found");
    let dave = sign_up(&server, "dave@example.com").await;
    let me = server
        .get("/api/v1/me", dave["access_token"].as_str().expect("token"))
        .await;
    assert_eq!(me.body["memberships"].as_array().map(Vec::len), Some(1));
}
