//! Metering and the usage API: running time becomes usage records that
//! cover it exactly once, whatever re-metering happens; the groupings add up
//! to the same totals; usage is walled off per organization and readable by
//! the billing role, not by viewers.

use chrono::{TimeDelta, Utc};
use reqwest::StatusCode;
use sea_orm::ConnectionTrait;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::support::{Engine, Tenant, TestServer};

crate::on_both_engines!(
    usage_covers_running_time_once_and_every_grouping_adds_up,
    usage_is_walled_off_and_read_by_billing_roles,
    csv_exports_carry_no_formulas,
);

async fn metering_server(engine: Engine) -> TestServer {
    TestServer::start_with(engine, |config| {
        config.metering_interval_seconds = 1;
        config.agent_heartbeat_deadline_seconds = 1;
    })
    .await
}

fn usage_path(org: Uuid, query: &str) -> String {
    format!(
        "/api/v1/orgs/{org}/usage?from={}&to={}&{query}",
        crate::support::query_time(Utc::now() - TimeDelta::hours(2)),
        crate::support::query_time(Utc::now() + TimeDelta::hours(2))
    )
}

async fn usage(server: &TestServer, tenant: &Tenant, query: &str) -> Value {
    let reply = server
        .get(&usage_path(tenant.org_id, query), &tenant.token)
        .await;
    reply.expect(StatusCode::OK);
    reply.body.clone()
}

async fn run_and_cancel(server: &TestServer, tenant: &Tenant, orders: &[Value]) -> Vec<Uuid> {
    let mut ids = Vec::new();
    for body in orders {
        ids.push(server.order(tenant, body.clone()).await);
    }
    for id in &ids {
        server.wait_status(tenant, *id, "running").await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(2_500)).await;
    for id in &ids {
        server.cancel(tenant, *id).await;
    }
    ids
}

async fn usage_covers_running_time_once_and_every_grouping_adds_up(engine: Engine) {
    let server = metering_server(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 2).await;
    let tenant = server.signup("tenant").await;
    let bystander = server.signup("bystander").await;
    let project = server
        .post(
            &format!("/api/v1/orgs/{}/projects", tenant.org_id),
            &tenant.token,
            json!({ "name": "training-runs" }),
        )
        .await;
    project.expect(StatusCode::CREATED);
    run_and_cancel(
        &server,
        &tenant,
        &[
            json!({ "instance_type": "h100x8", "project_id": project.id("/id") }),
            json!({ "instance_type": "h100x1", "pricing_class": "spot" }),
        ],
    )
    .await;
    let gpu_seconds = server.metered_exactly().await;
    assert!(
        gpu_seconds >= 9 * 2,
        "both ran at least two seconds: {gpu_seconds}"
    );

    let by_day = usage(&server, &tenant, "group_by=day").await;
    assert_eq!(by_day["totals"]["gpu_seconds"], gpu_seconds);
    assert_eq!(by_day["totals"]["billable_gpu_seconds"], gpu_seconds);
    assert_eq!(by_day["totals"]["excluded_gpu_seconds"], 0);
    for (grouping, groups) in [
        ("order", 2),
        ("project", 2),
        ("pricing_class", 2),
        ("gpu_model", 1),
        ("instance_type", 2),
        ("region", 1),
    ] {
        let grouped = usage(&server, &tenant, &format!("group_by={grouping}")).await;
        assert_eq!(grouped["totals"], by_day["totals"], "{grouping}");
        let listed = grouped["groups"].as_array().expect("groups");
        assert_eq!(listed.len(), groups, "{grouping}: {grouped:#}");
        let sum: i64 = listed
            .iter()
            .map(|g| g["gpu_seconds"].as_i64().expect("gpu seconds"))
            .sum();
        assert_eq!(sum, gpu_seconds, "{grouping}");
    }
    let projects = usage(&server, &tenant, "group_by=project").await;
    let labels: Vec<&str> = projects["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .filter_map(|g| g["label"].as_str())
        .collect();
    assert!(labels.contains(&"training-runs") && labels.contains(&"(no project)"));
    let models = usage(&server, &tenant, "group_by=gpu_model").await;
    assert_eq!(models["groups"][0]["label"], "H100");

    // CSV: one row per group and the totals.
    let csv = server
        .http
        .get(server.url(&usage_path(tenant.org_id, "group_by=order&format=csv")))
        .bearer_auth(&tenant.token)
        .send()
        .await
        .expect("csv");
    assert_eq!(csv.status(), StatusCode::OK);
    assert!(
        csv.headers()[reqwest::header::CONTENT_TYPE]
            .to_str()
            .is_ok_and(|t| t.starts_with("text/csv"))
    );
    let text = csv.text().await.expect("csv text");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(lines[0].starts_with("group,key,label,gpu_seconds"));
    assert!(
        lines[3].starts_with(&format!("total,,,{gpu_seconds},")),
        "{text}"
    );

    // Metering again over what is already metered (a retry after a crash
    // between the records and their allocation's mark) writes nothing.
    let records = server.count("SELECT COUNT(*) FROM usage_records").await;
    server
        .db()
        .execute_unprepared("UPDATE allocations SET metered_until = NULL")
        .await
        .expect("forget how far metering got");
    gantry_metering::meter(server.db(), Utc::now(), 1)
        .await
        .expect("meter again");
    assert_eq!(
        server.count("SELECT COUNT(*) FROM usage_records").await,
        records
    );
    assert_eq!(server.metered_exactly().await, gpu_seconds);

    // Another organization's usage is its own.
    let theirs = usage(&server, &bystander, "group_by=day").await;
    assert_eq!(theirs["totals"]["gpu_seconds"], 0);
    assert_eq!(theirs["groups"], json!([]));
    // Operators see every organization.
    let all = server
        .get(
            &format!(
                "/api/v1/admin/usage?group_by=organization&org_id={}",
                tenant.org_id
            ),
            &operator.token,
        )
        .await;
    all.expect(StatusCode::OK);
    assert_eq!(all.body["totals"]["gpu_seconds"], gpu_seconds);
    assert_eq!(all.body["groups"][0]["label"], "tenant org");
}

async fn usage_is_walled_off_and_read_by_billing_roles(engine: Engine) {
    let server = metering_server(engine).await;
    let owner = server.signup("owner").await;
    let other = server.signup("other").await;
    let path = usage_path(owner.org_id, "group_by=day");
    server.get(&path, &owner.token).await.expect(StatusCode::OK);
    let billing = server.member_of(&owner, "billing", "billing").await;
    server
        .get(&path, &billing.token)
        .await
        .expect(StatusCode::OK);
    let (_, billing_key) = server.api_key(&owner, "billing").await;
    server.get(&path, &billing_key).await.expect(StatusCode::OK);
    for role in ["viewer", "member"] {
        let member = server.member_of(&owner, role, role).await;
        server
            .get(&path, &member.token)
            .await
            .expect_problem(StatusCode::FORBIDDEN, "forbidden");
    }
    server
        .get(&path, &other.token)
        .await
        .expect_problem(StatusCode::NOT_FOUND, "organization_not_found");
    server
        .get("/api/v1/admin/usage", &owner.token)
        .await
        .expect_problem(StatusCode::FORBIDDEN, "forbidden");

    // Bad periods and groupings are refused with a reason.
    let org = owner.org_id;
    for (query, status, code) in [
        (
            "from=2026-02-01T00:00:00Z&to=2026-01-01T00:00:00Z",
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_period",
        ),
        (
            "from=2020-01-01T00:00:00Z&to=2026-01-01T00:00:00Z",
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_period",
        ),
        (
            "group_by=organization",
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_group_by",
        ),
        ("group_by=week", StatusCode::BAD_REQUEST, "invalid_query"),
        ("from=yesterday", StatusCode::BAD_REQUEST, "invalid_query"),
        ("format=pdf", StatusCode::BAD_REQUEST, "invalid_query"),
    ] {
        server
            .get(&format!("/api/v1/orgs/{org}/usage?{query}"), &owner.token)
            .await
            .expect_problem(status, code);
    }
}

/// A tenant's own text in a CSV export opens as text in a spreadsheet,
/// never as a formula.
async fn csv_exports_carry_no_formulas(engine: Engine) {
    let server = metering_server(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 1).await;
    let tenant = server.signup("tenant").await;
    let evil = r#"=HYPERLINK("http://evil.example/x","Click")"#;
    let project = server
        .post(
            &format!("/api/v1/orgs/{}/projects", tenant.org_id),
            &tenant.token,
            json!({ "name": evil }),
        )
        .await;
    project.expect(StatusCode::CREATED);
    run_and_cancel(
        &server,
        &tenant,
        &[json!({ "instance_type": "h100x1", "project_id": project.str("/id") })],
    )
    .await;
    server.metered_exactly().await;
    let csv = server
        .http
        .get(server.url(&usage_path(tenant.org_id, "group_by=project&format=csv")))
        .bearer_auth(&tenant.token)
        .send()
        .await
        .expect("csv")
        .text()
        .await
        .expect("csv text");
    let row = csv
        .lines()
        .find(|line| line.contains("HYPERLINK"))
        .unwrap_or_else(|| panic!("the project's row: {csv}"));
    assert!(
        row.contains(r#","'=HYPERLINK(""http://evil.example/x"",""Click"")","#),
        "{row}"
    );
    for line in csv.lines() {
        for cell in line.split(',') {
            assert!(
                !cell.trim_start_matches('"').starts_with(['=', '@']),
                "a formula cell in {line}"
            );
        }
    }
}
