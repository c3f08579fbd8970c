//! Jobs on real agent processes (simulated GPUs, real commands): output
//! with the exact GPUs, exit codes and retries, the walltime killing a
//! whole process group, requeue on agent death, and the rendezvous of a
//! two-node job.

use crate::lab;
use crate::support;
use gantry_test_support::on_both_engines;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use lab::Agent;
use reqwest::StatusCode;
use sea_orm::EntityTrait;
use serde_json::{Value, json};
use support::{Engine, Tenant, TestServer};
use uuid::Uuid;

on_both_engines!(
    a_job_sees_exactly_its_gpus_and_its_output_is_kept,
    a_failing_job_keeps_its_exit_code_and_retries_only_when_asked,
    the_walltime_stops_the_whole_process_group,
    a_job_whose_agent_dies_completes_on_another_node,
    a_two_node_job_gets_one_rendezvous,
);

fn spawn_agent(server: &TestServer, token: &str, dir: &Path, name: &str) -> Agent {
    let child = lab::agent_command(server, token, name, &dir.join(name), "process")
        .args(["--grace-seconds", "1", "--workload-command", "sleep 3600"])
        .spawn()
        .expect("start the agent");
    Agent(child)
}

struct Lab {
    server: TestServer,
    tenant: Tenant,
    operator: String,
    token: String,
    dir: PathBuf,
}

/// A server with a one-region catalog (h100x2) and a join token.
async fn lab(engine: Engine) -> Lab {
    let server = TestServer::start_with(engine, |config| {
        config.agent_heartbeat_deadline_seconds = 2;
    })
    .await;
    let operator = server.operator().await.token;
    let token = lab::catalog(&server, &operator).await;
    let tenant = server.signup("jobs").await;
    let dir = std::env::temp_dir().join(format!("gantry-jobs-{}", Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).expect("work dir");
    Lab {
        token,
        server,
        tenant,
        operator,
        dir,
    }
}

impl Lab {
    async fn nodes_ready(&self, count: usize) {
        assert!(
            lab::nodes_ready(&self.server, &self.operator, count).await,
            "{count} agents never registered"
        );
    }

    async fn submit(&self, body: Value) -> Uuid {
        let reply = self
            .server
            .post(
                &format!("/api/v1/orgs/{}/orders", self.tenant.org_id),
                &self.tenant.token,
                body,
            )
            .await;
        reply.expect(StatusCode::CREATED);
        reply.id("/id")
    }

    async fn ended(&self, order: Uuid, status: &str) -> Value {
        self.server
            .wait_order(&self.tenant, order, status, |o| {
                o["status"] == status && o["ended_at"].is_string()
            })
            .await
    }

    async fn get(&self, path: &str) -> Value {
        let reply = self
            .server
            .get(
                &format!("/api/v1/orgs/{}{path}", self.tenant.org_id),
                &self.tenant.token,
            )
            .await;
        reply.expect(StatusCode::OK);
        reply.body.clone()
    }

    async fn output(&self, order: Uuid) -> Vec<String> {
        let logs = self.get(&format!("/orders/{order}/logs")).await;
        logs["lines"]
            .as_array()
            .expect("lines")
            .iter()
            .map(|l| {
                format!(
                    "{}: {}",
                    l["stream"].as_str().unwrap_or(""),
                    l["line"].as_str().unwrap_or("")
                )
            })
            .collect()
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.dir).ok();
    }
}

async fn a_job_sees_exactly_its_gpus_and_its_output_is_kept(engine: Engine) {
    let lab = lab(engine).await;
    let _agent = spawn_agent(&lab.server, &lab.token, &lab.dir, "gpu-box-1");
    lab.nodes_ready(1).await;
    let job = lab
        .submit(json!({
            "instance_type": "h100x2",
            "job": {
                "command": "echo \"gpus=$CUDA_VISIBLE_DEVICES rank=$NODE_RANK of $WORLD_SIZE\"; echo \"token=$API_TOKEN\"; echo to-stderr >&2; printf '[%s]' \"$GREETING\"",
                "args": ["two words", "it's"],
                "env": { "GREETING": "hello" },
                "secret_env": { "API_TOKEN": "tok-9f2c" },
                "working_dir": "/tmp"
            }
        }))
        .await;
    let done = lab.ended(job, "completed").await;
    let gpus = lab.server.first_attempt_gpus(&lab.tenant, job).await;
    assert_eq!(gpus.len(), 2);
    assert_eq!(done["job"]["exit_code"], 0);
    let output = lab.output(job).await;
    assert!(
        output.contains(&format!("stdout: gpus={} rank=0 of 1", gpus.join(","))),
        "{output:?}"
    );
    // Each argument is one word after the command; the last line needs no
    // newline.
    assert!(
        output.contains(&"stdout: [hello][two words][it's]".to_owned()),
        "{output:?}"
    );
    assert!(
        output.contains(&"stderr: to-stderr".to_owned()),
        "{output:?}"
    );
    // A secret variable reaches the job's processes; the order shows its
    // name only, and the database holds it sealed.
    assert!(
        output.contains(&"stdout: token=tok-9f2c".to_owned()),
        "{output:?}"
    );
    assert_eq!(done["job"]["secret_env"], json!(["API_TOKEN"]));
    assert!(!done.to_string().contains("tok-9f2c"), "{done}");
    let stored = gantry_entities::order::Entity::find_by_id(job)
        .one(lab.server.db())
        .await
        .expect("read")
        .expect("order");
    let stored = stored.job.unwrap_or_default();
    assert!(
        stored.contains("API_TOKEN") && !stored.contains("tok-9f2c"),
        "{stored}"
    );

    // Following an ended job's output streams every line, then `end`.
    let stream = lab
        .server
        .http
        .get(lab.server.url(&format!(
            "/api/v1/orgs/{}/orders/{job}/logs?follow=true",
            lab.tenant.org_id
        )))
        .bearer_auth(&lab.tenant.token)
        .send()
        .await
        .expect("follow");
    assert_eq!(stream.headers()["content-type"], "text/event-stream");
    let body = tokio::time::timeout(Duration::from_secs(10), stream.text())
        .await
        .expect("the stream ends with the job")
        .expect("body");
    assert!(body.contains("gpus="), "{body}");
    assert!(body.contains("event: end"), "{body}");
}

async fn a_failing_job_keeps_its_exit_code_and_retries_only_when_asked(engine: Engine) {
    let lab = lab(engine).await;
    let _agent = spawn_agent(&lab.server, &lab.token, &lab.dir, "gpu-box-1");
    lab.nodes_ready(1).await;
    let once = lab
        .submit(json!({ "instance_type": "h100x2", "job": { "command": "echo trying; exit 3" } }))
        .await;
    let failed = lab.ended(once, "failed").await;
    assert_eq!(failed["job"]["exit_code"], 3);
    assert_eq!(failed["attempts"], 1);
    assert!(
        failed["failure_reason"]
            .as_str()
            .unwrap_or_default()
            .contains("code 3")
    );

    let again = lab
        .submit(json!({
            "instance_type": "h100x2",
            "job": { "command": "echo attempt $GANTRY_ATTEMPT; exit 3", "retry": { "on_failure": true, "max_retries": 1 } }
        }))
        .await;
    let failed = lab.ended(again, "failed").await;
    assert_eq!(failed["attempts"], 2);
    let attempts = lab.get(&format!("/orders/{again}/attempts")).await;
    let summary: Vec<(i64, i64, String)> = attempts
        .as_array()
        .expect("attempts")
        .iter()
        .map(|a| {
            (
                a["attempt"].as_i64().unwrap_or(0),
                a["exit_code"].as_i64().unwrap_or(0),
                a["outcome"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![(1, 3, "preempted".to_owned()), (2, 3, "failed".to_owned())]
    );
    let output = lab.output(again).await;
    assert_eq!(output, vec!["stdout: attempt 1", "stdout: attempt 2"]);
}

async fn the_walltime_stops_the_whole_process_group(engine: Engine) {
    let lab = lab(engine).await;
    let _agent = spawn_agent(&lab.server, &lab.token, &lab.dir, "gpu-box-1");
    lab.nodes_ready(1).await;
    let pid_file = lab.dir.join("child.pid");
    let job = lab
        .submit(json!({
            "instance_type": "h100x2",
            "job": {
                "command": format!("sleep 300 & echo $! > {}; wait", pid_file.display()),
                "max_runtime_seconds": 1
            }
        }))
        .await;
    let timed_out = lab.ended(job, "timed_out").await;
    assert!(
        timed_out["failure_reason"]
            .as_str()
            .unwrap_or_default()
            .contains("walltime")
    );
    let child = std::fs::read_to_string(&pid_file).expect("the job started its child");
    // The child in the background went with the rest of the group.
    let mut alive = true;
    for _ in 0..50 {
        alive = Command::new("kill")
            .args(["-0", child.trim()])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !alive {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        !alive,
        "the job's child {} outlived the walltime",
        child.trim()
    );
    let attempts = lab.get(&format!("/orders/{job}/attempts")).await;
    assert_eq!(attempts[0]["outcome"], "timed_out");
}

async fn a_job_whose_agent_dies_completes_on_another_node(engine: Engine) {
    let lab = lab(engine).await;
    let mut first = spawn_agent(&lab.server, &lab.token, &lab.dir, "gpu-box-1");
    lab.nodes_ready(1).await;
    let first_pid = lab.dir.join("first.pid");
    // Only one node exists when the job is placed, so it starts there.
    let job = lab
        .submit(json!({
            "instance_type": "h100x2",
            "workload_class": "training",
            "job": { "command": format!("if [ \"$GANTRY_ATTEMPT\" = 1 ]; then echo $$ > {}; exec sleep 30; fi; echo finished on attempt $GANTRY_ATTEMPT", first_pid.display()) }
        }))
        .await;
    lab.server.wait_status(&lab.tenant, job, "running").await;
    let _second = spawn_agent(&lab.server, &lab.token, &lab.dir, "gpu-box-2");
    lab.nodes_ready(2).await;
    first.0.kill().expect("kill the agent");
    first.0.wait().ok();
    let done = lab.ended(job, "completed").await;
    assert_eq!(done["attempts"], 2);
    let attempts = lab.get(&format!("/orders/{job}/attempts")).await;
    let nodes: Vec<&str> = attempts
        .as_array()
        .expect("attempts")
        .iter()
        .map(|a| a["nodes"][0]["node_name"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(nodes, vec!["gpu-box-1", "gpu-box-2"]);
    assert_eq!(attempts[0]["outcome"], "preempted");
    assert_eq!(attempts[1]["outcome"], "completed");
    assert!(
        lab.output(job)
            .await
            .contains(&"stdout: finished on attempt 2".to_owned())
    );
    // The first attempt's sleep outlived its agent in its own group.
    if let Ok(pid) = std::fs::read_to_string(&first_pid) {
        Command::new("kill").args(["-9", pid.trim()]).status().ok();
    }
}

async fn a_two_node_job_gets_one_rendezvous(engine: Engine) {
    let lab = lab(engine).await;
    let _one = spawn_agent(&lab.server, &lab.token, &lab.dir, "gpu-box-1");
    let _two = spawn_agent(&lab.server, &lab.token, &lab.dir, "gpu-box-2");
    lab.nodes_ready(2).await;
    let job = lab
        .submit(json!({
            "instance_type": "h100x2",
            "node_count": 2,
            "job": { "command": "echo \"rank=$NODE_RANK world=$WORLD_SIZE master=$MASTER_ADDR:$MASTER_PORT\"" }
        }))
        .await;
    lab.ended(job, "completed").await;
    let mut lines = lab.output(job).await;
    lines.sort();
    assert_eq!(lines.len(), 2, "{lines:?}");
    let master = |line: &str| line.split("master=").nth(1).unwrap_or_default().to_owned();
    assert_eq!(master(&lines[0]), master(&lines[1]), "{lines:?}");
    assert!(master(&lines[0]).starts_with("gpu-box-"), "{lines:?}");
    assert!(lines[0].contains("rank=0 world=2"), "{lines:?}");
    assert!(lines[1].contains("rank=1 world=2"), "{lines:?}");
}
