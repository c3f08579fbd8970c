//! Project networks: a project's work runs on its organization's private
//! network, on one of its own, or on another project's that it joins, and
//! only a project of the same organization may join one. Checked through
//! what a node with a fabric is handed: each workload's network, address
//! and name table; and a network is never given up while another project
//! joins it at the same moment.

use std::collections::HashMap;

use reqwest::StatusCode;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::{Engine, Tenant, TestServer};

crate::on_both_engines!(
    projects_get_networks_of_their_own_and_open_them_only_to_their_own_projects,
    a_network_is_never_given_up_while_a_project_joins_it_at_the_same_time,
);

async fn projects_get_networks_of_their_own_and_open_them_only_to_their_own_projects(
    engine: Engine,
) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 0).await;
    let (a, b) = (server.signup("a").await, server.signup("b").await);
    let project = |tenant: &Tenant, body: Value| {
        let server = &server;
        let path = format!("/api/v1/orgs/{}/projects", tenant.org_id);
        let token = tenant.token.clone();
        async move { server.post(&path, &token, body).await }
    };
    let alpha = project(&a, json!({ "name": "alpha", "network": "own" })).await;
    alpha.expect(StatusCode::CREATED);
    assert_eq!(alpha.body["network"], "own");
    let alpha = alpha.id("/id");
    let beta = project(
        &a,
        json!({ "name": "beta", "network": "joined", "network_project_id": alpha }),
    )
    .await;
    beta.expect(StatusCode::CREATED);
    assert_eq!(beta.body["network_project_id"], json!(alpha));
    let beta = beta.id("/id");
    let gamma = project(&a, json!({ "name": "gamma" })).await;
    gamma.expect(StatusCode::CREATED);
    assert_eq!(gamma.body["network"], "organization");
    let gamma = gamma.id("/id");
    let theirs = project(&b, json!({ "name": "theirs", "network": "own" })).await;
    theirs.expect(StatusCode::CREATED);
    let theirs = theirs.id("/id");

    // Refused, each with its reason, and nothing written.
    let before = server.table_counts().await;
    let projects = format!("/api/v1/orgs/{}/projects", a.org_id);
    for (body, status, code) in [
        (
            json!({ "name": "x", "network": "joined" }),
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation_failed",
        ),
        (
            json!({ "name": "x", "network": "own", "network_project_id": alpha }),
            StatusCode::UNPROCESSABLE_ENTITY,
            "validation_failed",
        ),
        (
            json!({ "name": "x", "network": "joined", "network_project_id": gamma }),
            StatusCode::CONFLICT,
            "network_not_own",
        ),
        (
            json!({ "name": "x", "network": "joined", "network_project_id": theirs }),
            StatusCode::UNPROCESSABLE_ENTITY,
            "unknown_project",
        ),
        (
            json!({ "name": "x", "network": "everywhere" }),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_body",
        ),
    ] {
        server
            .post(&projects, &a.token, body.clone())
            .await
            .expect_problem(status, code);
    }
    let at = |id: Uuid| format!("{projects}/{id}");
    server
        .patch(&at(alpha), &a.token, json!({ "network": "organization" }))
        .await
        .expect_problem(StatusCode::CONFLICT, "network_joined");
    server
        .delete(&at(alpha), &a.token)
        .await
        .expect_problem(StatusCode::CONFLICT, "network_joined");
    server
        .patch(&at(gamma), &a.token, json!({ "network_project_id": alpha }))
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    server
        .patch(
            &at(beta),
            &a.token,
            json!({ "network": "joined", "network_project_id": beta }),
        )
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    // Another organization's project cannot join A's, by either path.
    for path in [
        format!("/api/v1/orgs/{}/projects/{theirs}", b.org_id),
        format!("/api/v1/orgs/{}/projects/{theirs}", a.org_id),
    ] {
        let reply = server
            .patch(
                &path,
                &b.token,
                json!({ "network": "joined", "network_project_id": alpha }),
            )
            .await;
        assert!(
            [StatusCode::UNPROCESSABLE_ENTITY, StatusCode::NOT_FOUND].contains(&reply.status),
            "{:?}",
            reply.body
        );
    }
    assert_eq!(server.table_counts().await, before, "nothing was written");

    // A node with a fabric runs one workload of each project, one of no
    // project, and one of B's, each of a size five of fit on one node.
    let small = server
        .post(
            "/api/v1/admin/catalog/instance-types",
            &operator.token,
            json!({ "name": "h100-small", "gpu_model": "H100", "gpus_per_node": 1, "vcpus": 2, "memory_gib": 8 }),
        )
        .await;
    small.expect(StatusCode::CREATED);
    server
        .post(
            &format!(
                "/api/v1/admin/catalog/instance-types/{}/prices",
                small.id("/id")
            ),
            &operator.token,
            json!({ "pricing_class": "on_demand", "hourly_micros": 2_000_000 }),
        )
        .await
        .expect(StatusCode::CREATED);
    let node = server.join_agent(&operator, "r1", "gpu-box", 8).await;
    server
        .post(
            "/api/v1/agent/heartbeat",
            &node,
            json!({ "gpus": [], "fabric_address": "198.18.0.11" }),
        )
        .await
        .expect(StatusCode::OK);
    let order = |tenant: &Tenant, name: &str, project: Option<Uuid>| {
        let mut body = json!({ "name": name, "instance_type": "h100-small" });
        if let Some(project) = project {
            body["project_id"] = json!(project);
        }
        let server = &server;
        let tenant = tenant.clone();
        async move { server.order(&tenant, body).await }
    };
    let orders = [
        ("in-alpha", order(&a, "in-alpha", Some(alpha)).await),
        ("in-beta", order(&a, "in-beta", Some(beta)).await),
        ("in-gamma", order(&a, "in-gamma", Some(gamma)).await),
        ("no-project", order(&a, "no-project", None).await),
        ("b-own", order(&b, "b-own", Some(theirs)).await),
    ];
    let mut assigned: HashMap<&str, Value> = HashMap::new();
    let mut all = Vec::new();
    for _ in 0..100 {
        let reply = server.get("/api/v1/agent/assignments", &node).await;
        reply.expect(StatusCode::OK);
        all = reply.body["assignments"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assigned = orders
            .iter()
            .filter_map(|(name, id)| {
                let found = all.iter().find(|x| x["order_id"] == id.to_string())?;
                found["network"]
                    .is_object()
                    .then(|| (*name, found["network"].clone()))
            })
            .collect();
        if assigned.len() == orders.len() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(assigned.len(), orders.len(), "{all:?}");
    let vni = |name: &str| assigned[name]["vni"].as_u64().unwrap_or_default();
    let names = |name: &str| -> Vec<String> {
        assigned[name]["hosts"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|h| h["names"].as_array().cloned().unwrap_or_default())
            .filter_map(|n| n.as_str().map(str::to_owned))
            .collect()
    };
    assert_eq!(
        vni("in-alpha"),
        vni("in-beta"),
        "beta joins alpha's network"
    );
    assert_eq!(
        vni("in-gamma"),
        vni("no-project"),
        "gamma is on the organization's"
    );
    assert_ne!(vni("in-alpha"), vni("in-gamma"), "alpha's is its own");
    assert!(
        [vni("in-alpha"), vni("in-gamma")]
            .iter()
            .all(|v| *v != vni("b-own")),
        "B's network is B's"
    );
    for (name, sees, misses) in [
        ("in-alpha", ["in-alpha", "in-beta"], ["in-gamma", "b-own"]),
        (
            "in-gamma",
            ["in-gamma", "no-project"],
            ["in-alpha", "b-own"],
        ),
    ] {
        let table = names(name);
        assert!(
            sees.iter().all(|n| table.contains(&(*n).to_owned())),
            "{name}: {table:?}"
        );
        assert!(
            !misses.iter().any(|n| table.contains(&(*n).to_owned())),
            "{name}: {table:?}"
        );
    }

    // The organization lists its two networks, alpha's named as such.
    let listed = server
        .get(&format!("/api/v1/orgs/{}/networks", a.org_id), &a.token)
        .await;
    listed.expect(StatusCode::OK);
    let items = listed.items();
    assert_eq!(items.len(), 2, "{:?}", listed.body);
    let of_alpha = items
        .iter()
        .find(|n| n["project_id"] == json!(alpha))
        .unwrap_or_else(|| panic!("alpha's network: {:?}", listed.body));
    assert_eq!(of_alpha["project"], "alpha");
    assert_eq!(of_alpha["addresses"].as_array().map(Vec::len), Some(2));
    let of_org = items
        .iter()
        .find(|n| n["project_id"].is_null())
        .unwrap_or_else(|| panic!("the organization's network: {:?}", listed.body));
    assert_eq!(of_org["addresses"].as_array().map(Vec::len), Some(2));

    // Once beta has a network of its own, alpha may give its up; work
    // already placed keeps its address.
    server
        .patch(&at(beta), &a.token, json!({ "network": "own" }))
        .await
        .expect(StatusCode::OK);
    let changed = server
        .patch(&at(alpha), &a.token, json!({ "network": "organization" }))
        .await;
    changed.expect(StatusCode::OK);
    assert!(changed.body["network_project_id"].is_null());
    let reply = server.get("/api/v1/agent/assignments", &node).await;
    let kept = reply.body["assignments"]
        .as_array()
        .and_then(|all| {
            all.iter()
                .find(|x| x["order_id"] == orders[0].1.to_string())
                .cloned()
        })
        .expect("alpha's workload");
    assert_eq!(kept["network"]["vni"], assigned["in-alpha"]["vni"]);
    assert_eq!(kept["network"]["address"], assigned["in-alpha"]["address"]);
}

async fn a_network_is_never_given_up_while_a_project_joins_it_at_the_same_time(engine: Engine) {
    let server = TestServer::start(engine).await;
    let a = server.signup("a").await;
    let projects = format!("/api/v1/orgs/{}/projects", a.org_id);
    let mut pairs = Vec::new();
    for i in 0..8 {
        let owner = server
            .post(
                &projects,
                &a.token,
                json!({ "name": format!("owner-{i}"), "network": "own" }),
            )
            .await;
        owner.expect(StatusCode::CREATED);
        let joiner = server
            .post(
                &projects,
                &a.token,
                json!({ "name": format!("joiner-{i}") }),
            )
            .await;
        joiner.expect(StatusCode::CREATED);
        pairs.push((owner.id("/id"), joiner.id("/id")));
    }
    // Each owner gives its network up while its joiner joins it, at once:
    // exactly one of the two may go ahead.
    let sent: Vec<_> = pairs
        .iter()
        .flat_map(|(owner, joiner)| {
            [
                (*owner, json!({ "network": "organization" })),
                (
                    *joiner,
                    json!({ "network": "joined", "network_project_id": owner }),
                ),
            ]
        })
        .map(|(project, body)| {
            crate::support::sent_at_once(
                server
                    .http
                    .patch(server.url(&format!("{projects}/{project}")))
                    .bearer_auth(&a.token)
                    .json(&body),
            )
        })
        .collect();
    let mut answers = Vec::new();
    for task in sent {
        answers.push(task.await.expect("task"));
    }
    for (i, pair) in answers.chunks(2).enumerate() {
        let went_ahead = pair.iter().filter(|(s, _)| *s == StatusCode::OK).count();
        assert_eq!(went_ahead, 1, "pair {i}: {pair:?}");
        for (status, body) in pair {
            if *status != StatusCode::OK {
                assert_eq!(*status, StatusCode::CONFLICT, "{body}");
                assert!(
                    ["network_joined", "network_not_own"]
                        .contains(&body["code"].as_str().unwrap_or_default()),
                    "{body}"
                );
            }
        }
    }
    let listed = server.get(&format!("{projects}?limit=100"), &a.token).await;
    let by_id: HashMap<String, &Value> = listed
        .items()
        .iter()
        .map(|p| (p["id"].as_str().unwrap_or_default().to_owned(), p))
        .collect();
    for (owner, joiner) in &pairs {
        let (owner, joiner) = (by_id[&owner.to_string()], by_id[&joiner.to_string()]);
        assert!(
            joiner["network"] != "joined" || owner["network"] == "own",
            "a project joins a network its owner gave up: {owner} {joiner}"
        );
    }
}
