//! Ordering GPU capacity end to end: admission, the scheduling loop, the
//! simulated driver, cancel and release, preemption, quotas, gangs on a
//! fragmented cluster, concurrency and the scheduler lease.

use std::collections::HashSet;

use reqwest::StatusCode;
use serde_json::{Value, json};

use uuid::Uuid;

use crate::support::{Engine, Tenant, TestServer};

crate::on_both_engines!(
    order_runs_on_exact_gpus_and_cancel_releases_them,
    gang_waits_on_a_fragmented_cluster_and_starts_when_space_frees,
    shorter_work_goes_first_and_estimates_say_how_firm_they_are,
    new_orders_planned_alone_keep_the_starts_planned_for_blocked_work,
    production_preempts_batch_which_is_queued_again,
    quota_refuses_or_queues_and_raising_it_starts_the_order,
    project_and_regional_maximums_hold_work_back,
    admission_refuses_what_can_never_run,
    idempotent_order_creation_makes_one_order,
    parallel_orders_never_double_allocate_or_exceed_quota,
    draining_a_node_moves_its_work,
    what_if_shows_what_more_nodes_would_start,
    what_if_shows_a_defragmentation_plan_and_its_effect,
    the_scheduler_moves_checkpointable_work_when_defragmentation_is_on,
    one_replica_runs_the_loop_and_hands_it_over,
    admission_sees_changes_made_through_another_replica_at_once,
    cancelling_while_the_loop_starts_orders_leaks_no_gpus,
    gpus_still_held_by_an_ended_order_are_reclaimed,
);

fn gpu_ids(order: &Value) -> Vec<(String, u64)> {
    order["placement"]
        .as_array()
        .expect("placement")
        .iter()
        .flat_map(|p| {
            let node = p["node_name"].as_str().expect("node name").to_owned();
            p["gpu_ids"]
                .as_array()
                .expect("gpu ids")
                .iter()
                .map(move |g| (node.clone(), g.as_u64().expect("gpu id")))
        })
        .collect()
}

async fn order_runs_on_exact_gpus_and_cancel_releases_them(engine: Engine) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 2).await;
    let tenant = server.signup("tenant").await;

    let types = server
        .get("/api/v1/catalog/instance-types", &tenant.token)
        .await;
    types.expect(StatusCode::OK);
    let h100x8 = types
        .items()
        .iter()
        .find(|t| t["name"] == "h100x8")
        .expect("h100x8 in the catalog");
    assert_eq!(h100x8["gpus_per_node"], 8);
    let classes: HashSet<&str> = h100x8["prices"]
        .as_array()
        .expect("prices")
        .iter()
        .map(|p| p["pricing_class"].as_str().expect("class"))
        .collect();
    assert_eq!(classes, HashSet::from(["on_demand", "spot"]));

    let id = server
        .order(
            &tenant,
            json!({ "instance_type": "h100x8", "region": "r1" }),
        )
        .await;
    let running = server.wait_status(&tenant, id, "running").await;
    let gpus = gpu_ids(&running);
    assert_eq!(gpus.len(), 8);
    let node = &gpus[0].0;
    assert!(gpus.iter().all(|(n, _)| n == node));
    let mut indices: Vec<u64> = gpus.iter().map(|(_, g)| *g).collect();
    indices.sort_unstable();
    assert_eq!(indices, (0..8).collect::<Vec<_>>());
    assert_eq!(running["attempts"], 1);
    assert!(running["started_at"].is_string());
    assert!(running["access"]["hosts"][0]["host"].is_string());
    assert_eq!(server.count("SELECT COUNT(*) FROM gpu_claims").await, 8);

    let quotas = server
        .get(
            &format!("/api/v1/orgs/{}/quotas", tenant.org_id),
            &tenant.token,
        )
        .await;
    quotas.expect(StatusCode::OK);

    let cancelled = server
        .post(
            &format!("/api/v1/orgs/{}/orders/{id}/cancel", tenant.org_id),
            &tenant.token,
            json!({}),
        )
        .await;
    cancelled.expect(StatusCode::OK);
    assert_eq!(cancelled.body["status"], "cancelled");
    let released = server
        .wait_order(&tenant, id, "released", |o| {
            o["placement"].as_array().is_some_and(Vec::is_empty) && o["ended_at"].is_string()
        })
        .await;
    assert_eq!(released["status"], "cancelled");
    assert!(released["access"].is_null());
    assert_eq!(server.count("SELECT COUNT(*) FROM gpu_claims").await, 0);
    assert_eq!(
        server
            .count("SELECT COUNT(*) FROM allocations WHERE state = 'released' AND released_at IS NOT NULL")
            .await,
        1
    );
    // Cancelling again changes nothing.
    server
        .post(
            &format!("/api/v1/orgs/{}/orders/{id}/cancel", tenant.org_id),
            &tenant.token,
            json!({}),
        )
        .await
        .expect(StatusCode::OK);

    // Another tenant sees none of it.
    let other = server.signup("other").await;
    for path in [
        format!("/api/v1/orgs/{}/orders/{id}", tenant.org_id),
        format!("/api/v1/orgs/{}/orders", tenant.org_id),
    ] {
        server
            .get(&path, &other.token)
            .await
            .expect_problem(StatusCode::NOT_FOUND, "organization_not_found");
    }
    server
        .get(
            &format!("/api/v1/orgs/{}/orders/{id}", other.org_id),
            &other.token,
        )
        .await
        .expect_problem(StatusCode::NOT_FOUND, "order_not_found");
    server
        .post(
            &format!("/api/v1/orgs/{}/orders/{id}/cancel", other.org_id),
            &other.token,
            json!({}),
        )
        .await
        .expect_problem(StatusCode::NOT_FOUND, "order_not_found");
    let listed = server
        .get(
            &format!("/api/v1/orgs/{}/orders", other.org_id),
            &other.token,
        )
        .await;
    assert!(listed.items().is_empty());
}

async fn gang_waits_on_a_fragmented_cluster_and_starts_when_space_frees(engine: Engine) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 3).await;
    let tenant = server.signup("tenant").await;

    // Fill all 24 GPUs with single-GPU orders.
    let mut singles = Vec::new();
    for _ in 0..24 {
        singles.push(
            server
                .order(&tenant, json!({ "instance_type": "h100x1" }))
                .await,
        );
    }
    let mut by_node: std::collections::BTreeMap<String, Vec<uuid::Uuid>> = Default::default();
    for id in &singles {
        let order = server.wait_status(&tenant, *id, "running").await;
        by_node
            .entry(gpu_ids(&order)[0].0.clone())
            .or_default()
            .push(*id);
    }
    assert_eq!(by_node.len(), 3);
    assert!(by_node.values().all(|ids| ids.len() == 8));

    // Free 6 GPUs on every node: 18 free, none with 8.
    let nodes: Vec<String> = by_node.keys().cloned().collect();
    for node in &nodes {
        for id in &by_node[node][..6] {
            server.cancel(&tenant, *id).await;
        }
    }
    let gang = server
        .order(
            &tenant,
            json!({ "instance_type": "h100x8", "node_count": 2 }),
        )
        .await;
    let waiting = server
        .wait_order(&tenant, gang, "waiting for fragmentation", |o| {
            o["pending_reason"]
                .as_str()
                .is_some_and(|r| r.starts_with("fragmentation: 18 H100 free"))
        })
        .await;
    assert_eq!(waiting["status"], "queued");
    assert!(waiting["placement"].as_array().is_some_and(Vec::is_empty));

    // Emptying two nodes lets the gang start on exactly those two.
    for node in &nodes[..2] {
        for id in &by_node[node][6..] {
            server.cancel(&tenant, *id).await;
        }
    }
    let running = server.wait_status(&tenant, gang, "running").await;
    let gpus = gpu_ids(&running);
    assert_eq!(gpus.len(), 16);
    let used: HashSet<&str> = gpus.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(used, nodes[..2].iter().map(String::as_str).collect());
}

async fn shorter_work_goes_first_and_estimates_say_how_firm_they_are(engine: Engine) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 1).await;
    let tenant = server.signup("tenant").await;
    let whole_node =
        |seconds: i64| json!({ "instance_type": "h100x8", "duration_seconds": seconds });

    let running = server.order(&tenant, whole_node(3_600)).await;
    server.wait_status(&tenant, running, "running").await;
    // Two hours' work arrives before ten minutes' work; the ten minutes go
    // first, with the node reserved for them from the running order's end.
    let long = server.order(&tenant, whole_node(7_200)).await;
    let short = server.order(&tenant, whole_node(600)).await;
    let firm = server
        .wait_order(&tenant, short, "a reserved estimate", |o| {
            o["estimate_confidence"] == "reserved"
        })
        .await;
    let planned = server
        .wait_order(&tenant, long, "a planned estimate", |o| {
            o["estimate_confidence"] == "planned"
        })
        .await;
    let at = |o: &Value| {
        chrono::DateTime::parse_from_rfc3339(o["estimated_start"].as_str().expect("an estimate"))
            .expect("a time")
    };
    assert_eq!((at(&planned) - at(&firm)).num_seconds(), 600);

    server.cancel(&tenant, running).await;
    let started = server.wait_status(&tenant, short, "running").await;
    assert!(started["estimate_confidence"].is_null());
    let next = server
        .wait_order(&tenant, long, "reserved once at the head", |o| {
            o["estimate_confidence"] == "reserved"
        })
        .await;
    assert_eq!(next["status"], "queued");
}

/// With every queue long enough to keep the plan (the threshold at 0), a
/// cycle that sees only new orders plans them alone against the last whole
/// plan: the start planned for blocked work is kept, so new work that would
/// run into it waits and work that ends before it backfills.
async fn new_orders_planned_alone_keep_the_starts_planned_for_blocked_work(engine: Engine) {
    let server =
        TestServer::start_with(engine, |config| config.scheduler_whole_plan_below = 0).await;
    let operator = server.operator().await;
    server.cluster(&operator, 1).await;
    let tenant = server.signup("tenant").await;
    let half = |seconds: i64| json!({ "instance_type": "h100x4", "duration_seconds": seconds });

    let ending = server.order(&tenant, half(600)).await;
    server.wait_status(&tenant, ending, "running").await;
    let busy = server.order(&tenant, half(3_600)).await;
    server.wait_status(&tenant, busy, "running").await;
    // The whole node is planned for this from the busy half's end.
    let blocked = server
        .order(
            &tenant,
            json!({ "instance_type": "h100x8", "duration_seconds": 7_200 }),
        )
        .await;
    let planned = server
        .wait_order(&tenant, blocked, "a reserved estimate", |o| {
            o["estimate_confidence"] == "reserved"
        })
        .await;
    server.cancel(&tenant, ending).await;
    server
        .wait_order(&tenant, ending, "its GPUs released", |o| {
            o["placement"].as_array().is_some_and(Vec::is_empty)
        })
        .await;

    let checks = server.state.scheduler.consistency_checks();
    let before = checks.borrow().arrival_plans;
    // Four GPUs are free now, but only until the blocked order's start.
    let too_long = server.order(&tenant, half(7_200)).await;
    let waiting = server
        .wait_order(&tenant, too_long, "a reason to wait", |o| {
            o["pending_reason"].is_string()
        })
        .await;
    assert_eq!(waiting["status"], "queued");
    let short = server.order(&tenant, half(600)).await;
    server.wait_status(&tenant, short, "running").await;

    assert!(
        checks.borrow().arrival_plans > before,
        "no cycle planned new orders alone: {:?}",
        *checks.borrow()
    );
    let order = server.wait_order(&tenant, too_long, "read", |_| true).await;
    assert_eq!(order["status"], "queued");
    let still = server.wait_order(&tenant, blocked, "read", |_| true).await;
    assert_eq!(still["status"], "queued");
    assert_eq!(still["estimated_start"], planned["estimated_start"]);
}

async fn production_preempts_batch_which_is_queued_again(engine: Engine) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 1).await;
    let tenant = server.signup("tenant").await;

    let batch = server
        .order(
            &tenant,
            json!({ "instance_type": "h100x8", "priority_class": "batch", "workload_class": "batch" }),
        )
        .await;
    server.wait_status(&tenant, batch, "running").await;
    let production = server
        .order(
            &tenant,
            json!({ "instance_type": "h100x8", "priority_class": "production", "workload_class": "inference" }),
        )
        .await;
    let running = server.wait_status(&tenant, production, "running").await;
    assert_eq!(gpu_ids(&running).len(), 8);
    let requeued = server.wait_status(&tenant, batch, "queued").await;
    assert_eq!(requeued["attempts"], 1);
    assert!(requeued["placement"].as_array().is_some_and(Vec::is_empty));
    assert!(requeued["pending_reason"].is_string());

    // Once the production order ends, the batch order runs again.
    server.cancel(&tenant, production).await;
    let again = server.wait_status(&tenant, batch, "running").await;
    assert_eq!(again["attempts"], 2);
}

async fn quota_refuses_or_queues_and_raising_it_starts_the_order(engine: Engine) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 3).await;
    let tenant = server.signup("tenant").await;
    let quotas_path = format!("/api/v1/admin/orgs/{}/quotas", tenant.org_id);
    let set = server
        .put(
            &quotas_path,
            &operator.token,
            json!({ "quotas": [{ "gpu_model": "H100", "guaranteed_gpus": 8, "max_gpus": 8 }] }),
        )
        .await;
    set.expect(StatusCode::OK);
    assert_eq!(set.body[0]["max_gpus"], 8);

    // More than the maximum at once can never run.
    server
        .post(
            &format!("/api/v1/orgs/{}/orders", tenant.org_id),
            &tenant.token,
            json!({ "instance_type": "h100x8", "node_count": 2 }),
        )
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "quota_exceeded");

    let first = server
        .order(&tenant, json!({ "instance_type": "h100x8" }))
        .await;
    server.wait_status(&tenant, first, "running").await;
    let second = server
        .order(&tenant, json!({ "instance_type": "h100x8" }))
        .await;
    let waiting = server
        .wait_order(&tenant, second, "waiting for quota", |o| {
            o["pending_reason"]
                .as_str()
                .is_some_and(|r| r.starts_with("quota:"))
        })
        .await;
    assert_eq!(waiting["status"], "queued");
    let quotas = server
        .get(
            &format!("/api/v1/orgs/{}/quotas", tenant.org_id),
            &tenant.token,
        )
        .await;
    quotas.expect(StatusCode::OK);
    assert_eq!(quotas.body[0]["used_gpus"], 8);
    assert_eq!(quotas.body[0]["gpu_model"], "H100");

    // Tenants cannot change their own quota.
    server
        .put(&quotas_path, &tenant.token, json!({ "quotas": [] }))
        .await
        .expect_problem(StatusCode::FORBIDDEN, "forbidden");

    server
        .put(
            &quotas_path,
            &operator.token,
            json!({ "quotas": [{ "gpu_model": "H100", "guaranteed_gpus": 8, "max_gpus": 16 }] }),
        )
        .await
        .expect(StatusCode::OK);
    server.wait_status(&tenant, second, "running").await;
}

async fn project_and_regional_maximums_hold_work_back(engine: Engine) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 3).await;
    server.add_nodes(&operator, "r2", 4..=5).await;
    let tenant = server.signup("tenant").await;
    let project = server
        .post(
            &format!("/api/v1/orgs/{}/projects", tenant.org_id),
            &tenant.token,
            json!({ "name": "vision" }),
        )
        .await;
    project.expect(StatusCode::CREATED);
    let project_id = project.id("/id");
    server
        .put(
            &format!("/api/v1/admin/orgs/{}/quotas", tenant.org_id),
            &operator.token,
            json!({ "quotas": [
                { "gpu_model": "H100", "project_id": project_id, "guaranteed_gpus": 0, "max_gpus": 8 },
                { "gpu_model": "H100", "region": "r2", "guaranteed_gpus": 0, "max_gpus": 0 },
            ] }),
        )
        .await
        .expect(StatusCode::OK);

    let in_project = json!({ "instance_type": "h100x8", "project_id": project_id, "region": "r1" });
    let first = server.order(&tenant, in_project.clone()).await;
    server.wait_status(&tenant, first, "running").await;
    let second = server.order(&tenant, in_project).await;
    let held = server
        .wait_order(&tenant, second, "held by the project maximum", |o| {
            o["pending_reason"]
                .as_str()
                .is_some_and(|r| r.starts_with("quota: a project or regional maximum"))
        })
        .await;
    assert_eq!(
        held["pending_details"],
        json!([{ "kind": "scoped_quota", "needed_gpus": 8 }])
    );
    // Outside the project the order runs, but not in the region whose
    // quota is zero.
    let anywhere = server
        .order(&tenant, json!({ "instance_type": "h100x8" }))
        .await;
    let running = server.wait_status(&tenant, anywhere, "running").await;
    let node = running["placement"][0]["node_name"].as_str().expect("node");
    assert!(!["n4", "n5"].contains(&node), "placed in r2 on {node}");
    server
        .post(
            &format!("/api/v1/orgs/{}/orders", tenant.org_id),
            &tenant.token,
            json!({ "instance_type": "h100x8", "region": "r2" }),
        )
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "quota_exceeded");
    let quotas = server
        .get(
            &format!("/api/v1/orgs/{}/quotas", tenant.org_id),
            &tenant.token,
        )
        .await;
    let project_use = quotas
        .body
        .as_array()
        .expect("quotas")
        .iter()
        .find(|q| q["project_id"] == project_id.to_string())
        .expect("project quota");
    assert_eq!(project_use["used_gpus"], 8);
}

async fn admission_refuses_what_can_never_run(engine: Engine) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 2).await;
    let tenant = server.signup("tenant").await;
    let before = server.table_counts().await;
    let path = format!("/api/v1/orgs/{}/orders", tenant.org_id);
    for (body, code) in [
        (
            json!({ "instance_type": "h100x8", "node_count": 3 }),
            "never_fits",
        ),
        (
            json!({ "instance_type": "h100x8", "region": "r2" }),
            "never_fits",
        ),
        (
            json!({ "instance_type": "a100x8" }),
            "unknown_instance_type",
        ),
        (
            json!({ "instance_type": "h100x8", "region": "mars" }),
            "unknown_region",
        ),
        (
            json!({ "instance_type": "h100x8", "pricing_class": "reserved" }),
            "validation_failed",
        ),
        (
            json!({ "instance_type": "h100x8", "node_count": 0 }),
            "validation_failed",
        ),
        (
            json!({ "instance_type": "h100x8", "duration_seconds": 5 }),
            "validation_failed",
        ),
        (
            json!({ "instance_type": "h100x8", "deadline": "2001-01-01T00:00:00Z" }),
            "validation_failed",
        ),
        (
            json!({ "instance_type": "h100x8", "pricing_class": "spot", "priority_class": "production" }),
            "validation_failed",
        ),
        (
            json!({ "instance_type": "h100x8", "project_id": uuid::Uuid::new_v4() }),
            "unknown_project",
        ),
        (
            json!({ "instance_type": "h100x8", "node_count": "two" }),
            "invalid_body",
        ),
        (
            json!({ "instance_type": "h100x8", "gpus": 8 }),
            "invalid_body",
        ),
    ] {
        let reply = server.post(&path, &tenant.token, body.clone()).await;
        reply.expect_problem(StatusCode::UNPROCESSABLE_ENTITY, code);
        assert!(!reply.str("/detail").is_empty(), "{body}");
    }
    // A viewer may look but not order; tenants may not use the admin API.
    let viewer = server.member_of(&tenant, "viewer", "viewer").await;
    server
        .post(&path, &viewer.token, json!({ "instance_type": "h100x8" }))
        .await
        .expect_problem(StatusCode::FORBIDDEN, "forbidden");
    for admin in ["/api/v1/admin/nodes", "/api/v1/admin/catalog/regions"] {
        server
            .post(admin, &tenant.token, json!({}))
            .await
            .expect_problem(StatusCode::FORBIDDEN, "forbidden");
    }
    let mut after = server.table_counts().await;
    // The viewer's sign-up and membership are the only new rows.
    after.retain(|(table, _)| {
        !["users", "organizations", "memberships", "audit_log"].contains(&table.as_str())
    });
    let mut before = before;
    before.retain(|(table, _)| {
        !["users", "organizations", "memberships", "audit_log"].contains(&table.as_str())
    });
    assert_eq!(before, after);
}

async fn idempotent_order_creation_makes_one_order(engine: Engine) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 1).await;
    let tenant = server.signup("tenant").await;
    let path = format!("/api/v1/orgs/{}/orders", tenant.org_id);
    let body = json!({ "instance_type": "h100x1" });
    let mut ids = HashSet::new();
    for _ in 0..3 {
        let response = server
            .keyed_post(&path, &tenant.token, "order-retry-1", &body)
            .send()
            .await
            .expect("request");
        assert_eq!(response.status(), StatusCode::CREATED);
        let order: Value = response.json().await.expect("json");
        ids.insert(order["id"].as_str().expect("id").to_owned());
    }
    assert_eq!(ids.len(), 1);
    assert_eq!(server.count("SELECT COUNT(*) FROM orders").await, 1);
}

async fn parallel_orders_never_double_allocate_or_exceed_quota(engine: Engine) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 8).await;
    let tenants = [
        server.signup("a").await,
        server.signup("b").await,
        server.signup("c").await,
        server.signup("d").await,
    ];
    server
        .put(
            &format!("/api/v1/admin/orgs/{}/quotas", tenants[0].org_id),
            &operator.token,
            json!({ "quotas": [{ "gpu_model": "H100", "guaranteed_gpus": 0, "max_gpus": 10 }] }),
        )
        .await
        .expect(StatusCode::OK);
    let mut requests = Vec::new();
    for i in 0..200 {
        let tenant = &tenants[i % tenants.len()];
        let body = if i % 5 == 0 {
            json!({ "instance_type": "h100x4" })
        } else {
            json!({ "instance_type": "h100x1" })
        };
        let request = server
            .http
            .post(server.url(&format!("/api/v1/orgs/{}/orders", tenant.org_id)))
            .bearer_auth(&tenant.token)
            .json(&body)
            .send();
        requests.push(request);
    }
    let responses = futures_join(requests).await;
    assert!(responses.iter().all(|s| *s == StatusCode::CREATED));
    // Let the loop place what fits: 64 GPUs for far more asked.
    let mut placed = 0;
    for _ in 0..200 {
        placed = server.count("SELECT COUNT(*) FROM gpu_claims").await;
        let scheduled = server
            .count("SELECT COUNT(*) FROM orders WHERE status IN ('scheduled', 'provisioning')")
            .await;
        if placed == 64 && scheduled == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    if placed != 64 {
        let waiting = server
            .get(
                &format!("/api/v1/orgs/{}/orders?limit=3", tenants[1].org_id),
                &tenants[1].token,
            )
            .await;
        panic!("{placed} of 64 GPUs used; orders of b: {:#}", waiting.body);
    }
    // The claims' key makes a double allocation impossible; the live
    // allocations agree with it GPU by GPU.
    let mut seen = HashSet::new();
    for tenant in &tenants {
        let mut cursor = String::new();
        loop {
            let page = server
                .get(
                    &format!(
                        "/api/v1/orgs/{}/orders?limit=200&cursor={cursor}",
                        tenant.org_id
                    ),
                    &tenant.token,
                )
                .await;
            page.expect(StatusCode::OK);
            for order in page.items() {
                for gpu in gpu_ids(order) {
                    assert!(seen.insert(gpu.clone()), "GPU {gpu:?} held twice");
                }
            }
            match page.body["next_cursor"].as_str() {
                Some(next) => cursor = next.to_owned(),
                None => break,
            }
        }
    }
    assert_eq!(seen.len(), 64);
    let quota = server
        .get(
            &format!("/api/v1/orgs/{}/quotas", tenants[0].org_id),
            &tenants[0].token,
        )
        .await;
    let used = quota.body[0]["used_gpus"].as_i64().expect("used");
    assert!(
        used <= 10,
        "tenant a holds {used} GPUs with a maximum of 10"
    );
}

/// Orders cancelled the moment they are created race the scheduling loop
/// starting them: whichever commits first, no GPU may stay claimed.
async fn cancelling_while_the_loop_starts_orders_leaks_no_gpus(engine: Engine) {
    const WORKERS: usize = 4;
    const ROUNDS: usize = 40;
    let server = TestServer::start_with(engine, |config| {
        config.database_max_connections = 10;
    })
    .await;
    let operator = server.operator().await;
    server.cluster(&operator, 2).await;
    let tenant = server.signup("racer").await;
    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        let (http, base, tenant) = (server.http.clone(), server.base.clone(), tenant.clone());
        workers.push(tokio::spawn(async move {
            let orders = format!("{base}/api/v1/orgs/{}/orders", tenant.org_id);
            for _ in 0..ROUNDS {
                let created: Value = http
                    .post(&orders)
                    .bearer_auth(&tenant.token)
                    .json(&json!({ "instance_type": "h100x1" }))
                    .send()
                    .await
                    .expect("create")
                    .json()
                    .await
                    .expect("order");
                let id = created["id"].as_str().expect("order id");
                let cancelled = http
                    .post(format!("{orders}/{id}/cancel"))
                    .bearer_auth(&tenant.token)
                    .send()
                    .await
                    .expect("cancel");
                assert_eq!(cancelled.status(), StatusCode::OK);
            }
        }));
    }
    for worker in workers {
        worker.await.expect("worker");
    }
    let live = "SELECT COUNT(*) FROM allocations WHERE state <> 'released'";
    for _ in 0..200 {
        if server.count(live).await == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let leaked = server
        .count(
            "SELECT COUNT(*) FROM allocations a JOIN orders o ON o.id = a.order_id \
             WHERE a.state = 'active' AND o.status = 'cancelled'",
        )
        .await;
    assert_eq!(leaked, 0, "cancelled orders kept active allocations");
    assert_eq!(server.count(live).await, 0, "allocations never released");
    assert_eq!(server.count("SELECT COUNT(*) FROM gpu_claims").await, 0);
    assert_eq!(
        server
            .count("SELECT COUNT(*) FROM orders WHERE status <> 'cancelled' OR ended_at IS NULL")
            .await,
        0,
        "every order is cancelled and ended"
    );
    // The safety net had nothing to catch: the cancels themselves were right.
    assert_eq!(
        server
            .count("SELECT COUNT(*) FROM audit_log WHERE action = 'allocation.reclaim'")
            .await,
        0
    );
    let next = server
        .order(&tenant, json!({ "instance_type": "h100x8" }))
        .await;
    server.wait_status(&tenant, next, "running").await;
}

/// An ended order whose allocation stayed active (as an older version's
/// cancel race left them) gets its GPUs back within a reclaim pass, logged.
async fn gpus_still_held_by_an_ended_order_are_reclaimed(engine: Engine) {
    use gantry_entities::order;
    use gantry_types::classes::OrderStatus;
    use sea_orm::sea_query::Expr;
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 1).await;
    let tenant = server.signup("a").await;
    let id = server
        .order(&tenant, json!({ "instance_type": "h100x8" }))
        .await;
    server.wait_status(&tenant, id, "running").await;
    let now = server.state.clock.now();
    order::Entity::update_many()
        .col_expr(order::Column::Status, Expr::value(OrderStatus::Cancelled))
        .col_expr(order::Column::EndedAt, Expr::value(Some(now)))
        .filter(order::Column::Id.eq(id))
        .exec(server.db())
        .await
        .expect("end the order behind the allocation's back");
    server.state.clock.advance(chrono::TimeDelta::seconds(11));
    server.state.scheduler.wake();
    let free = "SELECT COUNT(*) FROM gpu_claims";
    for _ in 0..200 {
        if server.count(free).await == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(server.count(free).await, 0, "the GPUs were never reclaimed");
    assert_eq!(
        server
            .count("SELECT COUNT(*) FROM allocations WHERE state <> 'released'")
            .await,
        0
    );
    assert_eq!(
        server
            .count(&format!(
                "SELECT COUNT(*) FROM audit_log WHERE action = 'allocation.reclaim' \
                 AND target_id = '{id}'"
            ))
            .await,
        1,
        "the reclaim is audited"
    );
    let next = server
        .order(&tenant, json!({ "instance_type": "h100x8" }))
        .await;
    server.wait_status(&tenant, next, "running").await;
}

/// Sends every request at once and returns the statuses.
async fn futures_join(
    requests: Vec<
        impl std::future::Future<Output = reqwest::Result<reqwest::Response>> + Send + 'static,
    >,
) -> Vec<StatusCode> {
    let handles: Vec<_> = requests.into_iter().map(tokio::spawn).collect();
    let mut statuses = Vec::new();
    for handle in handles {
        statuses.push(handle.await.expect("task").expect("response").status());
    }
    statuses
}

async fn draining_a_node_moves_its_work(engine: Engine) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 2).await;
    let tenant = server.signup("tenant").await;
    let id = server
        .order(&tenant, json!({ "instance_type": "h100x8" }))
        .await;
    let first = server.wait_status(&tenant, id, "running").await;
    let node_id = first["placement"][0]["node_id"]
        .as_str()
        .expect("node")
        .to_owned();
    let from = first["placement"][0]["node_name"]
        .as_str()
        .expect("name")
        .to_owned();

    // A reason past its limit is refused, and the node is left as it was.
    server
        .post(
            &format!(
                "/api/v1/admin/nodes/{node_id}/drain?reason={}",
                "x".repeat(501)
            ),
            &operator.token,
            json!({}),
        )
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    let untouched = server
        .get(&format!("/api/v1/admin/nodes/{node_id}"), &operator.token)
        .await;
    assert_eq!(untouched.body["state"], "ready");
    assert_eq!(untouched.body["state_reason"], Value::Null);
    let drained = server
        .post(
            &format!("/api/v1/admin/nodes/{node_id}/drain?reason=PSU%20swap%20in%20rack%203"),
            &operator.token,
            json!({}),
        )
        .await;
    drained.expect(StatusCode::OK);
    assert_eq!(drained.body["state"], "draining");
    assert_eq!(drained.body["state_reason"], "PSU swap in rack 3");
    let moved = server
        .wait_order(&tenant, id, "running elsewhere", |o| {
            o["status"] == "running"
                && o["placement"][0]["node_name"].as_str() != Some(from.as_str())
        })
        .await;
    assert_eq!(moved["attempts"], 2);
    // Its attempts say why the first stopped and where each ran; its run
    // time counts the first attempt's running only, and the second's from
    // when it came up.
    let attempts = server
        .get(
            &format!("/api/v1/orgs/{}/orders/{id}/attempts", tenant.org_id),
            &tenant.token,
        )
        .await;
    attempts.expect(StatusCode::OK);
    let [first, second] = attempts.body.as_array().expect("a list").as_slice() else {
        panic!("two attempts: {}", attempts.body);
    };
    assert_eq!(first["stop_cause"], "node_drained");
    assert_eq!(first["outcome"], "preempted");
    assert_eq!(first["nodes"][0]["node_name"], json!(from));
    assert!(first["ended_at"].is_string() && first["placed_at"].is_string());
    assert_eq!(second["stop_cause"], Value::Null);
    assert_eq!(second["ended_at"], Value::Null);
    assert_eq!(moved["running_since"], second["started_at"]);
    let millis = |at: &Value| {
        chrono::DateTime::parse_from_rfc3339(at.as_str().unwrap_or_default())
            .map(|t| t.timestamp_millis())
            .unwrap_or_default()
    };
    assert_eq!(
        moved["run_seconds"],
        json!((millis(&first["ended_at"]) - millis(&first["started_at"])) / 1000)
    );
    // The tenant is told, in its own audit log, which node its work left.
    let log = server
        .get(
            &format!("/api/v1/orgs/{}/audit-log", tenant.org_id),
            &tenant.token,
        )
        .await;
    let notice = log
        .items()
        .iter()
        .find(|e| e["action"] == "order.moved_off_node")
        .cloned()
        .expect("a notice in the tenant's log");
    assert_eq!(notice["target_id"], json!(id));
    assert_eq!(notice["details"]["nodes"], json!([from]));
    assert!(
        notice["details"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains(&from))
    );
    // A drained node with nothing on it can be removed; a busy one cannot.
    for _ in 0..100 {
        let node = server
            .get(&format!("/api/v1/admin/nodes/{node_id}"), &operator.token)
            .await;
        if node.body["gpus"]
            .as_array()
            .is_some_and(|g| g.iter().all(|g| g["order_id"].is_null()))
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    server
        .delete(&format!("/api/v1/admin/nodes/{node_id}"), &operator.token)
        .await
        .expect(StatusCode::NO_CONTENT);
    let busy = moved["placement"][0]["node_id"]
        .as_str()
        .expect("node")
        .to_owned();
    server
        .delete(&format!("/api/v1/admin/nodes/{busy}"), &operator.token)
        .await
        .expect_problem(StatusCode::CONFLICT, "node_busy");
}

async fn one_replica_runs_the_loop_and_hands_it_over(engine: Engine) {
    let first = TestServer::start(engine).await;
    let operator = first.operator().await;
    first.cluster(&operator, 1).await;
    let second = first.replica(|_| {}).await;
    let tenant = first.signup("tenant").await;
    let id = first
        .order(&tenant, json!({ "instance_type": "h100x1" }))
        .await;
    first.wait_status(&tenant, id, "running").await;
    let leaders = [&first, &second]
        .iter()
        .filter(|s| s.state.scheduler.is_leader())
        .count();
    assert_eq!(leaders, 1, "exactly one replica runs the loop");
    let (mut leader, follower) = if first.state.scheduler.is_leader() {
        (first, second)
    } else {
        (second, first)
    };
    // Shut down as SIGTERM would; the database stays for the follower.
    leader.stop().await;
    // The follower takes the lease over and places new work.
    let next = follower
        .order(&tenant, json!({ "instance_type": "h100x1" }))
        .await;
    follower.wait_status(&tenant, next, "running").await;
    assert!(follower.state.scheduler.is_leader());
    assert!(!leader.state.scheduler.is_leader());
    // It kept its copy of the rows warm from the change log while it
    // followed: taking over read nothing whole, and the copy it leads with
    // equals a full read.
    let checks = crate::change_log::check(&follower).await;
    assert_eq!(checks.full_reads, 1, "{checks:?}");
    assert_eq!(checks.differing, 0, "{checks:?}");
}

/// Each replica keeps the catalog, quotas and node sizes in memory for
/// admission; a change made through one replica binds orders made through
/// the other from the next request on.
async fn admission_sees_changes_made_through_another_replica_at_once(engine: Engine) {
    let first = TestServer::start(engine).await;
    let operator = first.operator().await;
    first.cluster(&operator, 1).await;
    let second = first.replica(|_| {}).await;
    let tenant = first.signup("tenant").await;
    let orders = format!("/api/v1/orgs/{}/orders", tenant.org_id);
    let two = json!({ "instance_type": "h100x8", "node_count": 2 });
    second
        .post(&orders, &tenant.token, two.clone())
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "never_fits");
    first.add_nodes(&operator, "r1", 2..=2).await;
    second
        .post(&orders, &tenant.token, two)
        .await
        .expect(StatusCode::CREATED);

    let quotas = format!("/api/v1/admin/orgs/{}/quotas", tenant.org_id);
    first
        .put(
            &quotas,
            &operator.token,
            json!({ "quotas": [{ "gpu_model": "H100", "guaranteed_gpus": 0, "max_gpus": 4 }] }),
        )
        .await
        .expect(StatusCode::OK);
    let eight = json!({ "instance_type": "h100x8" });
    second
        .post(&orders, &tenant.token, eight.clone())
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "quota_exceeded");
    first
        .put(&quotas, &operator.token, json!({ "quotas": [] }))
        .await
        .expect(StatusCode::OK);
    second
        .post(&orders, &tenant.token, eight)
        .await
        .expect(StatusCode::CREATED);
}

/// On PostgreSQL an order made through a replica that does not lead
/// wakes the leader's loop at once (a notification from the change log),
/// not at its next interval, which here is a minute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_through_another_replica_wakes_the_leader_at_once() {
    if crate::support::postgres_skipped() {
        return;
    }
    let minute = |config: &mut gantry_core::config::Config| config.scheduler_interval_ms = 60_000;
    let first = TestServer::start_with(Engine::Postgres, minute).await;
    let operator = first.operator().await;
    first.cluster(&operator, 1).await;
    let tenant = first.signup("tenant").await;
    let warm = first
        .order(&tenant, json!({ "instance_type": "h100x1" }))
        .await;
    first.wait_status(&tenant, warm, "running").await;
    assert!(first.state.scheduler.is_leader());
    let second = first.replica(minute).await;
    let asked = std::time::Instant::now();
    let id = second
        .order(&tenant, json!({ "instance_type": "h100x1" }))
        .await;
    second.wait_status(&tenant, id, "running").await;
    assert!(
        asked.elapsed() < std::time::Duration::from_secs(15),
        "started after {:?}, as if by the interval",
        asked.elapsed()
    );
    assert!(!second.state.scheduler.is_leader());
}

/// Two nodes half full of movable work, 4 GPUs free on each, and a
/// whole-node order of the same kind that can only wait on fragmentation
/// (or for a move, where the scheduler makes them): the halves
/// left, where each runs, and the waiting order. `kind` adds its fields to
/// every order.
async fn fragmented(
    server: &TestServer,
    tenant: &Tenant,
    kind: Value,
) -> (Vec<(Uuid, String)>, Uuid) {
    let spot = |instance_type: &str| {
        let mut order = kind.clone();
        order["instance_type"] = json!(instance_type);
        order
    };
    // Four halves fill both nodes; cancelling one on each leaves 4 GPUs
    // free on each.
    let mut halves = Vec::new();
    for _ in 0..4 {
        let id = server.order(tenant, spot("h100x4")).await;
        let running = server.wait_status(tenant, id, "running").await;
        halves.push((id, gpu_ids(&running)[0].0.clone()));
    }
    let mut nodes = HashSet::new();
    let mut kept = Vec::new();
    for (id, node) in halves {
        if nodes.insert(node.clone()) {
            server.cancel(tenant, id).await;
        } else {
            kept.push((id, node));
        }
    }
    assert_eq!(nodes.len(), 2);
    let whole = server.order(tenant, spot("h100x8")).await;
    (kept, whole)
}

async fn what_if_shows_a_defragmentation_plan_and_its_effect(engine: Engine) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 2).await;
    let tenant = server.signup("tenant").await;
    let spot = json!({ "priority_class": "preemptible", "pricing_class": "spot" });
    let (_, whole) = fragmented(&server, &tenant, spot).await;
    server.wait_reason(&tenant, whole, "fragmentation").await;
    let before = server.table_counts().await;
    let answer = server
        .post(
            "/api/v1/admin/what-if",
            &operator.token,
            json!({ "defragment": { "budget_gpu_seconds_per_org_hour": 1_000_000.0 } }),
        )
        .await;
    answer.expect(StatusCode::OK);
    assert_eq!(answer.body["before"]["starts"], 0);
    assert_eq!(answer.body["after"]["starts"], 1);
    assert_eq!(answer.body["after"]["started_gpus"], 8.0);
    let plan = &answer.body["defragmentation"];
    let step = &plan["steps"][0];
    assert_eq!(step["order_id"], whole.to_string());
    let moves = step["moves"].as_array().expect("moves");
    assert_eq!(moves.len(), 1);
    let moved = &moves[0];
    assert_ne!(moved["from_node"], moved["to_node"]);
    assert_eq!(step["nodes"], json!([moved["from_node"]]));
    // Spot work without checkpoints loses what it did, and the grace.
    assert_eq!(moved["checkpoint"], false);
    assert!(
        moved["lost_gpu_seconds"]
            .as_f64()
            .is_some_and(|s| s >= 4.0 * 30.0)
    );
    assert_eq!(plan["lost_gpu_seconds"], moved["lost_gpu_seconds"]);
    // A budget too small for the move helps nothing; the question changes
    // nothing either way.
    let small = server
        .post(
            "/api/v1/admin/what-if",
            &operator.token,
            json!({ "defragment": { "budget_gpu_seconds_per_org_hour": 1.0 } }),
        )
        .await;
    small.expect(StatusCode::OK);
    assert_eq!(small.body["after"]["starts"], 0);
    assert_eq!(
        small.body["defragmentation"]["unhelped"],
        json!([whole.to_string()])
    );
    let wrong = server
        .post(
            "/api/v1/admin/what-if",
            &operator.token,
            json!({ "defragment": { "budget_gpu_seconds_per_org_hour": -1.0 } }),
        )
        .await;
    wrong.expect(StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(server.table_counts().await, before);
}

async fn order_of(server: &TestServer, tenant: &Tenant, id: Uuid) -> Value {
    server
        .get(
            &format!("/api/v1/orgs/{}/orders/{id}", tenant.org_id),
            &tenant.token,
        )
        .await
        .body
}

async fn the_scheduler_moves_checkpointable_work_when_defragmentation_is_on(engine: Engine) {
    let server = TestServer::start_with(engine, |config| {
        config.defrag_budget_gpu_seconds_per_org_hour = 1_000_000.0;
    })
    .await;
    let operator = server.operator().await;
    server.cluster(&operator, 2).await;
    let tenant = server.signup("tenant").await;
    // Standard work that checkpoints: a standard order may not preempt it,
    // but the scheduler may move it.
    let (halves, whole) = fragmented(&server, &tenant, json!({ "checkpointable": true })).await;
    assert_eq!(
        order_of(&server, &tenant, halves[0].0).await["checkpointable"],
        true
    );
    // One half is told to stop, runs again elsewhere, and the whole-node
    // order gets the node it left.
    let order = |id: Uuid| order_of(&server, &tenant, id);
    let reason = format!("moved to make room for {whole}");
    let mut moved = None;
    for _ in 0..400 {
        for (id, _) in &halves {
            let o = order(*id).await;
            if o["pending_reason"] == reason.as_str() || o["attempts"].as_i64() > Some(1) {
                moved = Some(*id);
            }
        }
        if moved.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let moved = moved.expect("the scheduler moved a half");
    // Past the grace period the half stops.
    server.state.clock.advance(chrono::TimeDelta::seconds(31));
    let started = server.wait_status(&tenant, whole, "running").await;
    assert_eq!(gpu_ids(&started).len(), 8);
    let again = server.wait_status(&tenant, moved, "running").await;
    assert_eq!(again["attempts"], 2);
    let (left, _) = halves
        .iter()
        .find(|(id, _)| *id != moved)
        .expect("two halves");
    assert_eq!(order(*left).await["attempts"], 1);
}

async fn what_if_shows_what_more_nodes_would_start(engine: Engine) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 1).await;
    let tenant = server.signup("tenant").await;
    let first = server
        .order(&tenant, json!({ "instance_type": "h100x8" }))
        .await;
    server.wait_status(&tenant, first, "running").await;
    let second = server
        .order(&tenant, json!({ "instance_type": "h100x8" }))
        .await;
    server.wait_reason(&tenant, second, "capacity").await;
    let before = server.table_counts().await;
    let answer = server
        .post(
            "/api/v1/admin/what-if",
            &operator.token,
            json!({ "extra_nodes": [{ "instance_type": "h100x8", "region": "r1", "count": 1 }] }),
        )
        .await;
    answer.expect(StatusCode::OK);
    assert_eq!(answer.body["before"]["starts"], 0);
    assert_eq!(answer.body["before"]["waiting"], 1);
    assert_eq!(answer.body["after"]["starts"], 1);
    assert_eq!(answer.body["after"]["started_gpus"], 8.0);
    // A quota of zero for the tenant would leave it waiting even with the node.
    let capped = server
        .post(
            "/api/v1/admin/what-if",
            &operator.token,
            json!({
                "extra_nodes": [{ "instance_type": "h100x8", "region": "r1", "count": 1 }],
                "quotas": [{ "org_id": tenant.org_id, "gpu_model": "H100", "guaranteed_gpus": 0, "max_gpus": 8 }],
            }),
        )
        .await;
    capped.expect(StatusCode::OK);
    assert_eq!(capped.body["after"]["starts"], 0);
    assert_eq!(
        before,
        server.table_counts().await,
        "a what-if changes nothing"
    );
    server
        .post(
            "/api/v1/admin/what-if",
            &operator.token,
            json!({ "extra_nodes": [{ "instance_type": "a100x8", "region": "r1", "count": 1 }] }),
        )
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "unknown_reference");
    server
        .post("/api/v1/admin/what-if", &tenant.token, json!({}))
        .await
        .expect_problem(StatusCode::FORBIDDEN, "forbidden");
}
