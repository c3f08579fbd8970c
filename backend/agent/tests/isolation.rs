//! Tenants on one node, as an attacker would test them: the real agent
//! binary with the `sandbox` runtime (bubblewrap, cgroups) runs real
//! processes for two tenants, and each assertion is on what a workload
//! actually saw or did, not on a command line.

mod lab;
#[allow(dead_code)]
#[path = "../../../tests/api/support.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use lab::Agent;
use reqwest::StatusCode;
use serde_json::{Value, json};
use support::{Engine, Tenant, TestServer};
use uuid::Uuid;

on_both_engines!(
    a_tenants_job_reaches_nothing_of_the_node_or_of_other_tenants,
    the_same_attack_succeeds_on_an_unisolated_node,
    memory_and_process_limits_hold_and_the_node_stays_healthy,
    an_instance_is_reachable_by_its_owners_key_only_and_survives_agent_restarts,
    two_tenants_on_one_mig_gpu_each_reach_only_their_own_instance,
);

/// Something only the agent's own environment holds.
const AGENT_CANARY: &str = "agent-environment-canary";

/// A sandbox node and the server it joins; the directory goes when done.
struct Node {
    server: TestServer,
    operator: String,
    token: String,
    dir: PathBuf,
    /// Users and ports of this node's workloads, apart from other tests'.
    uids: (u32, u32),
    ports: (u16, u16),
}

impl Drop for Node {
    /// Workloads outlive agents by design: whatever a failed test left
    /// running under this node's users goes too.
    fn drop(&mut self) {
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let status = std::fs::read_to_string(entry.path().join("status")).unwrap_or_default();
            let uid = status
                .lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().next())
                .and_then(|u| u.parse::<u32>().ok());
            if uid.is_some_and(|u| (self.uids.0..=self.uids.1).contains(&u)) {
                Command::new("kill")
                    .arg("-9")
                    .arg(entry.file_name())
                    .stderr(Stdio::null())
                    .status()
                    .ok();
            }
        }
        std::fs::remove_dir_all(&self.dir).ok();
    }
}

async fn node(engine: Engine) -> Node {
    let server = TestServer::start_with(engine, |config| {
        config.agent_heartbeat_deadline_seconds = 10;
    })
    .await;
    let operator = server.operator().await.token;
    let token = lab::catalog(&server, &operator).await;
    let dir = std::env::temp_dir().join(format!("gantry-isolation-{}", Uuid::now_v7().simple()));
    std::fs::create_dir_all(&dir).expect("work dir");
    // Tests run side by side: each node takes its own users and ports (a
    // shared range would let one test's clean-up kill another's work).
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let slot = (std::process::id() % 20) * 20 + NEXT.fetch_add(1, Ordering::Relaxed) % 20;
    let first_port = 20_000 + u16::try_from(slot).unwrap_or(0) * 100;
    Node {
        server,
        operator,
        token,
        uids: (300_000 + slot * 100, 300_000 + slot * 100 + 99),
        ports: (first_port, first_port + 99),
        dir,
    }
}

impl Node {
    fn state(&self) -> PathBuf {
        self.dir.join("state")
    }

    fn agent(&self) -> Agent {
        self.agent_with("sandbox")
    }

    fn agent_with(&self, runtime: &str) -> Agent {
        self.spawn(lab::agent_command(
            &self.server,
            &self.token,
            "gpu-box-1",
            &self.state(),
            runtime,
        ))
    }

    fn agent_simulating(&self, runtime: &str, gpus: &str) -> Agent {
        self.spawn(lab::agent_command_simulating(
            &self.server,
            &self.token,
            "gpu-box-1",
            &self.state(),
            runtime,
            100,
            gpus,
        ))
    }

    /// Starts the agent with this node's users, ports and canary.
    fn spawn(&self, mut command: Command) -> Agent {
        let log = std::fs::File::create(self.dir.join("agent.log")).expect("agent log");
        let child = command
            .env("GANTRY_AGENT_CANARY", AGENT_CANARY)
            .args(["--grace-seconds", "1", "--pids-max", "64"])
            .args(["--public-host", "127.0.0.1"])
            .arg("--uid-range")
            .arg(format!("{}-{}", self.uids.0, self.uids.1))
            .arg("--port-range")
            .arg(format!("{}-{}", self.ports.0, self.ports.1))
            .stderr(log)
            .spawn()
            .expect("start the agent");
        Agent(child)
    }

    fn agent_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("agent.log")).unwrap_or_default()
    }

    async fn ready(&self) {
        for _ in 0..200 {
            let nodes = self.server.get("/api/v1/admin/nodes", &self.operator).await;
            if let Some(node) = nodes.items().iter().find(|n| n["state"] == "ready") {
                let isolated = node["runtime"] != "process";
                assert_eq!(node["isolated"], isolated);
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the agent never registered: {}", self.agent_log());
    }

    async fn order(&self, tenant: &Tenant, order: Uuid) -> Value {
        let reply = self
            .server
            .get(
                &format!("/api/v1/orgs/{}/orders/{order}", tenant.org_id),
                &tenant.token,
            )
            .await;
        reply.expect(StatusCode::OK);
        reply.body.clone()
    }

    async fn until(
        &self,
        tenant: &Tenant,
        order: Uuid,
        what: &str,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        for _ in 0..600 {
            let current = self.order(tenant, order).await;
            if done(&current) {
                return current;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let output = self
            .server
            .get(
                &format!("/api/v1/orgs/{}/orders/{order}/logs", tenant.org_id),
                &tenant.token,
            )
            .await;
        panic!(
            "order {order} never became {what}: {}\noutput: {}\nagent: {}",
            self.order(tenant, order).await,
            output.body,
            self.agent_log()
        );
    }

    async fn output(&self, tenant: &Tenant, order: Uuid) -> Vec<String> {
        let reply = self
            .server
            .get(
                &format!("/api/v1/orgs/{}/orders/{order}/logs", tenant.org_id),
                &tenant.token,
            )
            .await;
        reply.expect(StatusCode::OK);
        reply.body["lines"]
            .as_array()
            .expect("lines")
            .iter()
            .map(|l| l["line"].as_str().unwrap_or_default().to_owned())
            .collect()
    }
}

fn gpus_of(order: &Value) -> Vec<u64> {
    order["placement"][0]["gpu_ids"]
        .as_array()
        .expect("gpu ids")
        .iter()
        .filter_map(Value::as_u64)
        .collect()
}

/// What tenant A's job saw while tenant B's job ran beside it.
struct Attack {
    a: Tenant,
    b: Tenant,
    victim: Uuid,
    victim_view: Value,
    seen: Vec<String>,
}

impl Attack {
    fn verdict(&self, key: &str) -> String {
        self.seen
            .iter()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .unwrap_or_else(|| panic!("no {key} in {:?}", self.seen))
            .to_owned()
    }
}

/// Tenant B keeps a job running with a secret in its environment, its
/// output and its scratch; tenant A's job then tries every way there is
/// from inside its workload, each probe printing one verdict line.
async fn attack(node: &Node, agent: u32) -> Attack {
    let (a, b) = (
        node.server.signup("tenant-a").await,
        node.server.signup("tenant-b").await,
    );
    // B also serves on its loopback, as a notebook or TensorBoard would.
    let b_port = node.ports.1;
    let victim = node.server.order(
            &b,
            json!({
                "instance_type": "h100x2",
                "job": {
                    "command": format!("trap 'sleep 0.5; echo stopped-gracefully; exit 0' TERM; \
                        python3 -c \"import socket, time; s = socket.socket(); s.bind(('127.0.0.1', {b_port})); s.listen(); time.sleep(61)\" & \
                        echo secret-of-b > /scratch/secret; echo \"output-of-b $HF_TOKEN\"; sleep 61 & wait"),
                    "env": { "HF_TOKEN": "hf_secret_of_b" }
                }
            }),
        )
        .await;
    let control_plane = node
        .server
        .base
        .rsplit(':')
        .next()
        .unwrap_or_default()
        .to_owned();
    let victim_view = node
        .until(&b, victim, "running", |o| o["status"] == "running")
        .await;
    let state = node.state();
    let state = state.display();
    let probe = format!(
        r#"echo "uid=$(id -u)"
echo "visible=$CUDA_VISIBLE_DEVICES"
cat {state}/credential.json >/dev/null 2>&1 && echo "credential=read" || echo "credential=refused"
ls {state} >/dev/null 2>&1 && echo "state=listed" || echo "state=refused"
cat {state}/output/{victim}.stdout >/dev/null 2>&1 && echo "b-output=read" || echo "b-output=refused"
ls {state}/scratch/{victim} >/dev/null 2>&1 && echo "b-scratch=listed" || echo "b-scratch=refused"
echo "processes=$(for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline; echo; done | grep -c 'slee[p] 6[1]')"
echo "b-visible=$(cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | grep -c hf_secret_of_b)"
echo "agent-visible=$(cat /proc/{agent}/environ /proc/{agent}/cmdline 2>/dev/null | tr '\0' '\n' | grep -c -e gj_ -e {AGENT_CANARY})"
for i in 0 1 2 3; do (: < /dev/nvidia$i) 2>/dev/null && echo "gpu$i=open" || echo "gpu$i=refused"; done
for f in {state}/dev/nvidia0 {state}/dev/nvidia1 {state}/dev/nvidia2 {state}/dev/nvidia3; do (: < $f) 2>/dev/null && echo "host-device=open"; done
echo x > /etc/gantry-probe 2>/dev/null && echo "system=written" || echo "system=read-only"
echo "cgroups-seen=$(ls /sys/fs/cgroup 2>/dev/null | grep -c .)"
reach() {{ for _ in 1 2 3; do python3 -c "import socket; socket.create_connection(('127.0.0.1', $1), 2)" 2>/dev/null && return 0; sleep 0.5; done; return 1; }}
reach {b_port} && echo "b-port=open" || echo "b-port=refused"
reach {control_plane} && echo "control-plane=open" || echo "control-plane=refused"
echo "env-start"; env; echo "env-end""#
    );
    let attacker = node
        .server
        .order(
            &a,
            json!({ "instance_type": "h100x2", "job": { "command": probe } }),
        )
        .await;
    node.until(&a, attacker, "completed", |o| o["status"] == "completed")
        .await;
    let seen = node.output(&a, attacker).await;
    Attack {
        a,
        b,
        victim,
        victim_view,
        seen,
    }
}

async fn a_tenants_job_reaches_nothing_of_the_node_or_of_other_tenants(engine: Engine) {
    let node = node(engine).await;
    let agent = node.agent();
    node.ready().await;
    let attack = attack(&node, agent.0.id()).await;
    let verdict = |key: &str| attack.verdict(key);
    let (a, b, victim, seen) = (&attack.a, &attack.b, attack.victim, &attack.seen);
    let uid: u32 = verdict("uid").parse().expect("uid");
    assert!(
        (node.uids.0..=node.uids.1).contains(&uid),
        "the job ran as a user of its own, not {uid}"
    );
    assert_eq!(verdict("credential"), "refused");
    assert_eq!(verdict("state"), "refused");
    assert_eq!(verdict("b-output"), "refused");
    assert_eq!(verdict("b-scratch"), "refused");
    assert_eq!(
        verdict("processes"),
        "0",
        "B's `sleep` is not in A's process list"
    );
    assert_eq!(verdict("b-visible"), "0");
    assert_eq!(
        verdict("agent-visible"),
        "0",
        "the agent's token and environment"
    );
    assert_eq!(verdict("system"), "read-only");
    // A network of its own: B's loopback and the node's are out of reach.
    assert_eq!(verdict("b-port"), "refused");
    assert_eq!(verdict("control-plane"), "refused");
    assert_eq!(
        verdict("cgroups-seen"),
        "0",
        "other workloads' cgroups are hidden"
    );
    assert!(!seen.iter().any(|l| l == "host-device=open"), "{seen:?}");
    // B holds two of the node's four GPUs, so A got the other two.
    let theirs = gpus_of(&attack.victim_view);
    let mine: Vec<u64> = (0..4).filter(|i| !theirs.contains(i)).collect();
    let visible: Vec<String> = mine.iter().map(u64::to_string).collect();
    assert_eq!(verdict("visible"), visible.join(","));
    for i in 0..4 {
        let expected = if mine.contains(&i) { "open" } else { "refused" };
        assert_eq!(
            verdict(&format!("gpu{i}")),
            expected,
            "GPU {i}: mine {mine:?}, B's {theirs:?}"
        );
    }
    // The environment is the order's and Gantry's, nothing of the agent's.
    let env: Vec<&String> = seen
        .iter()
        .skip_while(|l| *l != "env-start")
        .skip(1)
        .take_while(|l| *l != "env-end")
        .collect();
    assert!(!env.is_empty());
    for line in &env {
        assert!(
            !line.contains(AGENT_CANARY) && !line.contains("gj_"),
            "{line}"
        );
        let name = line.split('=').next().unwrap_or_default();
        assert!(
            name.starts_with("GANTRY_")
                || [
                    "CUDA_VISIBLE_DEVICES",
                    "PATH",
                    "HOME",
                    "LANG",
                    "PWD",
                    "SHLVL",
                    "OLDPWD",
                    "_"
                ]
                .contains(&name)
                || ["MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "NODE_RANK"].contains(&name),
            "unexpected variable in the job: {line}"
        );
    }
    assert!(
        seen.iter()
            .all(|l| !l.contains("secret-of-b") && !l.contains("hf_secret"))
    );

    // B was not touched, and its own output is there for B alone.
    let untouched = node.order(b, victim).await;
    assert_eq!(untouched["status"], "running", "{untouched}");
    assert!(
        node.output(b, victim)
            .await
            .contains(&"output-of-b hf_secret_of_b".to_owned())
    );
    node.server
        .get(
            &format!("/api/v1/orgs/{}/orders/{victim}/logs", a.org_id),
            &a.token,
        )
        .await
        .expect(StatusCode::NOT_FOUND);

    // Once B's job ends, its scratch and cgroups are gone from the node.
    node.server.cancel(b, victim).await;
    node.until(b, victim, "cancelled and stopped", |o| {
        o["status"] == "cancelled" && o["ended_at"].is_string()
    })
    .await;
    // It had its grace period: SIGTERM reached it, not just its sandbox.
    assert!(
        node.output(b, victim)
            .await
            .contains(&"stopped-gracefully".to_owned()),
        "{:?}",
        node.output(b, victim).await
    );
    let scratch = node.state().join("scratch").join(victim.to_string());
    for _ in 0..100 {
        if !scratch.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!scratch.exists(), "B's scratch outlived its job");
}

/// The control for the test above: on a `process` node the same probes
/// find the credential, B's output and the agent's environment, so their
/// failing in a sandbox is the sandbox's doing.
async fn the_same_attack_succeeds_on_an_unisolated_node(engine: Engine) {
    let node = node(engine).await;
    let agent = node.agent_with("process");
    node.ready().await;
    let attack = attack(&node, agent.0.id()).await;
    assert_eq!(attack.verdict("uid"), "0");
    assert_eq!(attack.verdict("credential"), "read");
    assert_eq!(attack.verdict("state"), "listed");
    assert_eq!(attack.verdict("b-output"), "read");
    assert_ne!(attack.verdict("processes"), "0");
    assert_ne!(attack.verdict("agent-visible"), "0");
    assert_eq!(attack.verdict("b-port"), "open");
    assert_eq!(attack.verdict("control-plane"), "open");
    assert_ne!(attack.verdict("cgroups-seen"), "0");
    node.server.cancel(&attack.b, attack.victim).await;
    node.until(&attack.b, attack.victim, "stopped", |o| {
        o["ended_at"].is_string()
    })
    .await;
}

/// The cgroup files of a workload, on a v1 or a v2 hierarchy: its group
/// is named by its order and the agent that runs it.
fn cgroup_file(controller: &str, order: Uuid, file: &str) -> PathBuf {
    let parent = if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        PathBuf::from("/sys/fs/cgroup/gantry")
    } else {
        PathBuf::from(format!("/sys/fs/cgroup/{controller}/gantry"))
    };
    let prefix = format!("{order}-");
    std::fs::read_dir(&parent)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path())
        .find(|dir| {
            dir.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix))
        })
        .unwrap_or_else(|| parent.join(order.to_string()))
        .join(file)
}

async fn memory_and_process_limits_hold_and_the_node_stays_healthy(engine: Engine) {
    let node = node(engine).await;
    let _agent = node.agent();
    node.ready().await;
    let tenant = node.server.signup("limits").await;

    // The instance type has 1 GiB: a job that holds 1.5 GiB is killed by
    // the kernel, and the order says why.
    let greedy = node.server.order(
            &tenant,
            json!({ "instance_type": "h100x2", "job": { "command": "head -c 1536m /dev/zero | tail > /dev/null && echo survived" } }),
        )
        .await;
    let ended = node
        .until(&tenant, greedy, "failed", |o| o["status"] == "failed")
        .await;
    let reason = ended["failure_reason"].as_str().unwrap_or_default();
    assert!(reason.starts_with("out of memory"), "{ended}");
    assert!(
        !node
            .output(&tenant, greedy)
            .await
            .contains(&"survived".to_owned())
    );

    // A fork bomb fills its own process ceiling and no more, until its
    // walltime ends it.
    let bomb = node
        .server
        .order(
            &tenant,
            json!({ "instance_type": "h100x2", "job": {
                "command": "(bomb() { bomb | bomb & }; bomb); exec sleep 30",
                "max_runtime_seconds": 6
            } }),
        )
        .await;
    node.until(&tenant, bomb, "running", |o| o["status"] == "running")
        .await;
    let events = cgroup_file("pids", bomb, "pids.events");
    let mut hit = 0;
    for _ in 0..100 {
        hit = std::fs::read_to_string(&events)
            .unwrap_or_default()
            .split_whitespace()
            .nth(1)
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0);
        if hit > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        hit > 0,
        "the bomb ran into its ceiling ({})",
        events.display()
    );
    let max = std::fs::read_to_string(cgroup_file("pids", bomb, "pids.max")).unwrap_or_default();
    assert_eq!(max.trim(), "64");
    // The instance type's one vCPU and 1 GiB, as the kernel holds them.
    let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    let read = |controller: &str, v1: &str, v2_file: &str| {
        let file = if v2 { v2_file } else { v1 };
        std::fs::read_to_string(cgroup_file(controller, bomb, file))
            .unwrap_or_default()
            .trim()
            .to_owned()
    };
    let cpu = read("cpu", "cpu.cfs_quota_us", "cpu.max");
    assert!(cpu == "100000" || cpu == "100000 100000", "{cpu}");
    assert_eq!(
        read("memory", "memory.limit_in_bytes", "memory.max"),
        "1073741824"
    );
    let current: u64 = std::fs::read_to_string(cgroup_file("pids", bomb, "pids.current"))
        .unwrap_or_default()
        .trim()
        .parse()
        .unwrap_or(0);
    assert!(current <= 64, "{current} processes");
    node.until(&tenant, bomb, "timed out", |o| {
        o["status"] == "timed_out" && o["ended_at"].is_string()
    })
    .await;
    // The end is reported at once; the agent removes the group on its next
    // ticks, as soon as the kernel has reaped the killed processes.
    let group = cgroup_file("pids", bomb, "");
    for _ in 0..100 {
        if !group.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        !group.exists(),
        "the bomb's cgroup is gone with all its processes"
    );

    // The node stayed healthy and runs the next job.
    let nodes = node.server.get("/api/v1/admin/nodes", &node.operator).await;
    assert_eq!(nodes.items()[0]["state"], "ready");
    let next = node
        .server
        .order(
            &tenant,
            json!({ "instance_type": "h100x2", "job": { "command": "echo after" } }),
        )
        .await;
    node.until(&tenant, next, "completed", |o| o["status"] == "completed")
        .await;
    assert!(
        node.output(&tenant, next)
            .await
            .contains(&"after".to_owned())
    );

    // An image the node has no root file system for fails at once, saying so.
    node.server
        .post(
            "/api/v1/admin/catalog/images",
            &node.operator,
            json!({ "name": "pytorch-24.05", "reference": "nvcr.io/nvidia/pytorch:24.05-py3" }),
        )
        .await
        .expect(StatusCode::CREATED);
    let imaged = node.server.order(
            &tenant,
            json!({ "instance_type": "h100x2", "image": "pytorch-24.05", "job": { "command": "true" } }),
        )
        .await;
    let refused = node
        .until(&tenant, imaged, "failed", |o| o["status"] == "failed")
        .await;
    let reason = refused["failure_reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("this node cannot run image \"pytorch-24.05\""),
        "{reason}"
    );
}

/// A key pair made by Debian's ssh-keygen.
fn key_pair(dir: &Path, name: &str) -> (PathBuf, String) {
    let private = dir.join(name);
    let made = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
        .arg(&private)
        .status()
        .expect("ssh-keygen");
    assert!(made.success());
    let public = std::fs::read_to_string(private.with_extension("pub")).expect("public key");
    (private, public)
}

/// Runs `command` on the instance with Debian's ssh client; answers its
/// exit status and output.
fn ssh(key: &Path, port: u16, command: &str) -> (i32, String) {
    let out = Command::new("ssh")
        .arg("-i")
        .arg(key)
        .args(["-p", &port.to_string()])
        .args([
            "-o",
            "BatchMode=yes",
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "ConnectTimeout=5",
        ])
        .args([
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
        ])
        .args(["-o", "LogLevel=ERROR", "gantry@127.0.0.1", command])
        .stdin(Stdio::null())
        .output()
        .expect("ssh");
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// `ssh` until the server answers (it starts beside the instance).
async fn ssh_when_up(key: &Path, port: u16, command: &str) -> (i32, String) {
    let mut last = (255, String::new());
    for _ in 0..50 {
        last = ssh(key, port, command);
        if last.0 != 255 || last.1.contains("Permission denied") {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    last
}

async fn an_instance_is_reachable_by_its_owners_key_only_and_survives_agent_restarts(
    engine: Engine,
) {
    let node = node(engine).await;
    let mut agent = node.agent();
    node.ready().await;
    let owner = node.server.signup("owner").await;
    let (key, public) = key_pair(&node.dir, "owner-key");
    let (stranger_key, _) = key_pair(&node.dir, "stranger-key");
    node.server
        .post(
            "/api/v1/me/ssh-keys",
            &owner.token,
            json!({ "name": "laptop", "public_key": public }),
        )
        .await
        .expect(StatusCode::CREATED);
    let instance = node
        .server
        .order(
            &owner,
            json!({ "instance_type": "h100x2", "ports": [8888] }),
        )
        .await;
    let running = node
        .until(&owner, instance, "running with access", |o| {
            o["status"] == "running" && o["access"]["hosts"][0]["ssh"].is_object()
        })
        .await;
    let host = &running["access"]["hosts"][0];
    let port = u16::try_from(host["ssh"]["port"].as_u64().expect("port")).expect("port");
    assert_eq!(
        host["ssh"]["command"],
        format!("ssh -p {port} gantry@127.0.0.1")
    );
    assert_eq!(running["access"]["runtime"], "sandbox");
    let exposed = &host["ports"][0];
    assert_eq!(exposed["port"], 8888);
    let node_port = exposed["node_port"].as_u64().expect("node port");
    assert!((u64::from(node.ports.0)..=u64::from(node.ports.1)).contains(&node_port));

    let gpus: Vec<String> = gpus_of(&running).iter().map(u64::to_string).collect();
    let (code, out) = ssh_when_up(
        &key,
        port,
        "echo gpus=$CUDA_VISIBLE_DEVICES port=$GANTRY_PORT_8888; id -u",
    )
    .await;
    assert_eq!(code, 0, "{out}\nagent: {}", node.agent_log());
    assert!(
        out.contains(&format!("gpus={} port={node_port}", gpus.join(","))),
        "{out}"
    );
    // The server's host key is the one `access` names.
    let scanned = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ssh-keyscan -t ed25519 -p {port} 127.0.0.1 2>/dev/null | ssh-keygen -lf -"
        ))
        .output()
        .expect("ssh-keyscan");
    let scanned = String::from_utf8_lossy(&scanned.stdout).to_string();
    let fingerprint = host["ssh"]["host_key_fingerprint"]
        .as_str()
        .expect("fingerprint");
    assert!(scanned.contains(fingerprint), "{scanned} vs {fingerprint}");

    let (code, out) = ssh(&stranger_key, port, "echo in");
    assert_eq!(code, 255, "another key is refused: {out}");
    assert!(out.contains("Permission denied"), "{out}");

    // The agent dies and comes back: the instance kept running, reachable.
    drop(agent);
    agent = node.agent();
    let (code, out) = ssh_when_up(&key, port, "echo still-here").await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("still-here"));
    assert_eq!(node.order(&owner, instance).await["status"], "running");

    // Secrets on the node are the agent's user's alone.
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).expect("exists").permissions().mode() & 0o777;
    assert_eq!(mode(&node.state().join("credential.json")), 0o600);
    assert_eq!(mode(&node.state()), 0o700);

    // Deleting the key takes it off the running instance.
    let keys = node.server.get("/api/v1/me/ssh-keys", &owner.token).await;
    let key_id = keys.body[0]["id"].as_str().expect("key id").to_owned();
    node.server
        .delete(&format!("/api/v1/me/ssh-keys/{key_id}"), &owner.token)
        .await
        .expect(StatusCode::NO_CONTENT);
    let mut refused = false;
    // The agent's next rounds take the key off; on a loaded machine that
    // may take a while.
    for _ in 0..200 {
        if ssh(&key, port, "true").0 == 255 {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(refused, "a deleted key stops working");

    node.server.cancel(&owner, instance).await;
    node.until(&owner, instance, "stopped", |o| o["ended_at"].is_string())
        .await;
    drop(agent);
}

#[test]
fn without_bubblewrap_the_agent_stops_and_names_the_package() {
    let dir = std::env::temp_dir().join(format!("gantry-no-bwrap-{}", Uuid::now_v7().simple()));
    let out = Command::new(env!("CARGO_BIN_EXE_gantry-agent"))
        .env("PATH", "/nonexistent")
        .args(["--server", "http://127.0.0.1:9", "--name", "gpu-box-1"])
        .args(["--simulate-gpus", "1xH100-SXM-80GB", "--runtime", "sandbox"])
        .arg("--state-dir")
        .arg(&dir)
        .output()
        .expect("run the agent");
    std::fs::remove_dir_all(&dir).ok();
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("`bubblewrap`"), "{said}");
}

/// A MIG instance as a workload sees it: `CUDA_VISIBLE_DEVICES` and the
/// capability nodes it can open, inside and on the node.
fn mig_probe(state: &Path) -> String {
    let state = state.display();
    format!(
        r#"echo "visible=$CUDA_VISIBLE_DEVICES"
echo "caps=$(ls /dev/nvidia-caps 2>/dev/null | sort | tr '\n' ' ')"
for f in {state}/dev/nvidia-caps/*; do (: < $f) 2>/dev/null && echo "host-cap=open"; done
echo "probed"; sleep 60"#
    )
}

async fn two_tenants_on_one_mig_gpu_each_reach_only_their_own_instance(engine: Engine) {
    let node = node(engine).await;
    let (server, op) = (&node.server, node.operator.as_str());
    let model = server.get("/api/v1/catalog/gpu-models", op).await;
    let model_id = model.items()[0]["id"]
        .as_str()
        .expect("model id")
        .to_owned();
    server
        .patch(
            &format!("/api/v1/admin/catalog/gpu-models/{model_id}"),
            op,
            json!({ "mig_capable": true }),
        )
        .await
        .expect(StatusCode::OK);
    let slice = server
        .post(
            "/api/v1/admin/catalog/instance-types",
            op,
            json!({ "name": "h100-3g", "gpu_model": "H100-SXM-80GB", "gpus_per_node": 1,
                    "vcpus": 1, "memory_gib": 1, "mig_profile": "3g.40gb" }),
        )
        .await;
    slice.expect(StatusCode::CREATED);
    server
        .post(
            &format!(
                "/api/v1/admin/catalog/instance-types/{}/prices",
                slice.id("/id")
            ),
            op,
            json!({ "pricing_class": "on_demand", "hourly_micros": 1_070_000 }),
        )
        .await
        .expect(StatusCode::CREATED);
    // One GPU in MIG mode, split into two 3g.40gb instances.
    let _agent = node.agent_simulating("sandbox", "1xH100-SXM-80GB:mig=3g.40gb*2");
    node.ready().await;
    let (a, b) = (server.signup("mig-a").await, server.signup("mig-b").await);
    let job = json!({ "instance_type": "h100-3g", "job": { "command": mig_probe(&node.state()) } });
    let first = server.order(&a, job.clone()).await;
    let second = server.order(&b, job).await;
    let mut seen = Vec::new();
    for (tenant, order) in [(&a, first), (&b, second)] {
        node.until(tenant, order, "probed", |o| o["status"] == "running")
            .await;
        for _ in 0..200 {
            if node
                .output(tenant, order)
                .await
                .iter()
                .any(|l| l == "probed")
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let view = node.order(tenant, order).await;
        let lines = node.output(tenant, order).await;
        let line = |key: &str| {
            lines
                .iter()
                .find_map(|l| l.strip_prefix(&format!("{key}=")))
                .unwrap_or_else(|| panic!("no {key} in {lines:?}"))
                .to_owned()
        };
        assert_eq!(gpus_of(&view), vec![0], "both run on the one GPU");
        let device = view["placement"][0]["mig_device"]
            .as_str()
            .expect("a MIG device");
        assert!(device.starts_with("MIG-"));
        assert_eq!(line("visible"), device, "CUDA sees its instance by UUID");
        assert!(
            !lines.iter().any(|l| l == "host-cap=open"),
            "the node's capability nodes are out of reach"
        );
        seen.push((device.to_owned(), line("caps")));
    }
    let [(device_a, caps_a), (device_b, caps_b)] = [seen[0].clone(), seen[1].clone()];
    assert_ne!(
        device_a, device_b,
        "each tenant holds an instance of its own"
    );
    let (caps_a, caps_b): (Vec<&str>, Vec<&str>) = (
        caps_a.split_whitespace().collect(),
        caps_b.split_whitespace().collect(),
    );
    assert_eq!(
        caps_a.len(),
        2,
        "a GPU instance and a compute instance: {caps_a:?}"
    );
    assert_eq!(caps_b.len(), 2);
    assert!(
        caps_a.iter().all(|c| !caps_b.contains(c)),
        "neither sees the other's instance: {caps_a:?} {caps_b:?}"
    );
    // Both instances are held: a third order waits for one.
    let third = server
        .order(
            &a,
            json!({ "instance_type": "h100-3g", "job": { "command": "true" } }),
        )
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(node.order(&a, third).await["status"], "queued");
    for (tenant, order) in [(&a, first), (&b, second)] {
        server
            .post(
                &format!("/api/v1/orgs/{}/orders/{order}/cancel", tenant.org_id),
                &tenant.token,
                json!({}),
            )
            .await
            .expect(StatusCode::OK);
    }
    node.until(&a, third, "completed", |o| o["status"] == "completed")
        .await;
}
