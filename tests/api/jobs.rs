//! Jobs on simulated nodes: run to their length, walltime, arrays,
//! dependencies (a failed parent fails its dependents), cancel of a whole
//! array, and the refusals of bad job input.

use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::support::{Engine, Tenant, TestServer};

crate::on_both_engines!(
    a_job_runs_its_length_and_one_past_its_walltime_times_out,
    an_array_runs_every_member_and_cancels_together,
    dependencies_order_jobs_and_a_failed_parent_fails_its_dependents,
    bad_job_input_is_refused_and_changes_nothing,
);

fn job(extra: Value) -> Value {
    let mut body = json!({
        "instance_type": "h100x1",
        "duration_seconds": 1,
        "job": { "command": "python train.py", "args": ["--lr", "0.1"], "env": { "EPOCHS": "3" } },
    });
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        for (key, value) in extra {
            if key == "job" {
                if let (Some(job), Some(more)) = (body["job"].as_object_mut(), value.as_object()) {
                    job.extend(more.clone());
                }
            } else {
                body.insert(key.clone(), value.clone());
            }
        }
    }
    body
}

async fn submit(server: &TestServer, tenant: &Tenant, body: Value) -> Value {
    let reply = server
        .post(
            &format!("/api/v1/orgs/{}/orders", tenant.org_id),
            &tenant.token,
            body,
        )
        .await;
    reply.expect(StatusCode::CREATED);
    reply.body.clone()
}

async fn a_job_runs_its_length_and_one_past_its_walltime_times_out(engine: Engine) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 1).await;
    let tenant = server.signup("jobs").await;

    let submitted = submit(
        &server,
        &tenant,
        job(json!({ "job": { "max_runtime_seconds": 60 } })),
    )
    .await;
    assert_eq!(submitted["kind"], "job");
    assert_eq!(submitted["workload_class"], "batch");
    assert_eq!(submitted["job"]["command"], "python train.py");
    assert_eq!(submitted["job"]["args"], json!(["--lr", "0.1"]));
    assert_eq!(submitted["job"]["env"]["EPOCHS"], "3");
    assert_eq!(
        submitted["job"]["retry"],
        json!({ "on_failure": false, "max_retries": 3 })
    );
    let id = submitted["id"].as_str().expect("id").parse().expect("uuid");
    let done = server
        .wait_order(&tenant, id, "completed and ended", |o| {
            o["status"] == "completed" && o["ended_at"].is_string()
        })
        .await;
    assert_eq!(done["attempts"], 1);
    assert_eq!(done["job"]["exit_code"], 0);
    let done_attempts = server
        .get(
            &format!("/api/v1/orgs/{}/orders/{id}/attempts", tenant.org_id),
            &tenant.token,
        )
        .await;
    assert_eq!(done_attempts.body[0]["exit_code"], 0);
    assert_eq!(done_attempts.body[0]["outcome"], "completed");
    // A simulated node runs no command, and its output says so.
    let output = server
        .get(
            &format!("/api/v1/orgs/{}/orders/{id}/logs", tenant.org_id),
            &tenant.token,
        )
        .await;
    let line = output.body["lines"][0]["line"].as_str().unwrap_or_default();
    assert!(
        line.starts_with("[gantry] simulated node n1: the command was not run"),
        "{:#}",
        output.body
    );

    // Longer than its walltime: stopped and marked timed_out, GPUs freed.
    let slow = submit(
        &server,
        &tenant,
        job(json!({ "duration_seconds": 120, "job": { "max_runtime_seconds": 1 } })),
    )
    .await;
    let slow_id = slow["id"].as_str().expect("id").parse().expect("uuid");
    let timed_out = server.wait_status(&tenant, slow_id, "timed_out").await;
    assert!(
        timed_out["failure_reason"]
            .as_str()
            .unwrap_or_default()
            .contains("walltime of 1 s")
    );
    server
        .wait_order(&tenant, slow_id, "released", |o| {
            o["ended_at"].is_string() && o["placement"] == json!([])
        })
        .await;
    server
        .post(
            &format!("/api/v1/orgs/{}/orders/{slow_id}/cancel", tenant.org_id),
            &tenant.token,
            json!({}),
        )
        .await
        .expect_problem(StatusCode::CONFLICT, "order_ended");
    // Metered like any other allocation while it held its GPU.
    // Both jobs' attempts are metered like any allocation: every second
    // they held their GPU, no gap, no overlap.
    assert!(server.metered_exactly().await >= 2);
    // Its one attempt: the node, the GPU, and how it ended.
    let attempts = server
        .get(
            &format!("/api/v1/orgs/{}/orders/{slow_id}/attempts", tenant.org_id),
            &tenant.token,
        )
        .await;
    attempts.expect(StatusCode::OK);
    assert_eq!(
        attempts.body.as_array().map(Vec::len),
        Some(1),
        "{:#}",
        attempts.body
    );
    assert_eq!(attempts.body[0]["attempt"], 1);
    assert_eq!(attempts.body[0]["outcome"], "timed_out");
    assert_eq!(
        attempts.body[0]["nodes"][0]["gpu_ids"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    assert!(attempts.body[0]["ended_at"].is_string());
}

async fn an_array_runs_every_member_and_cancels_together(engine: Engine) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 2).await;
    let tenant = server.signup("sweeps").await;

    let first = submit(
        &server,
        &tenant,
        job(json!({ "job": { "array_count": 50 } })),
    )
    .await;
    let array = first["job"]["array_id"]
        .as_str()
        .expect("array id")
        .to_owned();
    assert_eq!(first["job"]["array_index"], 0);
    let list = format!(
        "/api/v1/orgs/{}/orders?array_id={array}&limit=200",
        tenant.org_id
    );
    let members = server.get(&list, &tenant.token).await;
    members.expect(StatusCode::OK);
    let mut indices: Vec<i64> = members
        .items()
        .iter()
        .map(|o| o["job"]["array_index"].as_i64().unwrap_or(-1))
        .collect();
    indices.sort_unstable();
    assert_eq!(indices, (0..50).collect::<Vec<_>>());
    // Each member is scheduled on its own: 16 GPUs run 50 one-GPU jobs in waves.
    for _ in 0..600 {
        let now = server.get(&list, &tenant.token).await;
        if now.items().iter().all(|o| o["status"] == "completed") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let finished = server.get(&list, &tenant.token).await;
    assert!(
        finished.items().iter().all(|o| o["status"] == "completed"),
        "{:#}",
        finished.body
    );
    // The array's members by status, counted, in one answer.
    let summary = server
        .get(
            &format!("/api/v1/orgs/{}/job-arrays/{array}", tenant.org_id),
            &tenant.token,
        )
        .await;
    summary.expect(StatusCode::OK);
    assert_eq!(summary.body["members"], 50);
    assert_eq!(
        summary.body["by_status"],
        json!([{ "status": "completed", "count": 50 }])
    );

    let long = submit(
        &server,
        &tenant,
        job(json!({ "duration_seconds": 600, "job": { "array_count": 20 } })),
    )
    .await;
    let long_array = long["job"]["array_id"]
        .as_str()
        .expect("array id")
        .to_owned();
    let cancelled = server
        .post(
            &format!(
                "/api/v1/orgs/{}/job-arrays/{long_array}/cancel",
                tenant.org_id
            ),
            &tenant.token,
            json!({}),
        )
        .await;
    cancelled.expect(StatusCode::OK);
    assert_eq!(cancelled.body["cancelled"], 20);
    let after = server
        .get(
            &format!(
                "/api/v1/orgs/{}/orders?array_id={long_array}&limit=200",
                tenant.org_id
            ),
            &tenant.token,
        )
        .await;
    assert!(after.items().iter().all(|o| o["status"] == "cancelled"));
    // Another organization cannot cancel it, nor see it.
    let other = server.signup("other").await;
    server
        .post(
            &format!(
                "/api/v1/orgs/{}/job-arrays/{long_array}/cancel",
                other.org_id
            ),
            &other.token,
            json!({}),
        )
        .await
        .expect(StatusCode::NOT_FOUND);
    for array_id in [long_array.clone(), uuid::Uuid::now_v7().to_string()] {
        server
            .get(
                &format!("/api/v1/orgs/{}/job-arrays/{array_id}", other.org_id),
                &other.token,
            )
            .await
            .expect_problem(StatusCode::NOT_FOUND, "order_not_found");
    }
    let theirs = server
        .get(
            &format!("/api/v1/orgs/{}/orders?array_id={long_array}", other.org_id),
            &other.token,
        )
        .await;
    assert!(theirs.items().is_empty());
}

async fn dependencies_order_jobs_and_a_failed_parent_fails_its_dependents(engine: Engine) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 1).await;
    let tenant = server.signup("pipeline").await;
    let id = |v: &Value| v["id"].as_str().expect("id").to_owned();

    // A chain: b after a, c after b.
    let a = submit(&server, &tenant, job(json!({}))).await;
    let b = submit(
        &server,
        &tenant,
        job(json!({ "job": { "depends_on": [{ "order_id": id(&a) }] } })),
    )
    .await;
    let c = submit(
        &server,
        &tenant,
        job(json!({ "job": { "depends_on": [{ "order_id": id(&b), "condition": "after_ok" }] } })),
    )
    .await;
    let waiting = server
        .wait_order(
            &tenant,
            id(&c).parse().expect("uuid"),
            "waiting on b",
            |o| {
                o["pending_reason"]
                    .as_str()
                    .is_some_and(|r| r.contains("waiting for job"))
            },
        )
        .await;
    assert_eq!(waiting["status"], "queued");
    // As data too: the job it waits for, named for its own tenant.
    let reason = &waiting["pending_details"][0];
    assert_eq!(reason["kind"], "dependency", "{reason:#}");
    assert_eq!(reason["order"]["id"], json!(id(&b)));
    assert_eq!(reason["order"]["name"], b["name"]);
    assert_eq!(reason["until"], "complete");
    assert!(
        ["queued", "running"].contains(&reason["status"].as_str().expect("status")),
        "{reason:#}"
    );
    let c_done = server
        .wait_status(&tenant, id(&c).parse().expect("uuid"), "completed")
        .await;
    let b_done = server
        .wait_status(&tenant, id(&b).parse().expect("uuid"), "completed")
        .await;
    let a_done = server
        .wait_status(&tenant, id(&a).parse().expect("uuid"), "completed")
        .await;
    assert!(b_done["started_at"].as_str() >= a_done["ended_at"].as_str());
    assert!(c_done["started_at"].as_str() >= b_done["ended_at"].as_str());

    // A parent that times out: after_ok dependents fail, in a cascade;
    // after_any ones run.
    let parent = submit(
        &server,
        &tenant,
        job(json!({ "duration_seconds": 120, "job": { "max_runtime_seconds": 1 } })),
    )
    .await;
    let d = submit(
        &server,
        &tenant,
        job(json!({ "job": { "depends_on": [{ "order_id": id(&parent) }] } })),
    )
    .await;
    let e = submit(
        &server,
        &tenant,
        job(json!({ "job": { "depends_on": [{ "order_id": id(&d) }] } })),
    )
    .await;
    let f = submit(&server, &tenant, job(json!({ "job": { "depends_on": [{ "order_id": id(&parent), "condition": "after_any" }] } }))).await;
    let d_failed = server
        .wait_status(&tenant, id(&d).parse().expect("uuid"), "failed")
        .await;
    assert!(
        d_failed["failure_reason"]
            .as_str()
            .unwrap_or_default()
            .contains("timed_out"),
        "{d_failed:#}"
    );
    assert_eq!(d_failed["attempts"], 0);
    let e_failed = server
        .wait_status(&tenant, id(&e).parse().expect("uuid"), "failed")
        .await;
    assert!(
        e_failed["failure_reason"]
            .as_str()
            .unwrap_or_default()
            .contains(&id(&d))
    );
    server
        .wait_status(&tenant, id(&f).parse().expect("uuid"), "completed")
        .await;
    assert_eq!(d_failed["job"]["depends_on"][0]["order_id"], parent["id"]);
}

async fn bad_job_input_is_refused_and_changes_nothing(engine: Engine) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    server.cluster(&operator, 1).await;
    let tenant = server.signup("careless").await;
    let other = server.signup("neighbour").await;
    let theirs = submit(&server, &other, job(json!({ "duration_seconds": 600 }))).await;
    let instance = server
        .order(&tenant, json!({ "instance_type": "h100x1" }))
        .await;
    server.wait_status(&tenant, instance, "running").await;
    let theirs_id = theirs["id"].as_str().expect("id").parse().expect("uuid");
    server.wait_status(&other, theirs_id, "running").await;
    let before = server.table_counts().await;
    let path = format!("/api/v1/orgs/{}/orders", tenant.org_id);
    for (body, code) in [
        (
            job(json!({ "job": { "command": "" } })),
            "validation_failed",
        ),
        (
            job(json!({ "job": { "command": "   " } })),
            "validation_failed",
        ),
        (
            job(json!({ "job": { "max_runtime_seconds": -5 } })),
            "validation_failed",
        ),
        (
            job(json!({ "job": { "array_count": 10_000_000 } })),
            "validation_failed",
        ),
        (
            job(json!({ "job": { "array_count": 0 } })),
            "validation_failed",
        ),
        (
            job(json!({ "job": { "retry": { "max_retries": 99 } } })),
            "validation_failed",
        ),
        (
            job(json!({ "job": { "env": { "CUDA_VISIBLE_DEVICES": "0" } } })),
            "validation_failed",
        ),
        (
            job(json!({ "job": { "env": { "1BAD": "x" } } })),
            "validation_failed",
        ),
        (
            job(json!({ "job": { "secret_env": { "GANTRY_ORG_ID": "x" } } })),
            "validation_failed",
        ),
        (
            job(json!({ "job": { "secret_env": { "EPOCHS": "4" } } })),
            "validation_failed",
        ),
        (
            job(json!({ "job": { "secret_env": { "TOKEN": 7 } } })),
            "invalid_body",
        ),
        (
            job(json!({ "job": { "working_dir": "relative/path" } })),
            "validation_failed",
        ),
        (
            job(json!({ "job": { "depends_on": [{ "order_id": uuid::Uuid::now_v7() }] } })),
            "unknown_dependency",
        ),
        (
            job(json!({ "job": { "depends_on": [{ "order_id": theirs["id"] }] } })),
            "unknown_dependency",
        ),
        (
            job(json!({ "job": { "depends_on": [{ "order_id": instance }] } })),
            "dependency_not_a_job",
        ),
        (
            job(
                json!({ "job": { "depends_on": [{ "order_id": instance, "condition": "after_lunch" }] } }),
            ),
            "invalid_body",
        ),
        (job(json!({ "job": { "command": 42 } })), "invalid_body"),
        (job(json!({ "job": { "shell": "bash" } })), "invalid_body"),
        (job(json!({ "duration_seconds": 0 })), "validation_failed"),
    ] {
        let reply = server.post(&path, &tenant.token, body.clone()).await;
        reply.expect_problem(StatusCode::UNPROCESSABLE_ENTITY, code);
        assert!(!reply.str("/detail").is_empty(), "{body}");
    }
    // Output: unknown jobs and other tenants' jobs are not found; bad
    // paging is refused.
    let logs = |org: uuid::Uuid, order: &str| format!("/api/v1/orgs/{org}/orders/{order}/logs");
    server
        .get(
            &logs(tenant.org_id, &uuid::Uuid::now_v7().to_string()),
            &tenant.token,
        )
        .await
        .expect(StatusCode::NOT_FOUND);
    server
        .get(
            &logs(tenant.org_id, theirs["id"].as_str().unwrap_or_default()),
            &tenant.token,
        )
        .await
        .expect(StatusCode::NOT_FOUND);
    for query in ["limit=0", "limit=5001", "attempt=0", "after=x"] {
        server
            .get(
                &format!(
                    "{}?{query}",
                    logs(other.org_id, theirs["id"].as_str().unwrap_or_default())
                ),
                &other.token,
            )
            .await
            .expect(StatusCode::BAD_REQUEST);
    }
    let own = server
        .get(
            &logs(other.org_id, theirs["id"].as_str().unwrap_or_default()),
            &other.token,
        )
        .await;
    own.expect(StatusCode::OK);
    assert_eq!(own.body["lines"], json!([]));
    assert_eq!(server.table_counts().await, before);
}
