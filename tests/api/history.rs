//! `GET /admin/history`: the leader folds what it publishes into one point
//! per interval, and the operator's charts read the same figures back in
//! hour, day and week steps.

use std::time::Duration;

use chrono::TimeDelta;
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::{Engine, Tenant, TestServer};

crate::on_both_engines!(
    history_keeps_what_the_leader_saw_per_interval,
    history_is_for_operators_and_names_its_ranges,
);

/// The series of one metric and subject, as `(gpu_model or org_id)`.
fn series<'a>(history: &'a Value, metric: &str, subject: &str) -> Option<&'a Value> {
    history["series"].as_array()?.iter().find(|s| {
        s["metric"] == metric
            && (s["gpu_model"] == subject
                || s["org_id"] == subject
                || (subject.is_empty() && s["gpu_model"].is_null() && s["org_id"].is_null()))
    })
}

fn points(history: &Value, metric: &str, subject: &str) -> Vec<f64> {
    series(history, metric, subject)
        .and_then(|s| s["points"].as_array())
        .map(|p| p.iter().filter_map(|p| p["value"].as_f64()).collect())
        .unwrap_or_default()
}

async fn history(server: &TestServer, operator: &Tenant, range: &str) -> Value {
    let reply = server
        .get(
            &format!("/api/v1/admin/history?range={range}"),
            &operator.token,
        )
        .await;
    reply.expect(StatusCode::OK);
    reply.body.clone()
}

/// Moves the domain clock into the next interval and waits for the
/// leader to write the one it leaves.
async fn close_interval(server: &TestServer) {
    let intervals = || server.count("SELECT COUNT(DISTINCT at) FROM history_samples");
    let before = intervals().await;
    server.state.clock.advance(TimeDelta::seconds(61));
    for _ in 0..200 {
        if intervals().await > before {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the leader wrote no history for the interval");
}

async fn history_keeps_what_the_leader_saw_per_interval(engine: Engine) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 2).await;
    let small = server.signup("small").await;
    let large = server.signup("large").await;
    let four = server
        .order(&small, json!({ "instance_type": "h100x4" }))
        .await;
    server.wait_status(&small, four, "running").await;
    let whole = server
        .order(&large, json!({ "instance_type": "h100x8" }))
        .await;
    server.wait_status(&large, whole, "running").await;
    let waiting = server
        .order(&large, json!({ "instance_type": "h100x8" }))
        .await;
    server
        .wait_order(&large, waiting, "a reason to wait", |o| {
            o["pending_reason"].is_string()
        })
        .await;

    // The interval open now saw the orders arrive; the next one sees only
    // the steady state.
    close_interval(&server).await;
    close_interval(&server).await;
    let seen = history(&server, &operator, "hour").await;
    let last = |metric: &str, subject: &str| {
        points(&seen, metric, subject)
            .last()
            .copied()
            .unwrap_or_else(|| panic!("no {metric} {subject} in {seen}"))
    };
    assert_eq!(last("gpus_allocated", "H100"), 12.0);
    assert_eq!(last("gpus_free", "H100"), 4.0);
    // Four free GPUs on a node that holds four: no whole node is free.
    assert_eq!(last("gpus_schedulable", "H100"), 0.0);
    assert_eq!(last("pending_orders", ""), 1.0);
    let hours = |tenant: &Tenant| last("gpu_hours", &tenant.org_id.to_string());
    assert!((hours(&small) - 4.0 / 60.0).abs() < 1e-9, "{seen}");
    assert!((hours(&large) - 8.0 / 60.0).abs() < 1e-9, "{seen}");
    let large_series = series(&seen, "gpu_hours", &large.org_id.to_string()).expect("large");
    assert_eq!(large_series["organization"], "large org");
    assert!(large_series["gpu_model"].is_null());
    // The simulated nodes report no telemetry, and no order started in the
    // steady interval: neither series makes up a figure.
    assert!(points(&seen, "gpu_utilization_ratio", "H100").is_empty());
    assert_eq!(seen["step_seconds"], 60);
    assert_eq!(seen["interval_seconds"], 60);

    // Longer ranges sum the same intervals into wider steps.
    let day = history(&server, &operator, "day").await;
    assert_eq!(day["step_seconds"], 900);
    let week = history(&server, &operator, "week").await;
    assert_eq!(week["step_seconds"], 3600);
    for wider in [&day, &week] {
        for tenant in [&small, &large] {
            let org = tenant.org_id.to_string();
            let total = |h: &Value| points(h, "gpu_hours", &org).iter().sum::<f64>();
            assert!((total(wider) - total(&seen)).abs() < 1e-9, "{wider}");
        }
    }

    // Rows past the retention are dropped when the next interval is written.
    server.state.clock.advance(TimeDelta::days(9));
    for _ in 0..200 {
        let rows = server
            .count("SELECT COUNT(*) FROM history_samples WHERE metric = 'gpu_hours'")
            .await;
        if rows <= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        server
            .count("SELECT COUNT(*) FROM history_samples WHERE metric = 'gpu_hours'")
            .await
            <= 2,
        "only the interval written after the jump is left"
    );
}

async fn history_is_for_operators_and_names_its_ranges(engine: Engine) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    let tenant = server.signup("tenant").await;
    server
        .get("/api/v1/admin/history", &tenant.token)
        .await
        .expect_problem(StatusCode::FORBIDDEN, "forbidden");
    server
        .get("/api/v1/admin/history?range=year", &operator.token)
        .await
        .expect_problem(StatusCode::BAD_REQUEST, "invalid_query");
    let empty = history(&server, &operator, "hour").await;
    assert_eq!(empty["range"], "hour");
    assert_eq!(empty["series"], json!([]));
}
