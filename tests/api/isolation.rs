//! Tenants are walled off: another tenant's user or API key gets 404 for
//! every tenant-scoped route and changes nothing; a role below the one a
//! route needs gets 403 and changes nothing.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::{Engine, TestServer};

crate::on_both_engines!(
    another_tenant_sees_404_and_changes_nothing,
    roles_below_the_requirement_get_403
);

/// One call on tenant-scoped data.
struct Route {
    method: Method,
    path: String,
    body: Option<Value>,
}

fn route(method: Method, path: String, body: Option<Value>) -> Route {
    Route { method, path, body }
}

/// Every tenant-scoped route, aimed at `org`'s objects.
fn tenant_routes(org: Uuid, project: Uuid, key: Uuid, member: Uuid) -> Vec<Route> {
    let o = format!("/api/v1/orgs/{org}");
    vec![
        route(Method::GET, o.clone(), None),
        route(
            Method::PATCH,
            o.clone(),
            Some(json!({ "name": "taken over" })),
        ),
        route(Method::GET, format!("{o}/members"), None),
        route(
            Method::POST,
            format!("{o}/members"),
            Some(json!({ "email": "x@example.com", "role": "admin" })),
        ),
        route(
            Method::PATCH,
            format!("{o}/members/{member}"),
            Some(json!({ "role": "admin" })),
        ),
        route(Method::DELETE, format!("{o}/members/{member}"), None),
        route(Method::GET, format!("{o}/projects"), None),
        route(
            Method::POST,
            format!("{o}/projects"),
            Some(json!({ "name": "intruder" })),
        ),
        route(Method::GET, format!("{o}/projects/{project}"), None),
        route(
            Method::PATCH,
            format!("{o}/projects/{project}"),
            Some(json!({ "name": "renamed" })),
        ),
        route(Method::DELETE, format!("{o}/projects/{project}"), None),
        route(Method::GET, format!("{o}/api-keys"), None),
        route(
            Method::POST,
            format!("{o}/api-keys"),
            Some(json!({ "name": "stolen", "role": "admin" })),
        ),
        route(Method::DELETE, format!("{o}/api-keys/{key}"), None),
        route(Method::GET, format!("{o}/audit-log"), None),
        route(Method::GET, format!("{o}/networks"), None),
    ]
}

async fn another_tenant_sees_404_and_changes_nothing(engine: Engine) {
    let server = TestServer::start(engine).await;
    let alice = server.signup("alice").await;
    let member = server.member_of(&alice, "alice-team", "member").await;
    let project = server
        .post(
            &format!("/api/v1/orgs/{}/projects", alice.org_id),
            &alice.token,
            json!({ "name": "secret-model" }),
        )
        .await
        .id("/id");
    let (key, _) = server.api_key(&alice, "member").await;

    let mallory = server.signup("mallory").await;
    let (_, mallory_key) = server.api_key(&mallory, "admin").await;
    let before = server.table_counts().await;

    for (caller, token) in [("user", &mallory.token), ("API key", &mallory_key)] {
        for r in tenant_routes(alice.org_id, project, key, member.user_id) {
            let reply = server
                .call(r.method.clone(), &r.path, Some(token), r.body)
                .await;
            reply.expect_problem(StatusCode::NOT_FOUND, "organization_not_found");
            assert!(
                !reply.body.to_string().contains("secret-model"),
                "{caller} {} {} leaked data",
                r.method,
                r.path
            );
        }
        // Alice's ids under Mallory's own organization are unknown too.
        let o = format!("/api/v1/orgs/{}", mallory.org_id);
        let foreign = [
            (
                Method::GET,
                format!("{o}/projects/{project}"),
                None,
                "project_not_found",
            ),
            (
                Method::PATCH,
                format!("{o}/projects/{project}"),
                Some(json!({ "name": "x" })),
                "project_not_found",
            ),
            (
                Method::DELETE,
                format!("{o}/projects/{project}"),
                None,
                "project_not_found",
            ),
            (
                Method::PATCH,
                format!("{o}/members/{}", member.user_id),
                Some(json!({ "role": "viewer" })),
                "member_not_found",
            ),
            (
                Method::DELETE,
                format!("{o}/members/{}", member.user_id),
                None,
                "member_not_found",
            ),
            (
                Method::DELETE,
                format!("{o}/api-keys/{key}"),
                None,
                "api_key_not_found",
            ),
        ];
        for (method, path, body, code) in foreign {
            server
                .call(method, &path, Some(token), body)
                .await
                .expect_problem(StatusCode::NOT_FOUND, code);
        }
    }
    // Mallory's own audit trail of failed attempts is not written either:
    // refused requests change nothing anywhere.
    assert_eq!(server.table_counts().await, before);

    let alice_projects = server
        .get(
            &format!("/api/v1/orgs/{}/projects", alice.org_id),
            &alice.token,
        )
        .await;
    assert_eq!(alice_projects.items()[0]["name"], "secret-model");
    let mallory_orgs = server.get("/api/v1/orgs", &mallory.token).await;
    assert!(
        mallory_orgs
            .items()
            .iter()
            .all(|o| o["id"] != alice.org_id.to_string())
    );
}

async fn roles_below_the_requirement_get_403(engine: Engine) {
    let server = TestServer::start(engine).await;
    let owner = server.signup("owner").await;
    let target = server.member_of(&owner, "target", "member").await;
    let project = server
        .post(
            &format!("/api/v1/orgs/{}/projects", owner.org_id),
            &owner.token,
            json!({ "name": "p" }),
        )
        .await
        .id("/id");
    let (key, _) = server.api_key(&owner, "viewer").await;

    let mut callers = Vec::new();
    for role in ["member", "viewer", "billing"] {
        callers.push((
            format!("{role} user"),
            server.member_of(&owner, role, role).await.token,
        ));
        callers.push((
            format!("{role} API key"),
            server.api_key(&owner, role).await.1,
        ));
    }
    let before = server.table_counts().await;

    for (caller, token) in &callers {
        for r in tenant_routes(owner.org_id, project, key, target.user_id) {
            let needs_admin = !(r.method == Method::GET
                && (r.path.ends_with(&owner.org_id.to_string())
                    || r.path.contains("/members")
                    || r.path.contains("/projects")
                    || r.path.ends_with("/networks")));
            let reply = server
                .call(r.method.clone(), &r.path, Some(token), r.body)
                .await;
            if needs_admin {
                reply.expect_problem(StatusCode::FORBIDDEN, "forbidden");
            } else {
                assert_eq!(
                    reply.status,
                    StatusCode::OK,
                    "{caller} {} {}",
                    r.method,
                    r.path
                );
            }
        }
    }
    assert_eq!(
        server.table_counts().await,
        before,
        "refused requests change nothing"
    );
}
