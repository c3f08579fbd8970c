//! Tenants on one node, as an attacker would test them: the real agent
//! binary with the `sandbox` runtime (bubblewrap in a user namespace) and
//! the `oci` runtime (podman with runc) runs real processes for two
//! tenants, each root in its own image, and each assertion is on what a
//! workload actually saw or did, not on a command line.

use crate::node;
use crate::support;
use gantry_test_support::on_both_engines;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use node::{AGENT_CANARY, Node, gpus_of, ssh, ssh_when_up, verdict};
use reqwest::StatusCode;
use serde_json::json;
use support::{Engine, Tenant};
use uuid::Uuid;

on_both_engines!(
    a_tenants_root_reaches_nothing_of_the_node_or_of_other_tenants_in_a_sandbox,
    a_tenants_root_reaches_nothing_of_the_node_or_of_other_tenants_in_a_container,
    the_same_attack_succeeds_on_an_unisolated_node,
    memory_and_process_limits_hold_and_the_node_stays_healthy,
    an_instance_is_reachable_by_its_owners_key_only_and_survives_agent_restarts,
    two_tenants_on_one_mig_gpu_each_reach_only_their_own_instance,
);

/// What tenant A's job saw while tenant B's job ran beside it.
struct Attack {
    a: Tenant,
    b: Tenant,
    victim: Uuid,
    victim_view: serde_json::Value,
    seen: Vec<String>,
    /// A file A's job wrote as root at `/etc`: on the node it must not be.
    planted: String,
}

impl Attack {
    fn verdict(&self, key: &str) -> String {
        verdict(&self.seen, key)
    }
}

/// Tenant B keeps a job running with a secret variable, its output and its
/// files; tenant A's job, root in its own image, then tries every way there
/// is from inside its workload, each probe printing one verdict line.
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
                    "secret_env": { "HF_TOKEN": "hf_secret_of_b" }
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
    let planted = format!("gantry-probe-{}", Uuid::now_v7().simple());
    let probe = format!(
        r#"echo "uid=$(id -u)"
echo "mapped-to=$(awk '{{print $2}}' /proc/self/uid_map)"
echo "visible=$CUDA_VISIBLE_DEVICES"
cat {state}/credential.json >/dev/null 2>&1 && echo "credential=read" || echo "credential=refused"
ls {state} >/dev/null 2>&1 && echo "state=listed" || echo "state=refused"
cat {state}/output/{victim}.stdout >/dev/null 2>&1 && echo "b-output=read" || echo "b-output=refused"
cat /scratch/secret >/dev/null 2>&1 && echo "b-files=read" || echo "b-files=refused"
echo "processes=$(for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline; echo; done | grep -c 'slee[p] 6[1]')"
echo "b-visible=$(cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | grep -c hf_secret_of_b)"
echo "agent-visible=$(cat /proc/{agent}/environ /proc/{agent}/cmdline 2>/dev/null | tr '\0' '\n' | grep -c -e gj_ -e {AGENT_CANARY})"
for i in 0 1 2 3; do (: < /dev/nvidia$i) 2>/dev/null && echo "gpu$i=open" || echo "gpu$i=refused"; done
for f in {state}/dev/nvidia0 {state}/dev/nvidia1 {state}/dev/nvidia2 {state}/dev/nvidia3; do (: < $f) 2>/dev/null && echo "host-device=open"; done
echo "devices=$(ls /dev | tr '\n' ' ')"
echo x > /etc/{planted} && echo "own-root=written" || echo "own-root=read-only"
echo 1 > /proc/sys/vm/drop_caches 2>/dev/null && echo "kernel=written" || echo "kernel=read-only"
echo x > /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null && echo "sys=written" || echo "sys=read-only"
echo 1 > /sys/fs/cgroup/pids/pids.max 2>/dev/null && echo "cgroup=written" || echo "cgroup=read-only"
echo "b-cgroup=$(ls -R /sys/fs/cgroup 2>/dev/null | grep -c {victim})"
mknod /tmp/disk b 254 0 2>/dev/null && echo "mknod=made" || echo "mknod=refused"
mkdir -p /tmp/m; mount -t ext4 /dev/vda /tmp/m 2>/dev/null && echo "mount=mounted" || echo "mount=refused"
mount -t tmpfs none /tmp/m 2>/dev/null && echo "tmpfs=mounted" || echo "tmpfs=refused"
unshare -U true 2>/dev/null && echo "userns=made" || echo "userns=refused"
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
        planted,
    }
}

async fn a_tenants_root_reaches_nothing_of_the_node_or_of_other_tenants_in_a_sandbox(
    engine: Engine,
) {
    root_reaches_nothing(engine, "sandbox").await;
}

async fn a_tenants_root_reaches_nothing_of_the_node_or_of_other_tenants_in_a_container(
    engine: Engine,
) {
    root_reaches_nothing(engine, "oci").await;
}

async fn root_reaches_nothing(engine: Engine, runtime: &str) {
    let node = Node::new(engine).await;
    let agent = node.agent(runtime);
    node.ready().await;
    let attack = attack(&node, agent.0.id()).await;
    let verdict = |key: &str| attack.verdict(key);
    let (a, b, victim, seen) = (&attack.a, &attack.b, attack.victim, &attack.seen);
    // Root inside, an unprivileged range of the node's ids outside.
    assert_eq!(verdict("uid"), "0");
    let mapped: u32 = verdict("mapped-to").parse().expect("mapped id");
    assert!(
        (node.uids.0..=node.uids.1).contains(&mapped),
        "root inside is {mapped} on the node, in the node's range"
    );
    assert_eq!(verdict("credential"), "refused");
    assert_eq!(verdict("state"), "refused");
    assert_eq!(verdict("b-output"), "refused");
    assert_eq!(verdict("b-files"), "refused", "B's /scratch is B's");
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
    // Its own root is its to write; the node's files, kernel knobs and
    // cgroups are not.
    assert_eq!(verdict("own-root"), "written");
    assert!(!Path::new("/etc").join(&attack.planted).exists());
    assert_eq!(verdict("kernel"), "read-only");
    assert_eq!(verdict("sys"), "read-only");
    assert_eq!(verdict("cgroup"), "read-only");
    assert_eq!(verdict("b-cgroup"), "0", "B's cgroups are hidden");
    assert_eq!(verdict("mknod"), "refused");
    assert_eq!(
        verdict("mount"),
        "refused",
        "the node's disk cannot be mounted"
    );
    assert_eq!(verdict("tmpfs"), "refused");
    assert_eq!(verdict("userns"), "refused", "no nested user namespace");
    // A network of its own: B's loopback and the node's are out of reach.
    assert_eq!(verdict("b-port"), "refused");
    assert_eq!(verdict("control-plane"), "refused");
    assert!(!seen.iter().any(|l| l == "host-device=open"), "{seen:?}");
    // B holds two of the node's four GPUs, so A got the other two, and
    // /dev holds them and the basic nodes only.
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
    let devices = verdict("devices");
    for name in devices.split_whitespace() {
        let basic = [
            "null",
            "zero",
            "full",
            "random",
            "urandom",
            "tty",
            "pts",
            "ptmx",
            "shm",
            "fd",
            "stdin",
            "stdout",
            "stderr",
            "core",
            "mqueue",
            "console",
            "nvidiactl",
            "nvidia-uvm",
        ]
        .contains(&name);
        let own_gpu = mine.iter().any(|i| name == format!("nvidia{i}"));
        assert!(basic || own_gpu, "/dev/{name} is not A's: {devices}");
    }
    // The environment is the order's, the image's and Gantry's, nothing of
    // the agent's.
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
                    "_",
                    // podman's own
                    "container",
                    "HOSTNAME",
                    "TERM",
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

    // Root inside kills every process it can see: its own, and no one
    // else's.
    let killer = node
        .server
        .order(
            a,
            json!({ "instance_type": "h100x2", "job": { "command": "kill -9 -1; sleep 5" } }),
        )
        .await;
    node.until(a, killer, "ended", |o| o["ended_at"].is_string())
        .await;
    assert_eq!(node.order(b, victim).await["status"], "running");
    assert!(
        Path::new(&format!("/proc/{}", agent.0.id())).exists(),
        "the agent lives on"
    );
    let nodes = node.server.get("/api/v1/admin/nodes", &node.operator).await;
    assert_eq!(nodes.items()[0]["state"], "ready");

    // Once B's job ends, its root, disk and cgroups are gone from the node.
    node.server.cancel(b, victim).await;
    node.until(b, victim, "cancelled and stopped", |o| {
        o["status"] == "cancelled" && o["ended_at"].is_string()
    })
    .await;
    // It had its grace period: SIGTERM reached it, not just its runtime.
    assert!(
        node.output(b, victim)
            .await
            .contains(&"stopped-gracefully".to_owned()),
        "{:?}",
        node.output(b, victim).await
    );
    let root = node.state().join("roots").join(victim.to_string());
    for _ in 0..100 {
        if !root.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!root.exists(), "B's root outlived its job");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    assert!(
        !mounts.contains(&victim.to_string()),
        "nothing of B's stays mounted"
    );
    drop(agent);
}

/// The control for the tests above: on a `process` node the same probes
/// find the credential, B's output and the agent's environment, so their
/// failing in a sandbox is the sandbox's doing.
async fn the_same_attack_succeeds_on_an_unisolated_node(engine: Engine) {
    let node = Node::new(engine).await;
    let agent = node.agent("process");
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
    assert_eq!(attack.verdict("tmpfs"), "mounted");
    Command::new("umount").arg("/tmp/m").status().ok();
    std::fs::remove_file(Path::new("/etc").join(&attack.planted)).ok();
    node.server.cancel(&attack.b, attack.victim).await;
    node.until(&attack.b, attack.victim, "stopped", |o| {
        o["ended_at"].is_string()
    })
    .await;
}

/// The cgroup files of a workload, on a v1 or a v2 hierarchy: its group
/// is named by its order and the agent that runs it.
fn cgroup_file(controller: &str, order: Uuid, file: &str) -> std::path::PathBuf {
    let parent = if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        std::path::PathBuf::from("/sys/fs/cgroup/gantry")
    } else {
        std::path::PathBuf::from(format!("/sys/fs/cgroup/{controller}/gantry"))
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
    let node = Node::new(engine).await;
    let _agent = node.agent("sandbox");
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
}

async fn an_instance_is_reachable_by_its_owners_key_only_and_survives_agent_restarts(
    engine: Engine,
) {
    let node = Node::new(engine).await;
    let mut agent = node.agent("sandbox");
    node.ready().await;
    let (owner, key) = node.tenant_with_key("owner").await;
    let (stranger_key, _) = node::key_pair(&node.dir, "stranger-key");
    let (instance, port) = node
        .instance(
            &owner,
            json!({ "instance_type": "h100x2", "ports": [8888] }),
        )
        .await;
    let running = node.order(&owner, instance).await;
    let host = &running["access"]["hosts"][0];
    assert_eq!(
        host["ssh"]["command"],
        format!("ssh -p {port} root@127.0.0.1")
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
    let scanned = Node::host_key_on(port);
    let fingerprint = host["ssh"]["host_key_fingerprint"]
        .as_str()
        .expect("fingerprint");
    assert!(scanned.contains(fingerprint), "{scanned} vs {fingerprint}");

    let (code, out) = ssh(&stranger_key, port, "echo in");
    assert_eq!(code, 255, "another key is refused: {out}");
    assert!(out.contains("Permission denied"), "{out}");
    let (code, out) = node::ssh_as(&key, port, "gantry", "echo in");
    assert_eq!(code, 255, "only root logs in: {out}");

    // The agent dies and comes back: the instance kept running, reachable.
    drop(agent);
    agent = node.agent("sandbox");
    let (code, out) = ssh_when_up(&key, port, "echo still-here").await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("still-here"));
    assert_eq!(node.order(&owner, instance).await["status"], "running");

    // Secrets on the node are the agent's user's alone: others may pass
    // through its state directory (to their own roots) but list nothing.
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).expect("exists").permissions().mode() & 0o777;
    assert_eq!(mode(&node.state().join("credential.json")), 0o600);
    assert_eq!(mode(&node.state()), 0o711);
    assert_eq!(mode(&node.state().join("output")), 0o700);
    assert_eq!(
        mode(&node.state().join("roots").join(instance.to_string())),
        0o700
    );

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
    let node = Node::new(engine).await;
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
        let lines = node.printed(tenant, order, "probed").await;
        let view = node.order(tenant, order).await;
        assert_eq!(gpus_of(&view), vec![0], "both run on the one GPU");
        let device = view["placement"][0]["mig_device"]
            .as_str()
            .expect("a MIG device");
        assert!(device.starts_with("MIG-"));
        assert_eq!(
            verdict(&lines, "visible"),
            device,
            "CUDA sees its instance by UUID"
        );
        assert!(
            !lines.iter().any(|l| l == "host-cap=open"),
            "the node's capability nodes are out of reach"
        );
        seen.push((device.to_owned(), verdict(&lines, "caps")));
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
