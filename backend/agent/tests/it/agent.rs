//! The real agent binary (with simulated GPUs) against a real server on
//! SQLite and PostgreSQL: it registers with a join token, runs its
//! assignment with exactly the allocated GPUs, reports completion, and when
//! it dies its node becomes unhealthy and its work is queued again.

use crate::lab;
use crate::support;
use gantry_test_support::on_both_engines;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use gantry_entities::usage_record;
use lab::Agent;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use serde_json::{Value, json};
use support::{Engine, TestServer};

on_both_engines!(
    agent_runs_work_on_exact_gpus_and_its_death_requeues_it,
    restarts_of_the_control_plane_and_the_agent_keep_work_running,
    an_operator_rotates_and_revokes_a_running_agents_credential,
    starts_and_stops_reach_the_agent_without_waiting_for_its_round,
    the_agent_exports_each_gpus_telemetry_with_the_tenant_holding_it,
);

fn spawn_agent(server: &TestServer, token: &str, dir: &Path) -> Agent {
    // Each workload writes its GPUs and pid, then holds its GPUs while the
    // `hold` file exists.
    let command = format!(
        "echo \"$CUDA_VISIBLE_DEVICES\" > {dir}/$GANTRY_ORDER_ID.gpus; echo $$ > {dir}/$GANTRY_ORDER_ID.pid; \
         if [ -e {dir}/hold ]; then exec sleep 60; fi",
        dir = dir.display()
    );
    let child = lab::agent_command(server, token, "gpu-box-1", &dir.join("state"), "process")
        .args(["--grace-seconds", "1", "--workload-command", &command])
        // An emulated server's size, whatever this machine's.
        .args([
            "--simulate-cpu-milli",
            "192000",
            "--simulate-memory-mib",
            "2097152",
        ])
        .spawn()
        .expect("start the agent");
    Agent(child)
}

/// The agent's node once it has registered.
async fn registered(server: &TestServer, op: &str) -> Value {
    for _ in 0..200 {
        let nodes = server.get("/api/v1/admin/nodes", op).await;
        if let Some(found) = nodes.items().iter().find(|n| n["name"] == "gpu-box-1") {
            return found.clone();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the agent never registered");
}

/// The node once a heartbeat newer than the one seen now has arrived.
async fn heartbeat_after(server: &TestServer, op: &str, node_id: &str) -> Value {
    let path = format!("/api/v1/admin/nodes/{node_id}");
    let before = server.get(&path, op).await.body["last_heartbeat_at"].clone();
    for _ in 0..400 {
        let node = server.get(&path, op).await;
        if node.body["last_heartbeat_at"] != before {
            return node.body.clone();
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("node {node_id} sent no heartbeat after {before}");
}

/// A new tenant's instance runs on the agent's node and, once cancelled,
/// stops and ends.
async fn runs_and_ends(server: &TestServer) {
    let tenant = server.signup("tenant").await;
    let order = server
        .order(&tenant, json!({ "instance_type": "h100x2" }))
        .await;
    server.wait_status(&tenant, order, "running").await;
    server.cancel(&tenant, order).await;
    server
        .wait_order(&tenant, order, "ended", |o| o["ended_at"].is_string())
        .await;
}

/// Whether a process is alive (signal 0 probes without touching it).
fn alive(pid: &str) -> bool {
    Command::new("kill")
        .args(["-0", pid])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

async fn restarts_of_the_control_plane_and_the_agent_keep_work_running(engine: Engine) {
    let mut server = TestServer::start_with(engine, |config| {
        config.agent_heartbeat_deadline_seconds = 10;
    })
    .await;
    let operator = server.operator().await;
    let op = &operator.token;
    let token = lab::catalog(&server, op).await;
    let dir = std::env::temp_dir().join(format!("gantry-agent-test-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("work dir");
    std::fs::write(dir.join("hold"), "").expect("hold file");
    let mut agent = spawn_agent(&server, &token, &dir);
    let node_id = registered(&server, op).await["id"]
        .as_str()
        .expect("node id")
        .to_owned();

    // Two workloads fill the node's four GPUs.
    let tenant = server.signup("tenant").await;
    let ends_while_away = server
        .order(&tenant, json!({ "instance_type": "h100x2" }))
        .await;
    let keeps_running = server
        .order(&tenant, json!({ "instance_type": "h100x2" }))
        .await;
    let kept = server.wait_status(&tenant, keeps_running, "running").await;
    server
        .wait_status(&tenant, ends_while_away, "running")
        .await;
    let pid_of = |order: uuid::Uuid| {
        std::fs::read_to_string(dir.join(format!("{order}.pid")))
            .expect("the workload started")
            .trim()
            .to_owned()
    };
    let (ending, kept_pid) = (pid_of(ends_while_away), pid_of(keeps_running));

    // The control plane goes away for several agent rounds; meanwhile one
    // workload ends on the node.
    let restarted = tokio::spawn({
        let pid = ending.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            Command::new("kill").args(["-9", &pid]).status().ok();
        }
    });
    server.restart(Duration::from_secs(2)).await;
    restarted.await.expect("the workload was ended");

    // Back up: the ending the agent saw while away arrives, the other
    // workload was never touched, and the node stayed healthy.
    let ended = server.wait_status(&tenant, ends_while_away, "failed").await;
    assert!(ended["placement"].as_array().is_some_and(Vec::is_empty));
    let still = server
        .get(
            &format!("/api/v1/orgs/{}/orders/{keeps_running}", tenant.org_id),
            &tenant.token,
        )
        .await
        .body
        .clone();
    assert_eq!(still["status"], "running");
    assert_eq!(still["placement"], kept["placement"]);
    assert!(alive(&kept_pid), "the workload survived the restart");
    assert_eq!(pid_of(keeps_running), kept_pid, "and was not started again");
    let node = heartbeat_after(&server, op, &node_id).await;
    assert_eq!(node["state"], "ready");
    assert_eq!(
        server
            .count("SELECT COUNT(*) FROM node_events WHERE kind = 'allocation_lost'")
            .await,
        0
    );

    // The agent itself dies and comes back (an upgrade, an OOM kill): it
    // takes the workload back instead of starting it again on its GPUs.
    agent.0.kill().expect("kill the agent");
    agent.0.wait().ok();
    let _agent = spawn_agent(&server, &token, &dir);
    // Once the new agent has reported, it has taken its work back.
    heartbeat_after(&server, op, &node_id).await;
    assert!(alive(&kept_pid));
    assert_eq!(pid_of(keeps_running), kept_pid, "not started a second time");
    let still = server
        .get(
            &format!("/api/v1/orgs/{}/orders/{keeps_running}", tenant.org_id),
            &tenant.token,
        )
        .await;
    assert_eq!(still.body["status"], "running");

    // Orders given after the restarts reach the agent: a cancel stops the
    // surviving workload and frees its GPUs.
    server.cancel(&tenant, keeps_running).await;
    server
        .wait_order(&tenant, keeps_running, "released", |o| {
            o["placement"].as_array().is_some_and(Vec::is_empty) && o["ended_at"].is_string()
        })
        .await;
    for _ in 0..100 {
        if !alive(&kept_pid) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!alive(&kept_pid), "the cancel stopped the workload");

    // Beside allocation, what the agent reported: its busy GPUs at 97 %.
    server.metered_exactly().await;
    let from = (chrono::Utc::now() - chrono::TimeDelta::hours(1)).format("%Y-%m-%dT%H:%M:%SZ");
    let usage = server
        .get(
            &format!(
                "/api/v1/orgs/{}/usage?group_by=order&from={from}",
                tenant.org_id
            ),
            &tenant.token,
        )
        .await;
    let held = usage.body["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .find(|g| g["key"] == keeps_running.to_string())
        .expect("the order's usage")
        .clone();
    let utilization = held["mean_gpu_utilization_percent"]
        .as_f64()
        .expect("utilization from the agent's samples");
    assert!((90.0..=100.0).contains(&utilization), "{held:#}");
    assert_eq!(server.count("SELECT COUNT(*) FROM gpu_claims").await, 0);
    std::fs::remove_dir_all(&dir).ok();
}

async fn agent_runs_work_on_exact_gpus_and_its_death_requeues_it(engine: Engine) {
    let server = TestServer::start_with(engine, |config| {
        config.agent_heartbeat_deadline_seconds = 2;
    })
    .await;
    let operator = server.operator().await;
    let op = &operator.token;
    let token = lab::catalog(&server, op).await;

    let dir = std::env::temp_dir().join(format!("gantry-agent-test-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("work dir");
    let mut agent = spawn_agent(&server, &token, &dir);

    // The node registers with its four GPUs.
    let node = registered(&server, op).await;
    assert_eq!(node["driver"], "agent", "the agent registered: {node}");
    assert_eq!(node["region"], "lab");
    assert_eq!(node["gpus"].as_array().map(Vec::len), Some(4));
    assert_eq!(
        (&node["cpu_milli"], &node["memory_mib"]),
        (&json!(192_000), &json!(2_097_152))
    );
    let node_id = node["id"].as_str().expect("node id").to_owned();

    // A short workload runs on exactly its GPUs and completes.
    let tenant = server.signup("tenant").await;
    let first = server
        .order(&tenant, json!({ "instance_type": "h100x2" }))
        .await;
    let done = server.wait_status(&tenant, first, "completed").await;
    let gpus = server.first_attempt_gpus(&tenant, first).await;
    assert_eq!(gpus.len(), 2);
    assert!(done["placement"].as_array().is_some_and(Vec::is_empty));
    assert!(done["ended_at"].is_string());
    let seen =
        std::fs::read_to_string(dir.join(format!("{first}.gpus"))).expect("the workload ran");
    assert_eq!(seen.trim(), gpus.join(","));
    assert!(server.count("SELECT COUNT(*) FROM gpu_telemetry").await > 0);

    // A long workload is running when the agent dies: the node goes
    // unhealthy and the training order is queued again.
    std::fs::write(dir.join("hold"), "").expect("hold file");
    let second = server
        .order(
            &tenant,
            json!({ "instance_type": "h100x2", "workload_class": "training" }),
        )
        .await;
    let up = server.wait_status(&tenant, second, "running").await;
    assert_eq!(up["access"]["driver"], "agent");
    agent.0.kill().expect("kill the agent");
    agent.0.wait().ok();
    let requeued = server.wait_status(&tenant, second, "queued").await;
    assert!(requeued["pending_reason"].is_string(), "{requeued}");
    assert!(requeued["placement"].as_array().is_some_and(Vec::is_empty));
    let unhealthy = server
        .get(&format!("/api/v1/admin/nodes/{node_id}"), op)
        .await;
    assert_eq!(unhealthy.body["state"], "unhealthy");
    assert!(
        unhealthy.body["state_reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("its agent stopped sending heartbeats after ")),
        "{}",
        unhealthy.body
    );
    assert_eq!(
        server
            .count("SELECT COUNT(*) FROM node_events WHERE kind = 'allocation_lost'")
            .await,
        1
    );
    assert_eq!(server.count("SELECT COUNT(*) FROM gpu_claims").await, 0);

    // The time from the last heartbeat to the release was down through the
    // node's fault: measured, not billed.
    let gpu_seconds = server.metered_exactly().await;
    let excluded: i64 = usage_record::Entity::find()
        .filter(usage_record::Column::OrderId.eq(second))
        .all(server.db())
        .await
        .expect("usage records")
        .iter()
        .map(|r| i64::from(r.gpus) * r.excluded_seconds)
        .sum();
    assert!(
        excluded >= 2,
        "two GPUs down for a second or more: {excluded}"
    );
    let from = (chrono::Utc::now() - chrono::TimeDelta::hours(1)).format("%Y-%m-%dT%H:%M:%SZ");
    let usage = server
        .get(
            &format!(
                "/api/v1/orgs/{}/usage?group_by=order&from={from}",
                tenant.org_id
            ),
            &tenant.token,
        )
        .await;
    assert_eq!(usage.body["totals"]["gpu_seconds"], gpu_seconds);
    assert_eq!(usage.body["totals"]["excluded_gpu_seconds"], excluded);
    assert_eq!(
        usage.body["totals"]["billable_gpu_seconds"],
        gpu_seconds - excluded
    );

    // The dead agent's workload outlives it in its own process group.
    if let Ok(pid) = std::fs::read_to_string(dir.join(format!("{second}.pid"))) {
        Command::new("kill").args(["-9", pid.trim()]).status().ok();
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// The credential the agent keeps in its state directory.
fn saved_credential(state: &Path) -> Option<String> {
    let text = std::fs::read_to_string(state.join("credential.json")).ok()?;
    let saved: Value = serde_json::from_str(&text).ok()?;
    saved["credential"].as_str().map(str::to_owned)
}

async fn an_operator_rotates_and_revokes_a_running_agents_credential(engine: Engine) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    let op = &operator.token;
    let token = lab::catalog(&server, op).await;
    let dir = std::env::temp_dir().join(format!("gantry-agent-test-{}", uuid::Uuid::new_v4()));
    let state = dir.join("state");
    std::fs::create_dir_all(&dir).expect("work dir");
    let log = std::fs::File::create(dir.join("agent.log")).expect("log");
    let mut agent = Agent(
        lab::agent_command(&server, &token, "gpu-box-1", &state, "process")
            .stderr(log)
            .spawn()
            .expect("start the agent"),
    );
    let node = registered(&server, op).await["id"]
        .as_str()
        .expect("node id")
        .to_owned();
    // The node is registered a moment before the agent has saved what
    // the registration answered.
    let mut saved = None;
    for _ in 0..100 {
        saved = saved_credential(&state);
        if saved.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let first = saved.expect("a saved credential");
    let heartbeat = |credential: String| {
        let server = &server;
        async move {
            server
                .post(
                    "/api/v1/agent/heartbeat",
                    &credential,
                    json!({ "gpus": [] }),
                )
                .await
                .status
        }
    };

    // A rotation reaches the agent at its next heartbeat: it saves the new
    // credential and uses it, which retires the old one.
    server
        .post(
            &format!("/api/v1/admin/nodes/{node}/credential/rotate"),
            op,
            json!({}),
        )
        .await
        .expect(reqwest::StatusCode::ACCEPTED);
    let mut rotated = None;
    for _ in 0..200 {
        rotated = saved_credential(&state).filter(|c| *c != first);
        if rotated.is_some() && heartbeat(first.clone()).await == reqwest::StatusCode::UNAUTHORIZED
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let rotated = rotated.expect("the agent saved a new credential");
    assert_eq!(heartbeat(first).await, reqwest::StatusCode::UNAUTHORIZED);
    assert_eq!(heartbeat(rotated).await, reqwest::StatusCode::OK);
    runs_and_ends(&server).await;

    // A revocation stops the agent at its next call, saying what to do.
    server
        .post(
            &format!("/api/v1/admin/nodes/{node}/credential/revoke"),
            op,
            json!({}),
        )
        .await
        .expect(reqwest::StatusCode::NO_CONTENT);
    let mut exited = None;
    for _ in 0..200 {
        exited = agent.0.try_wait().expect("agent state");
        if exited.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(exited.is_some_and(|status| !status.success()));
    let said = std::fs::read_to_string(dir.join("agent.log")).unwrap_or_default();
    assert!(
        said.contains("join token issued for node gpu-box-1"),
        "{said}"
    );
    assert!(
        saved_credential(&state).is_none(),
        "the refused credential is forgotten"
    );
    std::fs::remove_dir_all(dir).ok();
}

/// An agent whose rounds are a minute apart still starts and stops work at
/// once: it waits on the control plane for its assignments to change.
async fn starts_and_stops_reach_the_agent_without_waiting_for_its_round(engine: Engine) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    let op = &operator.token;
    let token = lab::catalog(&server, op).await;
    let dir = std::env::temp_dir().join(format!("gantry-agent-test-{}", uuid::Uuid::new_v4()));
    let _agent = Agent(
        lab::agent_command_every(&server, &token, "gpu-box-1", &dir, "process", 60_000)
            .args(["--workload-command", "sleep 3600"])
            .spawn()
            .expect("start the agent"),
    );
    registered(&server, op).await;
    // Well inside the minute the next round would take.
    runs_and_ends(&server).await;
    std::fs::remove_dir_all(&dir).ok();
}

/// The agent's own `/metrics`, as Prometheus scrapes a DCGM exporter on
/// every node: each GPU's readings, labelled with the organization whose
/// work holds it; a GPU that changes hands changes labels.
async fn the_agent_exports_each_gpus_telemetry_with_the_tenant_holding_it(engine: Engine) {
    let server = TestServer::start(engine).await;
    let operator = server.operator().await;
    let op = &operator.token;
    let token = lab::catalog(&server, op).await;
    let dir = std::env::temp_dir().join(format!("gantry-agent-test-{}", uuid::Uuid::new_v4()));
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let _agent = Agent(
        lab::agent_command(&server, &token, "gpu-box-1", &dir.join("state"), "process")
            .args(["--metrics-listen", &format!("127.0.0.1:{port}")])
            .spawn()
            .expect("start the agent"),
    );
    registered(&server, op).await;
    let tenant = server.signup("tenant").await;
    let org_name = server
        .get(&format!("/api/v1/orgs/{}", tenant.org_id), &tenant.token)
        .await
        .str("/name");
    let order = server
        .order(&tenant, json!({ "instance_type": "h100x2" }))
        .await;
    let running = server.wait_status(&tenant, order, "running").await;
    let held: Vec<u64> = running["placement"][0]["gpu_ids"]
        .as_array()
        .expect("placement")
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    assert_eq!(held.len(), 2, "{running}");

    let scrape = || async {
        reqwest::get(format!("http://127.0.0.1:{port}/metrics"))
            .await
            .expect("scrape the agent")
            .text()
            .await
            .expect("text")
    };
    // Simulated GPUs read 97 % busy while held, idle otherwise.
    let line = |gpu: u64, organization: &str, value: &str| {
        let id = if organization.is_empty() {
            String::new()
        } else {
            tenant.org_id.to_string()
        };
        format!(
            r#"gantry_gpu_utilization_ratio{{node="gpu-box-1",gpu="{gpu}",organization="{organization}",organization_id="{id}"}} {value}"#
        )
    };
    let mut text = String::new();
    for _ in 0..200 {
        text = scrape().await;
        if (0..4).all(|gpu| {
            let expected = if held.contains(&gpu) {
                line(gpu, &org_name, "0.97")
            } else {
                line(gpu, "", "0")
            };
            text.lines().any(|l| l == expected)
        }) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for gpu in &held {
        let expected = line(*gpu, &org_name, "0.97");
        assert!(
            text.lines().any(|l| l == expected),
            "{expected} not in:\n{text}"
        );
    }
    assert!(
        text.contains("# TYPE gantry_gpu_power_watts gauge"),
        "{text}"
    );

    // Once the order ends its GPUs are free again, and the series that
    // named the tenant go.
    server.cancel(&tenant, order).await;
    server
        .wait_order(&tenant, order, "ended", |o| o["ended_at"].is_string())
        .await;
    for _ in 0..200 {
        text = scrape().await;
        if !text.contains(&org_name) && (0..4).all(|gpu| text.contains(&line(gpu, "", "0"))) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!text.contains(&org_name), "{text}");
    for gpu in 0..4 {
        assert!(text.lines().any(|l| l == line(gpu, "", "0")), "{text}");
    }

    // Every per-GPU metric the shipped dashboards and alerts read is here.
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy");
    let mut read = String::new();
    for file in ["grafana/gantry.json", "prometheus/alerts.yml"] {
        read.push_str(&std::fs::read_to_string(deploy.join(file)).expect(file));
    }
    let names: std::collections::BTreeSet<&str> = read
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("gantry_gpu_"))
        .collect();
    assert!(names.len() >= 3, "{names:?}");
    for name in names {
        assert!(
            text.contains(&format!("\n{name}{{")),
            "{name} is read by deploy/ but the agent does not export it"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}
