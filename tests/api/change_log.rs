//! The scheduling leader keeps the cluster and queue in memory and follows
//! the change log instead of reading everything each cycle. After a long
//! random run its copy matches a full read, and the engine input it keeps
//! from cycle to cycle matches one built whole; a write the log missed is
//! found by the consistency check and repaired.

use std::collections::HashMap;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;
use uuid::Uuid;

use crate::support::{Engine, TestServer};
use gantry_core::handles::scheduler::Checks;
use gantry_entities::{order, waiting_count};
use gantry_types::classes::OrderStatus;
use sea_orm::sea_query::Expr;
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QuerySelect};

crate::on_both_engines!(
    the_leaders_copy_matches_the_database_after_a_random_run,
    a_write_the_log_missed_is_found_and_repaired,
    heartbeats_log_only_what_changed,
    beats_at_once_are_each_written,
);

/// A small seeded generator, so a failing run can be replayed.
struct Steps(u64);

impl Steps {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

/// Has the leader compare its copy with a full read now; answers the
/// counts after that check.
pub(crate) async fn check(server: &TestServer) -> Checks {
    let mut checks = server.state.scheduler.consistency_checks();
    let before = checks.borrow().run;
    server.state.scheduler.check_consistency_soon();
    let after = tokio::time::timeout(Duration::from_secs(30), checks.wait_for(|c| c.run > before))
        .await
        .expect("a consistency check within 30 s")
        .expect("the scheduler is running");
    *after
}

async fn the_leaders_copy_matches_the_database_after_a_random_run(engine: Engine) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 6).await;
    crate::reservations::reserved_prices(&server, &operator).await;
    let tenants = [server.signup("a").await, server.signup("b").await];
    let nodes: Vec<Uuid> = server
        .get("/api/v1/admin/nodes", &operator.token)
        .await
        .items()
        .iter()
        .map(|n| Uuid::parse_str(n["id"].as_str().expect("node id")).expect("uuid"))
        .collect();
    let mut steps = Steps(42);
    let mut orders: Vec<(usize, Uuid)> = Vec::new();
    let mut reservations: Vec<(usize, Uuid)> = Vec::new();
    let types = ["h100x1", "h100x4", "h100x8"];
    let priorities = ["preemptible", "batch", "standard", "production"];
    for step in 0..240 {
        match steps.below(12) {
            0..=4 => {
                let who = usize::try_from(steps.below(2)).expect("index");
                let mut body = json!({
                    "instance_type": types[usize::try_from(steps.below(3)).expect("index")],
                    "priority_class": priorities[usize::try_from(steps.below(4)).expect("index")],
                });
                if steps.below(2) == 0 {
                    body["duration_seconds"] = json!(600);
                }
                let created = server
                    .post(
                        &format!("/api/v1/orgs/{}/orders", tenants[who].org_id),
                        &tenants[who].token,
                        body,
                    )
                    .await;
                // A full quota refuses some; what matters is what is stored.
                if created.status == StatusCode::CREATED {
                    orders.push((who, created.id("/id")));
                }
            }
            5 | 6 if !orders.is_empty() => {
                let pick = usize::try_from(steps.below(orders.len() as u64)).expect("index");
                let (who, id) = orders[pick];
                let tenant = &tenants[who];
                // Orders that already ended answer 409; that is fine here.
                server
                    .post(
                        &format!("/api/v1/orgs/{}/orders/{id}/cancel", tenant.org_id),
                        &tenant.token,
                        json!({}),
                    )
                    .await;
            }
            7 => {
                let node = nodes[usize::try_from(steps.below(nodes.len() as u64)).expect("index")];
                let action = ["drain", "cordon", "uncordon"]
                    [usize::try_from(steps.below(3)).expect("index")];
                server
                    .post(
                        &format!("/api/v1/admin/nodes/{node}/{action}?force=true"),
                        &operator.token,
                        json!({}),
                    )
                    .await
                    .expect(StatusCode::OK);
            }
            8 => {
                server
                    .put(
                        &format!("/api/v1/admin/orgs/{}/quotas", tenants[0].org_id),
                        &operator.token,
                        json!({ "quotas": [{
                            "gpu_model": "H100",
                            "guaranteed_gpus": 0,
                            "max_gpus": 8 * (1 + steps.below(4)),
                        }] }),
                    )
                    .await
                    .expect(StatusCode::OK);
            }
            9 => {
                // A reservation a few hours out, or a change to one: its
                // window and status are what the leader follows.
                let who = usize::try_from(steps.below(2)).expect("index");
                let tenant = &tenants[who];
                let path = format!("/api/v1/orgs/{}/reservations", tenant.org_id);
                match (steps.below(3), reservations.is_empty()) {
                    (0, _) | (_, true) => {
                        let start = crate::reservations::hour_after(
                            server.state.clock.now(),
                            i64::try_from(steps.below(6)).expect("hours"),
                        );
                        let made = server
                            .post(
                                &path,
                                &tenant.token,
                                json!({
                                    "instance_type": "h100x8", "region": "r1",
                                    "starts_at": start,
                                    "ends_at": start + chrono::TimeDelta::hours(2),
                                }),
                            )
                            .await;
                        // No room is a fine answer; what matters is what is stored.
                        if made.status == StatusCode::CREATED {
                            reservations.push((who, made.id("/id")));
                        }
                    }
                    (1, false) => {
                        let (owner, id) =
                            reservations[usize::try_from(steps.below(reservations.len() as u64))
                                .expect("index")];
                        let owner = &tenants[owner];
                        server
                            .post(
                                &format!("/api/v1/orgs/{}/reservations/{id}/cancel", owner.org_id),
                                &owner.token,
                                json!({}),
                            )
                            .await;
                    }
                    _ => {
                        let (owner, id) =
                            reservations[usize::try_from(steps.below(reservations.len() as u64))
                                .expect("index")];
                        let owner = &tenants[owner];
                        let current = server
                            .get(
                                &format!("/api/v1/orgs/{}/reservations/{id}", owner.org_id),
                                &owner.token,
                            )
                            .await;
                        let ends: chrono::DateTime<chrono::Utc> = current.body["ends_at"]
                            .as_str()
                            .and_then(|t| t.parse().ok())
                            .expect("an end");
                        server
                            .post(
                                &format!("/api/v1/orgs/{}/reservations/{id}/extend", owner.org_id),
                                &owner.token,
                                json!({ "ends_at": ends + chrono::TimeDelta::hours(1) }),
                            )
                            .await;
                    }
                }
            }
            10 => {
                let node = nodes[usize::try_from(steps.below(nodes.len() as u64)).expect("index")];
                let now = server.state.clock.now();
                server
                    .post(
                        "/api/v1/admin/maintenance?force=true",
                        &operator.token,
                        json!({
                            "node": node.to_string(),
                            "starts_at": now + chrono::TimeDelta::minutes(i64::try_from(steps.below(120)).expect("minutes")),
                            "ends_at": now + chrono::TimeDelta::hours(3),
                            "reason": "random maintenance",
                        }),
                    )
                    .await
                    .expect(StatusCode::CREATED);
            }
            _ => {
                // Orders with a duration end when it has passed.
                server.state.clock.advance(chrono::TimeDelta::minutes(
                    i64::try_from(steps.below(12)).expect("minutes"),
                ));
                server.state.scheduler.wake();
            }
        }
        if step % 60 == 59 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let checks = check(&server).await;
            assert_eq!(checks.differing, 0, "after step {step}");
            assert_eq!(checks.input_differing, 0, "after step {step}");
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let checks = check(&server).await;
    assert_eq!(checks.differing, 0);
    assert_eq!(checks.input_differing, 0);
    assert!(checks.run >= 5, "{checks:?}");
    // The run did what it was meant to: work started, ended and waited.
    assert!(server.count("SELECT COUNT(*) FROM allocations").await > 20);
    assert!(
        server
            .count("SELECT COUNT(*) FROM orders WHERE status IN ('completed', 'cancelled')")
            .await
            > 10
    );
    assert!(server.count("SELECT COUNT(*) FROM change_log").await > 100);
    assert!(server.count("SELECT COUNT(*) FROM reservations").await > 3);
    // Orders by status as the metrics publish them, folded from the moves
    // the triggers log, equal a count of every order; and again once
    // everything left is cancelled.
    assert_eq!(order_counts(&server).await, counted(&server).await);
    assert_eq!(
        waiting_folded(&server).await,
        waiting_counted(&server).await
    );
    for (who, id) in &orders {
        let tenant = &tenants[*who];
        server
            .post(
                &format!("/api/v1/orgs/{}/orders/{id}/cancel", tenant.org_id),
                &tenant.token,
                json!({}),
            )
            .await;
    }
    let cancelled = order_counts(&server).await;
    assert_eq!(cancelled, counted(&server).await);
    assert_eq!(cancelled.get(&OrderStatus::Queued), None, "{cancelled:?}");
    assert_eq!(
        waiting_folded(&server).await,
        waiting_counted(&server).await
    );
    assert!(
        server
            .count("SELECT COUNT(*) FROM change_log WHERE entity = 'maintenance_windows'")
            .await
            > 3
    );
}

/// Orders by status, as the metrics publish them; statuses no order is in
/// left out.
async fn order_counts(server: &TestServer) -> HashMap<OrderStatus, i64> {
    gantry_monitoring::fleet::order_counts(server.db())
        .await
        .expect("order counts")
        .into_iter()
        .filter(|(_, orders)| *orders != 0)
        .collect()
}

/// Orders by status, counted one by one.
async fn counted(server: &TestServer) -> HashMap<OrderStatus, i64> {
    order::Entity::find()
        .select_only()
        .column(order::Column::Status)
        .column_as(order::Column::Id.count(), "count")
        .group_by(order::Column::Status)
        .into_tuple()
        .all(server.db())
        .await
        .expect("grouped count")
        .into_iter()
        .collect()
}

/// Waiting orders per organization and project, as the intake's limit
/// reads them once the moves are folded; empty counts left out.
async fn waiting_folded(server: &TestServer) -> HashMap<(Uuid, Option<Uuid>), i64> {
    gantry_core::handles::waiting::fold(server.db())
        .await
        .expect("fold");
    let moves = server.count("SELECT COUNT(*) FROM waiting_moves").await;
    assert_eq!(moves, 0, "a fold leaves no move behind");
    waiting_count::Entity::find()
        .all(server.db())
        .await
        .expect("waiting counts")
        .into_iter()
        .filter(|c| c.orders != 0)
        .map(|c| ((c.org_id, c.project_id), c.orders))
        .collect()
}

/// Waiting orders per organization and project, counted one by one.
async fn waiting_counted(server: &TestServer) -> HashMap<(Uuid, Option<Uuid>), i64> {
    order::Entity::find()
        .select_only()
        .column(order::Column::OrgId)
        .column(order::Column::ProjectId)
        .column_as(order::Column::Id.count(), "count")
        .filter(order::Column::Status.is_in(gantry_core::handles::waiting::WAITING))
        .group_by(order::Column::OrgId)
        .group_by(order::Column::ProjectId)
        .into_tuple::<(Uuid, Option<Uuid>, i64)>()
        .all(server.db())
        .await
        .expect("grouped count")
        .into_iter()
        .map(|(org, project, orders)| ((org, project), orders))
        .collect()
}

async fn a_write_the_log_missed_is_found_and_repaired(engine: Engine) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 1).await;
    let tenant = server.signup("tenant").await;
    let blocker = server
        .order(&tenant, json!({ "instance_type": "h100x8" }))
        .await;
    server.wait_status(&tenant, blocker, "running").await;
    let waiting = server
        .order(&tenant, json!({ "instance_type": "h100x8" }))
        .await;
    server
        .wait_order(&tenant, waiting, "a reason to wait", |o| {
            o["pending_reason"].is_string()
        })
        .await;
    assert_eq!(check(&server).await.differing, 0);

    // A write behind the log's back, as a buggy path or a hand edit would
    // make: the waiting order is cancelled with the trigger switched off.
    let off = match engine {
        Engine::Sqlite => "DROP TRIGGER orders_change_log_update",
        Engine::Postgres => "ALTER TABLE orders DISABLE TRIGGER orders_change_log",
    };
    server
        .db()
        .execute_unprepared(off)
        .await
        .expect("trigger off");
    order::Entity::update_many()
        .col_expr(order::Column::Status, Expr::value("cancelled"))
        .filter(order::Column::Id.eq(waiting))
        .exec(server.db())
        .await
        .expect("cancelled behind the log's back");
    let checks = check(&server).await;
    assert_eq!(checks.differing, 1, "the check finds the missed write");
    // Repaired: with the copy replaced by the full read, the freed node is
    // not handed to the cancelled order.
    server.cancel(&tenant, blocker).await;
    server.wait_status(&tenant, blocker, "cancelled").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        server
            .count("SELECT COUNT(*) FROM allocations WHERE state <> 'released'")
            .await,
        0
    );
    assert_eq!(check(&server).await.differing, 1, "no new difference");
}

/// A heartbeat is the most frequent write there is (every node, every 2 s):
/// one that changes nothing the scheduler plans with logs nothing, and one
/// that turns a GPU unhealthy logs that GPU alone.
async fn heartbeats_log_only_what_changed(engine: Engine) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 1).await;
    let credential = server.join_agent(&operator, "r1", "beating", 8).await;
    let beat = |unhealthy: Option<u32>| {
        let gpus: Vec<serde_json::Value> = (0..8)
            .map(|i| {
                json!({ "index": i, "utilization_pct": 10, "memory_used_mib": 100,
                        "temperature_c": 40, "power_w": 100, "healthy": Some(i) != unhealthy })
            })
            .collect();
        json!({ "gpus": gpus })
    };
    let logged = "SELECT COUNT(*) FROM change_log WHERE entity IN ('gpus', 'nodes')";
    server
        .post("/api/v1/agent/heartbeat", &credential, beat(None))
        .await
        .expect(StatusCode::OK);
    let before = server.count(logged).await;
    for _ in 0..3 {
        server
            .post("/api/v1/agent/heartbeat", &credential, beat(None))
            .await
            .expect(StatusCode::OK);
    }
    assert_eq!(server.count(logged).await, before, "steady heartbeats");
    server
        .post("/api/v1/agent/heartbeat", &credential, beat(Some(3)))
        .await
        .expect(StatusCode::OK);
    assert_eq!(
        server.count(logged).await,
        before + 1,
        "one GPU turned unhealthy"
    );
    let unhealthy = "SELECT COUNT(*) FROM gpus g JOIN nodes n ON n.id = g.node_id \
                     WHERE n.name = 'beating' AND NOT g.healthy";
    assert_eq!(server.count(unhealthy).await, 1);
    server
        .post("/api/v1/agent/heartbeat", &credential, beat(None))
        .await
        .expect(StatusCode::OK);
    assert_eq!(server.count(unhealthy).await, 0);
    assert_eq!(server.count(logged).await, before + 2, "and healthy again");
}

/// Beats of many nodes at once are written in batches: each node's time,
/// telemetry, GPU health and fabric address stand as its own beat said,
/// and a node marked unhealthy recovers with its next beat.
async fn beats_at_once_are_each_written(engine: Engine) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 1).await;
    let mut credentials = Vec::new();
    for i in 0..12 {
        credentials.push(
            server
                .join_agent(&operator, "r1", &format!("beat-{i}"), 8)
                .await,
        );
    }
    let beat = |i: usize, sick: bool| {
        let gpus: Vec<serde_json::Value> = (0..8)
            .map(|g| {
                json!({ "index": g, "utilization_pct": i, "memory_used_mib": 100,
                        "temperature_c": 40, "power_w": 100, "healthy": !(sick && g == 3) })
            })
            .collect();
        json!({ "gpus": gpus, "fabric_address": format!("10.9.0.{}", i + 1) })
    };
    let all_at_once = |sick: usize| {
        let server = &server;
        let credentials = &credentials;
        async move {
            futures_util::future::join_all(
                credentials
                    .iter()
                    .enumerate()
                    .map(|(i, c)| server.post("/api/v1/agent/heartbeat", c, beat(i, i == sick))),
            )
            .await
        }
    };
    for reply in all_at_once(5).await {
        reply.expect(StatusCode::OK);
        assert_eq!(reply.body["state"], "ready");
    }
    assert_eq!(
        server
            .count("SELECT COUNT(*) FROM gpu_telemetry t JOIN nodes n ON n.id = t.node_id WHERE n.name LIKE 'beat-%'")
            .await,
        12 * 8
    );
    assert_eq!(
        server
            .count("SELECT COUNT(*) FROM nodes WHERE name LIKE 'beat-%' AND last_heartbeat_at IS NOT NULL")
            .await,
        12
    );
    assert_eq!(
        server
            .count(
                "SELECT COUNT(*) FROM nodes WHERE name = 'beat-7' AND fabric_address = '10.9.0.8'"
            )
            .await,
        1,
        "each node keeps its own address"
    );
    let unhealthy = "SELECT COUNT(*) FROM gpus g JOIN nodes n ON n.id = g.node_id \
                     WHERE n.name LIKE 'beat-%' AND NOT g.healthy";
    assert_eq!(server.count(unhealthy).await, 1);
    assert_eq!(
        server
            .count(
                "SELECT COUNT(*) FROM gpus g JOIN nodes n ON n.id = g.node_id \
                    WHERE n.name = 'beat-5' AND g.\"index\" = 3 AND NOT g.healthy"
            )
            .await,
        1
    );
    let telemetry = "SELECT COUNT(*) FROM gpu_telemetry t JOIN nodes n ON n.id = t.node_id \
                     WHERE n.name = 'beat-9' AND t.utilization_pct = 9";
    assert_eq!(server.count(telemetry).await, 8, "each node's own figures");

    gantry_entities::node::Entity::update_many()
        .col_expr(
            gantry_entities::node::Column::State,
            Expr::value(gantry_types::classes::NodeState::Unhealthy),
        )
        .filter(gantry_entities::node::Column::Name.eq("beat-2"))
        .exec(server.db())
        .await
        .expect("mark a node unhealthy");
    for reply in all_at_once(usize::MAX).await {
        reply.expect(StatusCode::OK);
        assert_eq!(reply.body["state"], "ready");
    }
    assert_eq!(server.count(unhealthy).await, 0, "healthy again");
    assert_eq!(
        server
            .count("SELECT COUNT(*) FROM nodes WHERE name LIKE 'beat-%' AND state = 'ready'")
            .await,
        12,
        "the unhealthy node recovered"
    );
    assert_eq!(
        server
            .count(
                "SELECT COUNT(*) FROM node_events e JOIN nodes n ON n.id = e.node_id \
                    WHERE n.name = 'beat-2' AND e.kind = 'node_recovered'"
            )
            .await,
        1
    );
}
