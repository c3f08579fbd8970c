//! The real agent binary (with simulated GPUs) against a real server on
//! SQLite and PostgreSQL: it registers with a join token, runs its
//! assignment with exactly the allocated GPUs, reports completion, and when
//! it dies its node becomes unhealthy and its work is queued again.

#[allow(dead_code)]
#[path = "../../../tests/api/support.rs"]
mod support;

use std::path::Path;
use std::process::{Child, Command, Stdio};

use reqwest::StatusCode;
use serde_json::json;
use support::{Engine, TestServer};

on_both_engines!(agent_runs_work_on_exact_gpus_and_its_death_requeues_it);

/// The agent process, killed with SIGKILL when dropped.
struct Agent(Child);

impl Drop for Agent {
    fn drop(&mut self) {
        self.0.kill().ok();
        self.0.wait().ok();
    }
}

fn spawn_agent(server: &TestServer, token: &str, dir: &Path) -> Agent {
    // Each workload writes its GPUs and pid, then holds its GPUs while the
    // `hold` file exists.
    let command = format!(
        "echo \"$CUDA_VISIBLE_DEVICES\" > {dir}/$GANTRY_ORDER_ID.gpus; echo $$ > {dir}/$GANTRY_ORDER_ID.pid; \
         if [ -e {dir}/hold ]; then exec sleep 60; fi",
        dir = dir.display()
    );
    let child = Command::new(env!("CARGO_BIN_EXE_gantry-agent"))
        .args([
            "--server",
            &server.base,
            "--join-token",
            token,
            "--name",
            "gpu-box-1",
        ])
        .args(["--simulate-gpus", "4xH100-SXM-80GB", "--interval-ms", "100"])
        .args(["--grace-seconds", "1", "--workload-command", &command])
        .arg("--state-dir")
        .arg(dir.join("state"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the agent");
    Agent(child)
}

async fn agent_runs_work_on_exact_gpus_and_its_death_requeues_it(engine: Engine) {
    let server = TestServer::start_with(engine, |config| {
        config.agent_heartbeat_deadline_seconds = 2;
    })
    .await;
    let operator = server.operator().await;
    let op = &operator.token;
    server
        .post(
            "/api/v1/admin/catalog/regions",
            op,
            json!({ "name": "lab", "display_name": "Lab", "time_zone": "UTC" }),
        )
        .await
        .expect(StatusCode::CREATED);
    server
        .post(
            "/api/v1/admin/catalog/gpu-models",
            op,
            json!({ "name": "H100-SXM-80GB", "vendor": "NVIDIA", "memory_gib": 80, "interconnect": "nvlink" }),
        )
        .await
        .expect(StatusCode::CREATED);
    let instance = server
        .post(
            "/api/v1/admin/catalog/instance-types",
            op,
            json!({ "name": "h100x2", "gpu_model": "H100-SXM-80GB", "gpus_per_node": 2, "vcpus": 1, "memory_gib": 1 }),
        )
        .await;
    instance.expect(StatusCode::CREATED);
    server
        .post(
            &format!(
                "/api/v1/admin/catalog/instance-types/{}/prices",
                instance.id("/id")
            ),
            op,
            json!({ "pricing_class": "on_demand", "hourly_micros": 5_000_000 }),
        )
        .await
        .expect(StatusCode::CREATED);
    let join = server
        .post("/api/v1/admin/join-tokens", op, json!({ "region": "lab" }))
        .await;
    join.expect(StatusCode::CREATED);
    let token = join.str("/token");

    let dir = std::env::temp_dir().join(format!("gantry-agent-test-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).expect("work dir");
    let mut agent = spawn_agent(&server, &token, &dir);

    // The node registers with its four GPUs.
    let mut node = serde_json::Value::Null;
    for _ in 0..200 {
        let nodes = server.get("/api/v1/admin/nodes", op).await;
        if let Some(found) = nodes.items().iter().find(|n| n["name"] == "gpu-box-1") {
            node = found.clone();
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(node["driver"], "agent", "the agent registered: {node}");
    assert_eq!(node["region"], "lab");
    assert_eq!(node["gpus"].as_array().map(Vec::len), Some(4));
    let node_id = node["id"].as_str().expect("node id").to_owned();

    // A short workload runs on exactly its GPUs and completes.
    let tenant = server.signup("tenant").await;
    let first = server
        .order(&tenant, json!({ "instance_type": "h100x2" }))
        .await;
    let running = server
        .wait_order(&tenant, first, "placed", |o| {
            !o["placement"].as_array().is_some_and(Vec::is_empty)
        })
        .await;
    let gpus: Vec<String> = running["placement"][0]["gpu_ids"]
        .as_array()
        .expect("gpu ids")
        .iter()
        .map(|g| g.to_string())
        .collect();
    let done = server.wait_status(&tenant, first, "completed").await;
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
    assert_eq!(
        server
            .count("SELECT COUNT(*) FROM node_events WHERE kind = 'allocation_lost'")
            .await,
        1
    );
    assert_eq!(server.count("SELECT COUNT(*) FROM gpu_claims").await, 0);

    // The dead agent's workload outlives it in its own process group.
    if let Ok(pid) = std::fs::read_to_string(dir.join(format!("{second}.pid"))) {
        Command::new("kill").args(["-9", pid.trim()]).status().ok();
    }
    std::fs::remove_dir_all(&dir).ok();
}
