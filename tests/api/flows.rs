//! The main paths through the API, end to end.

use reqwest::{Method, StatusCode};
use sea_orm::{ConnectionTrait, Statement};
use serde_json::json;

use crate::support::{Engine, PASSWORD, TestServer};

crate::on_both_engines!(
    signup_login_me_and_api_key,
    organizations_members_and_the_last_owner,
    projects_crud_and_cursor_pagination,
    audit_log_records_who_what_where,
    idempotent_creation,
    operators_and_the_admin_api,
    health_request_ids_and_cors_off,
    rate_limits_per_caller,
    replicas_see_changes_within_the_cache_bound,
    concurrent_retries_and_owner_changes_stay_consistent,
    failed_sign_ins_refuse_the_address_for_a_while,
);

async fn signup_login_me_and_api_key(engine: Engine) {
    let server = TestServer::start(engine).await;
    let alice = server.signup("alice").await;

    let login = server.login(&alice.email.to_uppercase(), PASSWORD).await;
    login.expect(StatusCode::OK);
    assert_eq!(login.body["token_type"], "Bearer");
    assert_eq!(login.body["expires_in"], 900);
    let token = login.str("/access_token");

    let me = server.get("/api/v1/me", &token).await;
    me.expect(StatusCode::OK);
    assert_eq!(me.body["user"]["id"], alice.user_id.to_string());
    assert_eq!(me.body["user"]["email"], alice.email);
    assert!(me.body["user"].get("password_hash").is_none());
    assert_eq!(me.body["user"]["has_password"], true);
    assert_eq!(
        me.body["memberships"][0]["organization"]["id"],
        alice.org_id.to_string()
    );
    assert_eq!(me.body["memberships"][0]["role"], "owner");

    let (key_id, secret) = server.api_key(&alice, "member").await;
    assert!(secret.starts_with("gk_"));
    let as_key = server.get("/api/v1/me", &secret).await;
    as_key.expect(StatusCode::OK);
    assert_eq!(as_key.body["user"], serde_json::Value::Null);
    assert_eq!(as_key.body["api_key"]["id"], key_id.to_string());
    assert_eq!(as_key.body["memberships"][0]["role"], "member");

    // The secret is stored only as a hash, and lists never show it.
    let stored = server
        .db()
        .query_one_raw(Statement::from_string(
            server.db().get_database_backend(),
            "SELECT secret_hash FROM api_keys".to_owned(),
        ))
        .await
        .expect("query")
        .expect("row");
    let hash: String = stored.try_get("", "secret_hash").expect("hash");
    assert!(!secret.contains(&hash) && hash.len() == 64);
    let keys = server
        .get(
            &format!("/api/v1/orgs/{}/api-keys", alice.org_id),
            &alice.token,
        )
        .await;
    keys.expect(StatusCode::OK);
    assert!(!keys.body.to_string().contains(&secret[10..]));

    // Use records last-used time (asynchronously, to the minute).
    server
        .get(&format!("/api/v1/orgs/{}/projects", alice.org_id), &secret)
        .await
        .expect(StatusCode::OK);
    let mut last_used = serde_json::Value::Null;
    for _ in 0..250 {
        let keys = server
            .get(
                &format!("/api/v1/orgs/{}/api-keys", alice.org_id),
                &alice.token,
            )
            .await;
        last_used = keys.items()[0]["last_used_at"].clone();
        if !last_used.is_null() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(last_used.is_string(), "last_used_at was never recorded");

    // An API key acts inside its organization only, and not on user routes.
    server
        .get("/api/v1/orgs", &secret)
        .await
        .expect_problem(StatusCode::FORBIDDEN, "forbidden");

    server
        .delete(
            &format!("/api/v1/orgs/{}/api-keys/{key_id}", alice.org_id),
            &alice.token,
        )
        .await
        .expect(StatusCode::NO_CONTENT);
    server
        .get("/api/v1/me", &secret)
        .await
        .expect_problem(StatusCode::UNAUTHORIZED, "api_key_revoked");
    let keys = server
        .get(
            &format!("/api/v1/orgs/{}/api-keys", alice.org_id),
            &alice.token,
        )
        .await;
    assert!(keys.items()[0]["revoked_at"].is_string());

    if engine == Engine::Sqlite {
        let fk = server
            .db()
            .query_one_raw(Statement::from_string(
                server.db().get_database_backend(),
                "PRAGMA foreign_keys".to_owned(),
            ))
            .await
            .expect("pragma")
            .expect("row");
        assert_eq!(
            fk.try_get_by_index::<i32>(0).expect("value"),
            1,
            "foreign keys must be enforced"
        );
    }
}

async fn organizations_members_and_the_last_owner(engine: Engine) {
    let server = TestServer::start(engine).await;
    let owner = server.signup("owner").await;
    let org = format!("/api/v1/orgs/{}", owner.org_id);

    let renamed = server
        .patch(&org, &owner.token, json!({ "name": "  Renamed  " }))
        .await;
    renamed.expect(StatusCode::OK);
    assert_eq!(renamed.body["name"], "Renamed");
    server.get(&org, &owner.token).await.expect(StatusCode::OK);

    let second = server
        .post("/api/v1/orgs", &owner.token, json!({ "name": "Second" }))
        .await;
    second.expect(StatusCode::CREATED);
    let mine = server.get("/api/v1/orgs", &owner.token).await;
    assert_eq!(mine.items().len(), 2);

    let admin = server.member_of(&owner, "admin", "admin").await;
    let viewer = server.member_of(&owner, "viewer", "viewer").await;
    let members = server.get(&format!("{org}/members"), &viewer.token).await;
    members.expect(StatusCode::OK);
    assert_eq!(members.items().len(), 3);

    server
        .post(
            &format!("{org}/members"),
            &owner.token,
            json!({ "email": viewer.email, "role": "member" }),
        )
        .await
        .expect_problem(StatusCode::CONFLICT, "already_member");
    server
        .post(
            &format!("{org}/members"),
            &owner.token,
            json!({ "email": "nobody@example.com", "role": "member" }),
        )
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "user_not_found");

    // Admins manage members but not owners.
    let promoted = server
        .patch(
            &format!("{org}/members/{}", viewer.user_id),
            &admin.token,
            json!({ "role": "member" }),
        )
        .await;
    promoted.expect(StatusCode::OK);
    assert_eq!(promoted.body["role"], "member");
    server
        .patch(
            &format!("{org}/members/{}", viewer.user_id),
            &admin.token,
            json!({ "role": "owner" }),
        )
        .await
        .expect_problem(StatusCode::FORBIDDEN, "forbidden");
    server
        .delete(&format!("{org}/members/{}", owner.user_id), &admin.token)
        .await
        .expect_problem(StatusCode::FORBIDDEN, "forbidden");

    // The last owner can neither leave nor be demoted.
    server
        .delete(&format!("{org}/members/{}", owner.user_id), &owner.token)
        .await
        .expect_problem(StatusCode::CONFLICT, "last_owner");
    server
        .patch(
            &format!("{org}/members/{}", owner.user_id),
            &owner.token,
            json!({ "role": "admin" }),
        )
        .await
        .expect_problem(StatusCode::CONFLICT, "last_owner");

    // With a second owner, the first may step down.
    server
        .patch(
            &format!("{org}/members/{}", admin.user_id),
            &owner.token,
            json!({ "role": "owner" }),
        )
        .await
        .expect(StatusCode::OK);
    server
        .patch(
            &format!("{org}/members/{}", owner.user_id),
            &owner.token,
            json!({ "role": "admin" }),
        )
        .await
        .expect(StatusCode::OK);

    // Anyone may leave; afterwards the organization is invisible to them.
    server
        .delete(&format!("{org}/members/{}", viewer.user_id), &viewer.token)
        .await
        .expect(StatusCode::NO_CONTENT);
    server
        .get(&org, &viewer.token)
        .await
        .expect_problem(StatusCode::NOT_FOUND, "organization_not_found");
}

async fn projects_crud_and_cursor_pagination(engine: Engine) {
    let server = TestServer::start(engine).await;
    let alice = server.signup("alice").await;
    let projects = format!("/api/v1/orgs/{}/projects", alice.org_id);

    let mut created = Vec::new();
    for i in 0..5 {
        let reply = server
            .post(
                &projects,
                &alice.token,
                json!({ "name": format!("p{i}"), "description": "training runs" }),
            )
            .await;
        reply.expect(StatusCode::CREATED);
        created.push(reply.str("/id"));
    }
    server
        .post(&projects, &alice.token, json!({ "name": "p0" }))
        .await
        .expect_problem(StatusCode::CONFLICT, "project_name_taken");

    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let path = match &cursor {
            Some(c) => format!("{projects}?limit=2&cursor={c}"),
            None => format!("{projects}?limit=2"),
        };
        let page = server.get(&path, &alice.token).await;
        page.expect(StatusCode::OK);
        pages += 1;
        seen.extend(
            page.items()
                .iter()
                .map(|p| p["id"].as_str().expect("id").to_owned()),
        );
        match page.body["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(
        seen, created,
        "pages cover every project once, in creation order"
    );

    let one = format!("{projects}/{}", created[0]);
    let updated = server
        .patch(&one, &alice.token, json!({ "name": "renamed" }))
        .await;
    updated.expect(StatusCode::OK);
    assert_eq!(updated.body["name"], "renamed");
    assert_eq!(updated.body["description"], "training runs");
    server
        .patch(&one, &alice.token, json!({ "name": "p1" }))
        .await
        .expect_problem(StatusCode::CONFLICT, "project_name_taken");
    server
        .delete(&one, &alice.token)
        .await
        .expect(StatusCode::NO_CONTENT);
    server
        .get(&one, &alice.token)
        .await
        .expect_problem(StatusCode::NOT_FOUND, "project_not_found");
}

async fn audit_log_records_who_what_where(engine: Engine) {
    let server = TestServer::start(engine).await;
    let alice = server.signup("alice").await;
    let created = server
        .post(
            &format!("/api/v1/orgs/{}/projects", alice.org_id),
            &alice.token,
            json!({ "name": "vision" }),
        )
        .await;
    created.expect(StatusCode::CREATED);
    let request_id = created.headers["x-request-id"]
        .to_str()
        .expect("request id")
        .to_owned();

    let log = server
        .get(
            &format!("/api/v1/orgs/{}/audit-log", alice.org_id),
            &alice.token,
        )
        .await;
    log.expect(StatusCode::OK);
    let newest = &log.items()[0];
    assert_eq!(newest["action"], "project.create");
    assert_eq!(newest["actor_kind"], "user");
    assert_eq!(newest["actor_id"], alice.user_id.to_string());
    assert_eq!(newest["target_id"], created.body["id"]);
    assert_eq!(newest["request_id"], request_id);
    assert_eq!(newest["source_address"], "127.0.0.1");
    assert_eq!(newest["details"]["name"], "vision");
    let actions: Vec<&str> = log
        .items()
        .iter()
        .filter_map(|e| e["action"].as_str())
        .collect();
    assert_eq!(actions, ["project.create", "organization.create"]);

    // A member below admin cannot read it.
    let member = server.member_of(&alice, "bob", "member").await;
    server
        .get(
            &format!("/api/v1/orgs/{}/audit-log", alice.org_id),
            &member.token,
        )
        .await
        .expect_problem(StatusCode::FORBIDDEN, "forbidden");
}

async fn idempotent_creation(engine: Engine) {
    let server = TestServer::start(engine).await;
    let alice = server.signup("alice").await;
    let projects = format!("/api/v1/orgs/{}/projects", alice.org_id);
    let send = |key: &'static str, body: serde_json::Value| {
        server.keyed_post(&projects, &alice.token, key, &body)
    };

    let first = send("k-1", json!({ "name": "once" }))
        .send()
        .await
        .expect("send");
    assert_eq!(first.status(), StatusCode::CREATED);
    let first_body: serde_json::Value = first.json().await.expect("json");
    let replay = send("k-1", json!({ "name": "once" }))
        .send()
        .await
        .expect("send");
    assert_eq!(replay.status(), StatusCode::CREATED);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(
        replay.json::<serde_json::Value>().await.expect("json"),
        first_body
    );
    let page = server.get(&projects, &alice.token).await;
    assert_eq!(page.items().len(), 1, "a replay creates nothing");

    let reused = send("k-1", json!({ "name": "other" }))
        .send()
        .await
        .expect("send");
    assert_eq!(reused.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let problem: serde_json::Value = reused.json().await.expect("json");
    assert_eq!(problem["code"], "idempotency_key_reused");

    // The same key from another caller is another key.
    let bob = server.member_of(&alice, "bob", "admin").await;
    let other = server
        .keyed_post(&projects, &bob.token, "k-1", &json!({ "name": "bob's" }))
        .send()
        .await
        .expect("send");
    assert_eq!(other.status(), StatusCode::CREATED);

    // A refused request is replayed as refused, not re-run.
    let conflict = send("k-2", json!({ "name": "once" }))
        .send()
        .await
        .expect("send");
    assert_eq!(conflict.status(), StatusCode::CONFLICT);
    let again = send("k-2", json!({ "name": "once" }))
        .send()
        .await
        .expect("send");
    assert_eq!(again.status(), StatusCode::CONFLICT);
    assert_eq!(again.headers()["content-type"], "application/problem+json");

    // A key's secret is never stored for replay.
    let keys = format!("/api/v1/orgs/{}/api-keys", alice.org_id);
    let create_key = || {
        server.keyed_post(
            &keys,
            &alice.token,
            "key-1",
            &json!({ "name": "ci", "role": "member" }),
        )
    };
    let created: serde_json::Value = create_key()
        .send()
        .await
        .expect("send")
        .json()
        .await
        .expect("json");
    let replayed: serde_json::Value = create_key()
        .send()
        .await
        .expect("send")
        .json()
        .await
        .expect("json");
    assert!(
        created["secret"]
            .as_str()
            .is_some_and(|s| s.starts_with("gk_"))
    );
    assert_eq!(replayed["id"], created["id"]);
    assert_eq!(replayed["secret"], serde_json::Value::Null);

    // Session tokens are never stored for replay either: sign-in ignores the key.
    let login = || {
        server.keyed_post(
            "/api/v1/auth/login",
            &alice.token,
            "login-1",
            &json!({ "email": alice.email, "password": PASSWORD }),
        )
    };
    let first = login().send().await.expect("send");
    assert_eq!(first.status(), StatusCode::OK);
    let again = login().send().await.expect("send");
    assert!(!again.headers().contains_key("idempotent-replayed"));
    let stored: i64 = server
        .db()
        .query_one_raw(Statement::from_string(
            server.db().get_database_backend(),
            "SELECT COUNT(*) AS n FROM idempotency_keys WHERE key = 'login-1'".to_owned(),
        ))
        .await
        .expect("query")
        .expect("row")
        .try_get("", "n")
        .expect("count");
    assert_eq!(stored, 0);
}

async fn operators_and_the_admin_api(engine: Engine) {
    let server = TestServer::start(engine).await;
    let alice = server.signup("alice").await;
    server
        .get("/api/v1/admin/orgs", &alice.token)
        .await
        .expect_problem(StatusCode::FORBIDDEN, "forbidden");
    server
        .get("/api/v1/admin/audit-log", &alice.token)
        .await
        .expect_problem(StatusCode::FORBIDDEN, "forbidden");
    server
        .get("/api/v1/admin/networks", &alice.token)
        .await
        .expect_problem(StatusCode::FORBIDDEN, "forbidden");

    let outcome = gantry_access::operators::create_or_promote(
        server.db(),
        &alice.email,
        "ignored for existing users",
    )
    .await
    .expect("promote");
    assert!(
        matches!(outcome, gantry_access::operators::Outcome::Promoted(id) if id == alice.user_id)
    );
    let orgs = server.get("/api/v1/admin/orgs", &alice.token).await;
    orgs.expect(StatusCode::OK);
    assert_eq!(orgs.items().len(), 1);
    let audit = server.get("/api/v1/admin/audit-log", &alice.token).await;
    audit.expect(StatusCode::OK);
    assert_eq!(audit.items()[0]["action"], "operator.promote");

    let created = gantry_access::operators::create_or_promote(
        server.db(),
        "ops@example.com",
        "a strong operator passphrase",
    )
    .await
    .expect("create");
    assert!(matches!(
        created,
        gantry_access::operators::Outcome::Created(_)
    ));
    let login = server
        .login("ops@example.com", "a strong operator passphrase")
        .await;
    login.expect(StatusCode::OK);
    let me = server.get("/api/v1/me", &login.str("/access_token")).await;
    assert_eq!(me.body["user"]["is_operator"], true);
}

async fn health_request_ids_and_cors_off(engine: Engine) {
    let server = TestServer::start(engine).await;
    let health = server
        .http
        .get(server.url("/healthz"))
        .send()
        .await
        .expect("healthz");
    assert_eq!(health.status(), StatusCode::OK);
    assert!(health.headers().contains_key("x-request-id"));
    let ready = server
        .http
        .get(server.url("/readyz"))
        .send()
        .await
        .expect("readyz");
    assert_eq!(ready.status(), StatusCode::OK);

    // A caller's request id is kept and echoed.
    let echoed = server
        .http
        .get(server.url("/healthz"))
        .header("x-request-id", "trace-me-123")
        .send()
        .await
        .expect("healthz");
    assert_eq!(echoed.headers()["x-request-id"], "trace-me-123");

    let preflight = server
        .http
        .request(Method::OPTIONS, server.url("/api/v1/me"))
        .header("Origin", "https://evil.example")
        .header("Access-Control-Request-Method", "GET")
        .send()
        .await
        .expect("preflight");
    assert!(
        !preflight
            .headers()
            .contains_key("access-control-allow-origin")
    );

    let with_cors = TestServer::start_with(engine, |c| {
        c.cors_allowed_origins = vec!["https://console.example".into()]
    })
    .await;
    let allowed = with_cors
        .http
        .request(Method::OPTIONS, with_cors.url("/api/v1/me"))
        .header("Origin", "https://console.example")
        .header("Access-Control-Request-Method", "GET")
        .send()
        .await
        .expect("preflight");
    assert_eq!(
        allowed.headers()["access-control-allow-origin"],
        "https://console.example"
    );
}

async fn rate_limits_per_caller(engine: Engine) {
    let server = TestServer::start_with(engine, |c| {
        c.rate_limit_per_second = 1;
        c.rate_limit_burst = 3;
    })
    .await;
    let signup = server
        .call(
            Method::POST,
            "/api/v1/auth/signup",
            None,
            Some(json!({ "email": "rl@example.com", "password": PASSWORD, "name": "rl", "organization": "rl" })),
        )
        .await;
    signup.expect(StatusCode::CREATED);
    let token = signup.str("/access_token");
    let mut statuses = Vec::new();
    for _ in 0..6 {
        statuses.push(server.get("/api/v1/me", &token).await);
    }
    assert!(statuses[..3].iter().all(|r| r.status == StatusCode::OK));
    // The bucket refills one request a second, so a slow machine may let one
    // more through; six in a row cannot all pass.
    let limited = statuses[3..]
        .iter()
        .find(|r| r.status == StatusCode::TOO_MANY_REQUESTS)
        .expect("a request over the burst is limited");
    limited.expect_problem(StatusCode::TOO_MANY_REQUESTS, "rate_limited");
    assert!(limited.headers.contains_key("retry-after"));
}

async fn replicas_see_changes_within_the_cache_bound(engine: Engine) {
    let ttl = |c: &mut gantry_core::config::Config| c.auth_cache_seconds = 1;
    let a = TestServer::start_with(engine, ttl).await;
    let b = a.replica(ttl).await;
    let owner = a.signup("owner").await;
    let admin = a.member_of(&owner, "admin", "admin").await;
    let (key_id, key) = a.api_key(&owner, "admin").await;
    let keys = format!("/api/v1/orgs/{}/api-keys", owner.org_id);

    // Replica B learns both callers and keeps them in its cache.
    b.get(&keys, &admin.token).await.expect(StatusCode::OK);
    b.get(&keys, &key).await.expect(StatusCode::OK);

    // Demoted and revoked through replica A: A refuses at once.
    a.patch(
        &format!("/api/v1/orgs/{}/members/{}", owner.org_id, admin.user_id),
        &owner.token,
        json!({ "role": "viewer" }),
    )
    .await
    .expect(StatusCode::OK);
    a.delete(&format!("{keys}/{key_id}"), &owner.token)
        .await
        .expect(StatusCode::NO_CONTENT);
    a.get(&keys, &admin.token)
        .await
        .expect_problem(StatusCode::FORBIDDEN, "forbidden");
    a.get(&keys, &key)
        .await
        .expect_problem(StatusCode::UNAUTHORIZED, "api_key_revoked");

    // B refuses once its cache entries are older than the bound.
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    b.get(&keys, &admin.token)
        .await
        .expect_problem(StatusCode::FORBIDDEN, "forbidden");
    b.get(&keys, &key)
        .await
        .expect_problem(StatusCode::UNAUTHORIZED, "api_key_revoked");
}

async fn concurrent_retries_and_owner_changes_stay_consistent(engine: Engine) {
    let server = TestServer::start(engine).await;
    let owner = server.signup("owner").await;
    let projects = format!("/api/v1/orgs/{}/projects", owner.org_id);

    // Eight simultaneous retries of one creation act once.
    let attempts = (0..8).map(|_| {
        server.keyed_post(
            &projects,
            &owner.token,
            "burst-1",
            &json!({ "name": "burst" }),
        )
    });
    let statuses = send_at_once(attempts.collect()).await;
    assert!(
        statuses
            .iter()
            .all(|s| [StatusCode::CREATED, StatusCode::CONFLICT].contains(s)),
        "{statuses:?}"
    );
    assert!(statuses.contains(&StatusCode::CREATED));
    assert_eq!(server.get(&projects, &owner.token).await.items().len(), 1);

    // Two owners demote each other at the same moment: the organization
    // keeps exactly one owner whatever the interleaving. Several rounds, as
    // a race shows itself only sometimes.
    let second = server.member_of(&owner, "second", "owner").await;
    let members = format!("/api/v1/orgs/{}/members", owner.org_id);
    for round in 0..6 {
        let demote = |by: &str, whom: uuid::Uuid| {
            server
                .http
                .patch(server.url(&format!("{members}/{whom}")))
                .bearer_auth(by)
                .json(&json!({ "role": "admin" }))
        };
        let outcomes = send_at_once(vec![
            demote(&owner.token, second.user_id),
            demote(&second.token, owner.user_id),
        ])
        .await;
        assert!(
            outcomes.contains(&StatusCode::OK),
            "round {round}: {outcomes:?}"
        );
        // The loser hears that the last owner stays (409), or, when the
        // winner committed before the loser's role was read, that it is no
        // longer an owner (403); never anything else.
        let allowed = [StatusCode::OK, StatusCode::CONFLICT, StatusCode::FORBIDDEN];
        assert!(
            outcomes.iter().all(|s| allowed.contains(s)),
            "round {round}: {outcomes:?}"
        );
        let listed = server.get(&members, &owner.token).await;
        let remaining: Vec<&serde_json::Value> = listed
            .items()
            .iter()
            .filter(|m| m["role"] == "owner")
            .collect();
        assert_eq!(
            remaining.len(),
            1,
            "round {round}: exactly one owner is left: {outcomes:?}"
        );
        let (stayed, demoted) = if remaining[0]["user_id"] == owner.user_id.to_string() {
            (&owner, &second)
        } else {
            (&second, &owner)
        };
        server
            .patch(
                &format!("{members}/{}", demoted.user_id),
                &stayed.token,
                json!({ "role": "owner" }),
            )
            .await
            .expect(StatusCode::OK);
    }
}

/// Sends all requests at once and collects their statuses.
async fn send_at_once(requests: Vec<reqwest::RequestBuilder>) -> Vec<StatusCode> {
    let handles: Vec<_> = requests
        .into_iter()
        .map(|r| tokio::spawn(r.send()))
        .collect();
    let mut statuses = Vec::new();
    for handle in handles {
        statuses.push(handle.await.expect("join").expect("send").status());
    }
    statuses
}

async fn failed_sign_ins_refuse_the_address_for_a_while(engine: Engine) {
    let server = TestServer::start_with(engine, |c| c.login_max_failures = 4).await;
    let alice = server.signup("alice").await;
    let bob = server.signup("bob").await;
    let login = |email: String, password: &'static str| {
        server.call(
            Method::POST,
            "/api/v1/auth/login",
            None,
            Some(json!({ "email": email, "password": password })),
        )
    };

    for target in [alice.email.clone(), "nobody@example.com".to_owned()] {
        for _ in 0..4 {
            login(target.clone(), "wrong horse battery staple")
                .await
                .expect_problem(StatusCode::UNAUTHORIZED, "invalid_credentials");
        }
        // Refused now from this address, whatever the password, and alike
        // for unknown accounts.
        let locked = login(target.to_uppercase(), PASSWORD).await;
        locked.expect_problem(StatusCode::TOO_MANY_REQUESTS, "too_many_login_attempts");
        assert!(locked.headers.contains_key("retry-after"));
    }
    // Other accounts are not affected, and a success clears the count.
    login(bob.email.clone(), "wrong horse battery staple")
        .await
        .expect_problem(StatusCode::UNAUTHORIZED, "invalid_credentials");
    login(bob.email.clone(), PASSWORD)
        .await
        .expect(StatusCode::OK);
    for _ in 0..2 {
        login(bob.email.clone(), "wrong horse battery staple")
            .await
            .expect_problem(StatusCode::UNAUTHORIZED, "invalid_credentials");
    }
    login(bob.email.clone(), PASSWORD)
        .await
        .expect(StatusCode::OK);
    // The twelfth failure from one address (three times the per-account
    // allowance) refuses it on every account; a success does not reset that.
    login(bob.email.clone(), "wrong horse battery staple")
        .await
        .expect_problem(StatusCode::UNAUTHORIZED, "invalid_credentials");
    login(bob.email.clone(), PASSWORD)
        .await
        .expect_problem(StatusCode::TOO_MANY_REQUESTS, "too_many_login_attempts");
}
