//! Shared volumes on a real GlusterFS volume (`scripts/test-glusterfs.sh`)
//! mounted where two real agents, standing for two nodes of one region,
//! find it: a checkpoint written by a job on one node and read, owned by
//! root, by a job on the other; files past the size measured and new
//! attachments refused until it grows; another organization's workloads
//! and ids that cannot reach it; and a delete that leaves none of its
//! bytes in the brick's file that held them.

use crate::lab;
use crate::node;
use crate::support;
use crate::volumes::{deleted, finished_job, volume, volume_until};

use std::io::Read;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use node::Node;
use reqwest::StatusCode;
use serde_json::{Value, json};
use support::{Engine, Tenant};
use uuid::Uuid;

mod postgres {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_checkpoint_on_a_shared_volume_is_read_on_another_node_and_walled_off() {
        if crate::support::postgres_skipped() {
            return;
        }
        super::a_checkpoint_is_read_on_another_node(super::Engine::Postgres).await;
    }
}

const SECRET: &str = "shared-checkpoint-of-tenant-a";

/// The test GlusterFS volume's mount point, made once per machine.
fn glusterfs() -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/test-glusterfs.sh");
    let out = Command::new(&script)
        .stderr(std::process::Stdio::inherit())
        .output()
        .expect("run the GlusterFS fixture script");
    assert!(out.status.success(), "the GlusterFS fixture script failed");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// Runs a job attaching `volumes` to its end: its output, and the node it
/// ran on.
async fn job_on(
    node: &Node,
    tenant: &Tenant,
    command: &str,
    volumes: Value,
) -> (Vec<String>, String) {
    let order = finished_job(node, tenant, command, volumes).await;
    let attempts = node
        .server
        .get(
            &format!("/api/v1/orgs/{}/orders/{order}/attempts", tenant.org_id),
            &tenant.token,
        )
        .await;
    let ran_on = attempts.body[0]["nodes"][0]["node_name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    (node.output(tenant, order).await, ran_on)
}

async fn node_id(node: &Node, name: &str) -> String {
    let nodes = node.server.get("/api/v1/admin/nodes", &node.operator).await;
    nodes
        .items()
        .iter()
        .find(|n| n["name"] == name)
        .and_then(|n| n["id"].as_str())
        .expect("the node")
        .to_owned()
}

async fn a_checkpoint_is_read_on_another_node(engine: Engine) {
    let node = Node::new(engine).await;
    // This test's own corner of the GlusterFS volume, mounted where the
    // region's nodes have their shared file system.
    let gluster = glusterfs();
    let corner = format!("test-{}", Uuid::now_v7().simple());
    std::fs::create_dir_all(gluster.join(&corner)).expect("the test's directory");
    let shared = node.dir.join("shared");
    std::fs::create_dir_all(&shared).expect("mount point");
    let bound = Command::new("mount")
        .arg("--bind")
        .arg(gluster.join(&corner))
        .arg(&shared)
        .status()
        .expect("mount");
    assert!(bound.success());
    // Ids of organizations' ranges apart from every test's agents.
    let first_id = 3_000_000_000u32 + (std::process::id() % 1000) * 16 * 65_536;
    let declared = node
        .server
        .put(
            "/api/v1/admin/shared-file-systems",
            &node.operator,
            json!({ "region": "lab", "kind": "glusterfs",
                    "mount_path": shared.display().to_string(), "first_id": first_id }),
        )
        .await;
    declared.expect(StatusCode::OK);
    assert_eq!(
        declared.body["ranges_left"],
        (4_294_967_296 - i64::from(first_id)) / 65_536
    );

    let agent = |name: &str, part: u32| {
        let mut command = lab::agent_command(
            &node.server,
            &node.token,
            name,
            &node.dir.join(format!("state-{name}")),
            "sandbox",
        );
        command.args(["--shared-measure-seconds", "1"]);
        node.spawn_share(command, part, 2)
    };
    let _first = agent("gpu-box-1", 0);
    let _second = agent("gpu-box-2", 1);
    assert!(
        lab::nodes_ready(&node.server, &node.operator, 2).await,
        "{}",
        node.agent_log()
    );

    let alice = node.server.signup("alice").await;
    let created = node
        .server
        .post(
            &format!("/api/v1/orgs/{}/volumes", alice.org_id),
            &alice.token,
            json!({ "name": "team-data", "region": "lab", "kind": "shared", "size_gib": 1 }),
        )
        .await;
    created.expect(StatusCode::CREATED);
    assert_eq!(created.body["kind"], "shared");
    assert!(created.body["node"].is_null(), "{}", created.body);
    let id = created.id("/id");
    volume_until(&node, &alice, id, "available", |v| {
        v["status"] == "available"
    })
    .await;
    let dir = shared.join("gantry-volumes").join(id.to_string());
    let mut listed = Value::Null;
    for _ in 0..200 {
        listed = node
            .server
            .get("/api/v1/admin/shared-file-systems", &node.operator)
            .await
            .body;
        if listed[0]["free_bytes"].as_i64().is_some_and(|b| b > 0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        listed[0]["free_bytes"].as_i64().is_some_and(|b| b > 0),
        "the file system's free space, as the nodes see it: {listed}"
    );
    let meta = std::fs::metadata(&dir).expect("the volume's directory");
    assert_eq!(meta.uid(), first_id, "its organization's root owns it");
    assert_eq!(meta.permissions().mode() & 0o777, 0o700);
    let attach = json!([{ "volume_id": id, "mount_path": "/data" }]);

    // Written on one node, read on the other, owned by root on both.
    let first_name = "gpu-box-1";
    let (wrote, wrote_on) = job_on(
        &node,
        &alice,
        &format!("echo {SECRET} > /data/ckpt && sync && echo wrote-as=$(id -u)"),
        attach.clone(),
    )
    .await;
    assert!(
        wrote.contains(&"wrote-as=0".to_owned()),
        "{wrote:?}\n{}",
        node.agent_log()
    );
    let other = if wrote_on == first_name {
        "gpu-box-2"
    } else {
        first_name
    };
    node.server
        .post(
            &format!(
                "/api/v1/admin/nodes/{}/cordon",
                node_id(&node, &wrote_on).await
            ),
            &node.operator,
            json!({}),
        )
        .await
        .expect(StatusCode::OK);
    let (read, read_on) = job_on(
        &node,
        &alice,
        "cat /data/ckpt; echo owner=$(stat -c %u /data/ckpt); touch /data/more && echo writable",
        attach.clone(),
    )
    .await;
    assert_eq!(read_on, other, "the second job ran on the other node");
    assert!(read.contains(&SECRET.to_owned()), "{read:?}");
    assert!(read.contains(&"owner=0".to_owned()), "{read:?}");
    assert!(read.contains(&"writable".to_owned()), "{read:?}");
    let stored = std::fs::metadata(dir.join("ckpt")).expect("the checkpoint");
    assert_eq!(
        stored.uid(),
        first_id,
        "stored under the organization's root"
    );

    // Past its size: the file system has no quota, so the write goes
    // through; the measure tells the tenant, and new attachments wait for
    // a grow.
    let (filled, _) = job_on(
        &node,
        &alice,
        "dd if=/dev/zero of=/data/big bs=1M count=1100 2>/dev/null && echo filled",
        attach.clone(),
    )
    .await;
    assert!(filled.contains(&"filled".to_owned()), "{filled:?}");
    let over = volume_until(&node, &alice, id, "over its size", |v| {
        v["status_reason"]
            .as_str()
            .is_some_and(|r| r.contains("more than its 1 GiB"))
    })
    .await;
    assert!(
        over["used_bytes"].as_i64().is_some_and(|b| b > 1 << 30),
        "{over}"
    );
    let orders = format!("/api/v1/orgs/{}/orders", alice.org_id);
    node.server
        .post(
            &orders,
            &alice.token,
            json!({ "instance_type": "h100x2", "job": { "command": "true" }, "volumes": attach }),
        )
        .await
        .expect_problem(StatusCode::CONFLICT, "volume_over_size");
    node.server
        .patch(
            &format!("/api/v1/orgs/{}/volumes/{id}", alice.org_id),
            &alice.token,
            json!({ "size_gib": 2 }),
        )
        .await
        .expect(StatusCode::OK);
    volume_until(&node, &alice, id, "within its size again", |v| {
        v["size_gib"] == 2 && v["status_reason"].is_null()
    })
    .await;
    let (removed, _) = job_on(
        &node,
        &alice,
        "rm /data/big && echo removed",
        attach.clone(),
    )
    .await;
    assert!(removed.contains(&"removed".to_owned()), "{removed:?}");

    // Another organization: its API calls find nothing, its order cannot
    // name the volume, its workload (with a shared volume of its own, so
    // under its own range) finds no trace of Alice's, and a process under
    // its ids on the node cannot enter her directory.
    let mallory = node.server.signup("mallory").await;
    node.server
        .get(
            &format!("/api/v1/orgs/{}/volumes/{id}", mallory.org_id),
            &mallory.token,
        )
        .await
        .expect_problem(StatusCode::NOT_FOUND, "volume_not_found");
    node.server
        .post(
            &format!("/api/v1/orgs/{}/orders", mallory.org_id),
            &mallory.token,
            json!({ "instance_type": "h100x2", "job": { "command": "true" }, "volumes": attach }),
        )
        .await
        .expect_problem(StatusCode::NOT_FOUND, "volume_not_found");
    let own = node
        .server
        .post(
            &format!("/api/v1/orgs/{}/volumes", mallory.org_id),
            &mallory.token,
            json!({ "name": "loot", "region": "lab", "kind": "shared", "size_gib": 1 }),
        )
        .await;
    own.expect(StatusCode::CREATED);
    let own_id = own.id("/id");
    volume_until(&node, &mallory, own_id, "available", |v| {
        v["status"] == "available"
    })
    .await;
    let (probe, _) = job_on(
        &node,
        &mallory,
        &format!(
            "ls /loot/.. /loot/../.. 2>&1; cat {dir}/ckpt 2>&1; ls {shared} 2>&1; \
             grep -c {id} /proc/self/mountinfo; \
             grep -rs {SECRET} / --exclude-dir=proc --exclude-dir=sys 2>/dev/null | head -n 1; \
             echo probed-as=$(id -u)",
            dir = dir.display(),
            shared = shared.display(),
        ),
        json!([{ "volume_id": own_id, "mount_path": "/loot" }]),
    )
    .await;
    assert!(
        probe.contains(&"probed-as=0".to_owned()),
        "{probe:?}\n{}",
        node.agent_log()
    );
    assert!(!probe.iter().any(|l| l.contains(SECRET)), "{probe:?}");
    assert!(probe.contains(&"0".to_owned()), "{probe:?}");
    let mallory_root = std::fs::metadata(shared.join("gantry-volumes").join(own_id.to_string()))
        .expect("Mallory's directory")
        .uid();
    assert_ne!(mallory_root, first_id, "each organization has its own ids");
    let intruder = Command::new("setpriv")
        .args([
            &format!("--reuid={mallory_root}"),
            &format!("--regid={mallory_root}"),
            "--clear-groups",
            "sh",
            "-c",
        ])
        .arg(format!(
            "ls {dir} 2>&1; cat {dir}/ckpt 2>&1; touch {dir}/planted 2>&1; echo done",
            dir = dir.display()
        ))
        .output()
        .expect("setpriv");
    let said = String::from_utf8_lossy(&intruder.stdout);
    assert!(said.contains("Permission denied"), "{said}");
    assert!(!said.contains(SECRET), "{said}");
    assert!(!dir.join("planted").exists());

    // Deleted: its directory is gone from the file system, and the brick's
    // file that held the checkpoint (read through a descriptor held from
    // before, as a later owner of its blocks would) keeps none of it.
    let brick = gluster
        .parent()
        .expect("the fixture's directory")
        .join("brick")
        .join(&corner)
        .join("gantry-volumes")
        .join(id.to_string())
        .join("ckpt");
    let mut held = std::fs::File::open(&brick).expect("the checkpoint on the brick");
    let gone = deleted(&node, &alice, id).await;
    assert!(
        gone,
        "{}\n{}",
        volume(&node, &alice, id).await,
        node.agent_log()
    );
    assert!(!dir.exists(), "the volume's directory is gone");
    let mut bytes = Vec::new();
    held.read_to_end(&mut bytes).expect("read the erased file");
    assert!(
        !bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()),
        "the checkpoint survived the delete"
    );
    std::fs::remove_dir_all(gluster.join(&corner)).ok();
}
