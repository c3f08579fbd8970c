//! What the agent tests share: a control plane ready for agents to join,
//! and agent processes.

use std::path::Path;
use std::process::{Child, Command, Stdio};

use reqwest::StatusCode;
use serde_json::json;

use crate::support::TestServer;

/// An agent process, killed with SIGKILL when dropped.
pub struct Agent(pub Child);

impl Drop for Agent {
    fn drop(&mut self) {
        self.0.kill().ok();
        self.0.wait().ok();
    }
}

/// The agent binary joining `server` as `name` with four simulated H100s,
/// polling every 100 ms, its join token in the environment (never on the
/// command line), isolating workloads with `runtime`.
pub fn agent_command(
    server: &TestServer,
    token: &str,
    name: &str,
    state_dir: &Path,
    runtime: &str,
) -> Command {
    agent_command_every(server, token, name, state_dir, runtime, 100)
}

/// [`agent_command`] with rounds every `interval_ms`.
pub fn agent_command_every(
    server: &TestServer,
    token: &str,
    name: &str,
    state_dir: &Path,
    runtime: &str,
    interval_ms: u64,
) -> Command {
    agent_command_simulating(
        server,
        token,
        name,
        state_dir,
        runtime,
        interval_ms,
        "4xH100-SXM-80GB",
    )
}

/// [`agent_command_every`] with other simulated GPUs (`--simulate-gpus`).
pub fn agent_command_simulating(
    server: &TestServer,
    token: &str,
    name: &str,
    state_dir: &Path,
    runtime: &str,
    interval_ms: u64,
    gpus: &str,
) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_gantry-agent"));
    command
        .env("GANTRY_JOIN_TOKEN", token)
        .args([
            "--server",
            &server.base,
            "--name",
            name,
            "--runtime",
            runtime,
        ])
        .args(["--simulate-gpus", gpus, "--interval-ms"])
        .arg(interval_ms.to_string())
        .arg("--state-dir")
        .arg(state_dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    command
}

/// A one-region catalog with a 2×H100 instance type; answers a join token.
pub async fn catalog(server: &TestServer, op: &str) -> String {
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
    join.str("/token")
}

/// Waits up to 20 s until `count` nodes are ready; answers whether they
/// became so.
// Each test binary includes this module; those of one node only wait
// through `node::Node::ready`.
#[allow(dead_code)]
pub async fn nodes_ready(server: &TestServer, operator: &str, count: usize) -> bool {
    for _ in 0..400 {
        let nodes = server.get("/api/v1/admin/nodes", operator).await;
        if nodes
            .items()
            .iter()
            .filter(|n| n["state"] == "ready")
            .count()
            == count
        {
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    false
}
