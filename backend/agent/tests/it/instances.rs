//! Instances as a new user meets them, on both runtimes: root in the image
//! they chose, `apt-get` and `pip` working, a disk of the size the instance
//! type sells (ENOSPC past it, the node untouched), `nproc` and
//! `/proc/meminfo` that say the type's size, files that survive an agent
//! killed and restarted, and nothing left once it is cancelled. Then the
//! images tenants bring: private registries with their organization's
//! credentials only, and malicious images that end in a clear reason while
//! the node stays healthy.

use crate::node;
use crate::support;

use std::time::Duration;

use node::{Node, free_bytes, registries, ssh, ssh_when_up, verdict};
use reqwest::StatusCode;
use serde_json::json;
use std::os::unix::fs::MetadataExt;
use support::{Engine, Tenant};
use uuid::Uuid;

mod sqlite {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_new_user_gets_root_in_their_image_on_the_disk_they_paid_for_in_a_sandbox() {
        super::a_new_user_gets_root_in_their_image(super::Engine::Sqlite, "sandbox").await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn private_images_are_pulled_with_their_organizations_credentials_only() {
        super::private_images_are_pulled_with_their_organizations_credentials_only(
            super::Engine::Sqlite,
        )
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn malicious_images_end_in_clear_reasons_and_leave_a_sandbox_node_healthy() {
        super::malicious_images_end_in_clear_reasons(super::Engine::Sqlite, "sandbox").await;
    }
}

mod postgres {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_new_user_gets_root_in_their_image_on_the_disk_they_paid_for_in_a_container() {
        if crate::support::postgres_skipped() {
            return;
        }
        super::a_new_user_gets_root_in_their_image(super::Engine::Postgres, "oci").await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn private_images_are_pulled_with_their_organizations_credentials_only() {
        if crate::support::postgres_skipped() {
            return;
        }
        super::private_images_are_pulled_with_their_organizations_credentials_only(
            super::Engine::Postgres,
        )
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn malicious_images_end_in_clear_reasons_and_leave_a_container_node_healthy() {
        if crate::support::postgres_skipped() {
            return;
        }
        super::malicious_images_end_in_clear_reasons(super::Engine::Postgres, "oci").await;
    }
}

const GIB: u64 = 1 << 30;

/// An instance type with one vCPU, 1 GiB of memory and a 2 GiB disk.
async fn small_instance_type(node: &Node) {
    node.instance_type(
        "h100x1",
        json!({ "vcpus": 1, "memory_gib": 1, "disk_gib": 2 }),
    )
    .await;
}

/// That the node's disk holds `bytes` for `file` (and a block or so of
/// its own bookkeeping), no more and no less.
fn assert_allocated(file: &std::path::Path, bytes: u64) {
    let held = std::fs::metadata(file).expect("the file").blocks() * 512;
    assert!(
        (bytes..=bytes + (1 << 20)).contains(&held),
        "{} holds {held} bytes of the node's disk, not {bytes}",
        file.display()
    );
}

/// Runs `command` on the instance and answers its output, which must end
/// well.
fn run(key: &std::path::Path, port: u16, command: &str) -> String {
    let (code, out) = ssh(key, port, command);
    assert_eq!(code, 0, "`{command}` failed: {out}");
    out
}

async fn a_new_user_gets_root_in_their_image(engine: Engine, runtime: &str) {
    let node = Node::new(engine).await;
    small_instance_type(&node).await;
    let mut agent = node.agent(runtime);
    node.ready().await;
    let (tenant, key) = node.tenant_with_key("newcomer").await;
    let image = registries().image("base");
    let (instance, port) = node
        .instance(
            &tenant,
            json!({ "instance_type": "h100x1", "image": image }),
        )
        .await;
    let view = node.order(&tenant, instance).await;
    assert_eq!(view["image"], image.as_str());
    assert_eq!(view["access"]["hosts"][0]["ssh"]["user"], "root");
    let (code, out) = ssh_when_up(&key, port, "id -u").await;
    assert_eq!((code, out.trim()), (0, "0"), "root inside: {out}");

    // The machine the type describes.
    let size = run(
        &key,
        port,
        "echo nproc=$(nproc); echo cpus=$(python3 -c 'import os; print(os.cpu_count())'); \
         echo memory=$(awk '/MemTotal/ {print $2}' /proc/meminfo); \
         echo disk=$(df -B1 --output=size / | tail -1); df -h /",
    );
    let lines: Vec<String> = size.lines().map(str::to_owned).collect();
    assert_eq!(verdict(&lines, "nproc"), "1", "{size}");
    assert_eq!(verdict(&lines, "cpus"), "1", "{size}");
    assert_eq!(verdict(&lines, "memory"), "1048576", "1 GiB in kB: {size}");
    let disk: u64 = verdict(&lines, "disk").trim().parse().expect("df's size");
    assert!(
        disk > 2 * GIB * 95 / 100 && disk <= 2 * GIB,
        "the 2 GiB disk, less ext4's own: {size}"
    );

    // Packages as root, and a venv with pip, from the Internet.
    let out = run(
        &key,
        port,
        "apt-get update -qq >/dev/null && apt-get install -y -qq jq >/dev/null && jq --version",
    );
    assert!(out.contains("jq-"), "{out}");
    let out = run(
        &key,
        port,
        "python3 -m venv /root/venv && /root/venv/bin/pip install -q six && \
         /root/venv/bin/python -c 'import six; print(\"six\", six.__version__)'",
    );
    assert!(out.contains("six 1."), "{out}");

    // Writing past the disk fails inside; on the node the disk is the
    // file it was, allocated whole at the start, and the agent's reserve
    // stays free.
    let state = node.state();
    let disk_file = state
        .join("roots")
        .join(instance.to_string())
        .join("disk.img");
    assert_allocated(&disk_file, 2 * GIB);
    let (code, out) = ssh(
        &key,
        port,
        "dd if=/dev/zero of=/fill bs=1M count=3072 2>&1; echo used=$(df --output=pcent / | tail -1)",
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("No space left on device"), "{out}");
    assert!(out.contains("used=100%"), "{out}");
    assert_allocated(&disk_file, 2 * GIB);
    assert!(free_bytes(&state) > GIB, "the agent's reserve stays free");
    run(&key, port, "rm /fill && echo kept > /root/marker && sync");

    // The agent is killed and started again: the instance and its files
    // are still there.
    agent.0.kill().ok();
    agent.0.wait().ok();
    agent = node.agent(runtime);
    node.ready().await;
    let (code, out) = ssh_when_up(&key, port, "cat /root/marker; jq --version").await;
    assert_eq!(code, 0, "{out}\nagent: {}", node.agent_log());
    assert!(out.contains("kept") && out.contains("jq-"), "{out}");
    assert_eq!(node.order(&tenant, instance).await["status"], "running");

    // Cancelled, it is gone, layer and disk and all.
    node.server.cancel(&tenant, instance).await;
    node.until(&tenant, instance, "stopped", |o| o["ended_at"].is_string())
        .await;
    let root = state.join("roots").join(instance.to_string());
    for _ in 0..200 {
        if !root.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!root.exists(), "the root outlived the instance");
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    assert!(!mounts.contains(&instance.to_string()), "{mounts}");
    drop(agent);
}

/// A job in `image` that prints `line` and ends.
async fn job_in(node: &Node, tenant: &Tenant, image: &str, command: &str) -> Uuid {
    node.server
        .order(
            tenant,
            json!({ "instance_type": "h100x2", "image": image, "job": { "command": command } }),
        )
        .await
}

async fn private_images_are_pulled_with_their_organizations_credentials_only(engine: Engine) {
    let node = Node::new(engine).await;
    let _agent = node.agent("sandbox");
    node.ready().await;
    let registries = registries();
    let image = format!("{}/gantry-test/debian:bookworm", registries.private);
    let (a, b) = (
        node.server.signup("registry-a").await,
        node.server.signup("registry-b").await,
    );
    let stored = node
        .server
        .post(
            &format!("/api/v1/orgs/{}/registry-credentials", a.org_id),
            &a.token,
            json!({ "registry": registries.private, "username": node::REGISTRY_USER,
                    "password": node::REGISTRY_PASSWORD }),
        )
        .await;
    stored.expect(StatusCode::CREATED);
    assert!(!stored.body.to_string().contains(node::REGISTRY_PASSWORD));
    let credential = stored.id("/id");

    // A's job pulls with A's login.
    let pulled = job_in(&node, &a, &image, "echo pulled-privately").await;
    node.until(&a, pulled, "completed", |o| o["status"] == "completed")
        .await;
    assert!(
        node.output(&a, pulled)
            .await
            .contains(&"pulled-privately".to_owned())
    );

    // B names the same image, now cached on the node: the registry asks
    // again, and B has no login.
    let refused = job_in(&node, &b, &image, "echo should-not-run").await;
    let failed = node
        .until(&b, refused, "failed", |o| o["status"] == "failed")
        .await;
    let reason = failed["failure_reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("image pull failed:") && reason.contains("refused access"),
        "{reason}"
    );
    assert!(
        !node
            .output(&b, refused)
            .await
            .contains(&"should-not-run".to_owned())
    );

    // Another organization's credential is not there to B.
    for path in [
        format!(
            "/api/v1/orgs/{}/registry-credentials/{credential}",
            b.org_id
        ),
        format!(
            "/api/v1/orgs/{}/registry-credentials/{credential}",
            a.org_id
        ),
    ] {
        node.server
            .delete(&path, &b.token)
            .await
            .expect(StatusCode::NOT_FOUND);
    }
    let listed = node
        .server
        .get(
            &format!("/api/v1/orgs/{}/registry-credentials", a.org_id),
            &a.token,
        )
        .await;
    listed.expect(StatusCode::OK);
    assert_eq!(listed.items().len(), 1);
    assert!(!listed.body.to_string().contains(node::REGISTRY_PASSWORD));
    // Stored sealed: the database does not hold the password.
    let sealed = node
        .server
        .count(&format!(
            "SELECT COUNT(*) FROM registry_credentials WHERE secret LIKE '%{}%'",
            node::REGISTRY_PASSWORD
        ))
        .await;
    assert_eq!(sealed, 0);

    // Without its login, A's next pull is refused too.
    node.server
        .delete(
            &format!(
                "/api/v1/orgs/{}/registry-credentials/{credential}",
                a.org_id
            ),
            &a.token,
        )
        .await
        .expect(StatusCode::NO_CONTENT);
    let again = job_in(&node, &a, &image, "true").await;
    node.until(&a, again, "failed", |o| o["status"] == "failed")
        .await;
}

async fn malicious_images_end_in_clear_reasons(engine: Engine, runtime: &str) {
    let node = Node::new(engine).await;
    let _agent = node.agent(runtime);
    node.ready().await;
    let registries = registries();
    let tenant = node.server.signup("images").await;
    // Pulls land in the agent's image store, a file system of its own
    // allocated whole when the agent started.
    let store = node.dir.join("state").join("images.img");
    assert_allocated(&store, node::STORE_GIB * GIB);

    // A set-user-id root program gives an ordinary user inside nothing.
    let suid = job_in(
        &node,
        &tenant,
        &registries.image("setuid"),
        "echo euid=$(setpriv --reuid 1000 --regid 1000 --clear-groups /usr/local/bin/suid-id -u)",
    )
    .await;
    node.until(&tenant, suid, "completed", |o| o["status"] == "completed")
        .await;
    let lines = node.output(&tenant, suid).await;
    assert_eq!(verdict(&lines, "euid"), "1000", "{lines:?}");

    // An entrypoint that ends at once is named.
    let exits = node
        .server
        .order(
            &tenant,
            json!({ "instance_type": "h100x2", "image": registries.image("exits") }),
        )
        .await;
    let failed = node
        .until(&tenant, exits, "failed", |o| o["status"] == "failed")
        .await;
    let reason = failed["failure_reason"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("the image's entrypoint (/bin/false) exited with code 1"),
        "{reason}"
    );

    // An image larger unpacked than the instance's 1 GiB disk is refused,
    // and its layers filled the agent's image store, not the node's disk.
    let huge = job_in(&node, &tenant, &registries.image("huge"), "true").await;
    let failed = node
        .until(&tenant, huge, "failed", |o| o["status"] == "failed")
        .await;
    let reason = failed["failure_reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("larger than the instance's 1.0 GiB disk")
            || reason.contains("does not fit in this node's image store"),
        "{reason}"
    );

    // A tag that does not exist.
    let missing = format!("{}/gantry-test/debian:no-such-tag", registries.open);
    let absent = job_in(&node, &tenant, &missing, "true").await;
    let failed = node
        .until(&tenant, absent, "failed", |o| o["status"] == "failed")
        .await;
    assert_eq!(
        failed["failure_reason"],
        format!("image pull failed: manifest unknown for {missing}")
    );

    // A registry the installation does not allow never reaches a node.
    let refused = node
        .server
        .post(
            &format!("/api/v1/orgs/{}/orders", tenant.org_id),
            &tenant.token,
            json!({ "instance_type": "h100x2", "image": "registry.example/evil/miner:1" }),
        )
        .await;
    refused.expect(StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(refused.body["errors"][0]["field"], "image");

    // The node is healthy, the store no larger than it was, and the node
    // runs the next job.
    assert_allocated(&store, node::STORE_GIB * GIB);
    let nodes = node.server.get("/api/v1/admin/nodes", &node.operator).await;
    assert_eq!(nodes.items()[0]["state"], "ready");
    let next = job_in(&node, &tenant, &registries.image("base"), "echo after").await;
    node.until(&tenant, next, "completed", |o| o["status"] == "completed")
        .await;
}
