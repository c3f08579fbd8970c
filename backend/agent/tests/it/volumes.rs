//! Local volumes on a real agent, as a tenant uses them and as another
//! tenant attacks them: a checkpoint written by one job and read by the
//! next (under other ids of the node), and again after the agent is killed
//! and the node's mounts are gone, ENOSPC at the size sold and nothing
//! outside, a grow that the next job sees, read-only attachments, another
//! organization's jobs and API calls that find nothing, mount paths that
//! are refused, a delete that leaves none of the bytes in the file that
//! held them, and a preempted spot job resuming from its volume.

use crate::node;
use crate::support;

use std::io::Read;
use std::time::Duration;

use node::Node;
use reqwest::StatusCode;
use serde_json::{Value, json};
use support::{Engine, Tenant};
use uuid::Uuid;

mod sqlite {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_checkpoint_on_a_local_volume_outlives_its_jobs_and_its_tenant_alone_reaches_it() {
        super::a_checkpoint_outlives_its_jobs(super::Engine::Sqlite).await;
    }
}

mod postgres {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn mount_paths_and_other_tenants_volumes_are_refused() {
        if crate::support::postgres_skipped() {
            return;
        }
        super::mount_paths_and_other_tenants_volumes_are_refused(super::Engine::Postgres).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_preempted_spot_job_resumes_from_its_volume() {
        if crate::support::postgres_skipped() {
            return;
        }
        super::a_preempted_spot_job_resumes_from_its_volume(super::Engine::Postgres).await;
    }
}

const SECRET: &str = "checkpoint-step-41-of-tenant-a";

pub async fn volume(node: &Node, tenant: &Tenant, id: Uuid) -> Value {
    let reply = node
        .server
        .get(
            &format!("/api/v1/orgs/{}/volumes/{id}", tenant.org_id),
            &tenant.token,
        )
        .await;
    reply.expect(StatusCode::OK);
    reply.body.clone()
}

/// Waits until the volume reads as `done` says.
pub async fn volume_until(
    node: &Node,
    tenant: &Tenant,
    id: Uuid,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    for _ in 0..600 {
        let current = volume(node, tenant, id).await;
        if done(&current) {
            return current;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "volume {id} never became {what}: {}\nagent: {}",
        volume(node, tenant, id).await,
        node.agent_log()
    );
}

/// Runs a job attaching `volumes` to its end; answers the order.
pub async fn finished_job(node: &Node, tenant: &Tenant, command: &str, volumes: Value) -> Uuid {
    let order = node
        .server
        .order(
            tenant,
            json!({ "instance_type": "h100x2", "job": { "command": command }, "volumes": volumes }),
        )
        .await;
    node.until(tenant, order, "over", |o| {
        o["ended_at"].is_string() && o["status"] != "running"
    })
    .await;
    order
}

/// Runs a job attaching `volumes` to its end; answers its output.
async fn job(node: &Node, tenant: &Tenant, command: &str, volumes: Value) -> Vec<String> {
    let order = finished_job(node, tenant, command, volumes).await;
    node.output(tenant, order).await
}

/// Deletes volume `id` and waits until it is gone, its node having erased
/// it; answers whether it went.
pub async fn deleted(node: &Node, tenant: &Tenant, id: Uuid) -> bool {
    let path = format!("/api/v1/orgs/{}/volumes/{id}", tenant.org_id);
    node.server
        .delete(&path, &tenant.token)
        .await
        .expect(StatusCode::ACCEPTED);
    for _ in 0..600 {
        if node.server.get(&path, &tenant.token).await.status == StatusCode::NOT_FOUND {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

async fn a_checkpoint_outlives_its_jobs(engine: Engine) {
    let node = Node::new(engine).await;
    let mut agent = node.agent("sandbox");
    node.ready().await;
    let alice = node.server.signup("alice").await;
    let created = node
        .server
        .post(
            &format!("/api/v1/orgs/{}/volumes", alice.org_id),
            &alice.token,
            json!({ "name": "ckpt", "region": "lab", "size_gib": 1 }),
        )
        .await;
    created.expect(StatusCode::CREATED);
    assert_eq!(created.body["status"], "creating");
    assert_eq!(created.body["node"], "gpu-box-1");
    let id = created.id("/id");
    volume_until(&node, &alice, id, "available", |v| {
        v["status"] == "available"
    })
    .await;
    let image = node
        .state()
        .join("volumes")
        .join(id.to_string())
        .join("disk.img");
    assert_eq!(
        std::fs::metadata(&image).expect("the volume's file").len(),
        1 << 30,
        "the file is exactly the size sold"
    );
    let attach = json!([{ "volume_id": id, "mount_path": "/ckpt" }]);

    let wrote = job(
        &node,
        &alice,
        &format!("echo {SECRET} > /ckpt/state && echo wrote-as=$(id -u)"),
        attach.clone(),
    )
    .await;
    assert!(wrote.contains(&"wrote-as=0".to_owned()), "{wrote:?}");
    let read = job(
        &node,
        &alice,
        "cat /ckpt/state; echo owner=$(stat -c %u /ckpt/state); touch /ckpt/more && echo writable",
        attach.clone(),
    )
    .await;
    assert!(read.contains(&SECRET.to_owned()), "{read:?}");
    assert!(read.contains(&"owner=0".to_owned()), "{read:?}");
    assert!(read.contains(&"writable".to_owned()), "{read:?}");
    let seen = volume(&node, &alice, id).await;
    assert!(seen["used_bytes"].as_i64().is_some_and(|b| b > 0), "{seen}");

    // The agent killed and the node's mounts gone, as after a reboot: the
    // agent back mounts the volume again, and the next job finds the file.
    agent.0.kill().ok();
    agent.0.wait().ok();
    let data = node
        .state()
        .join("volumes")
        .join(id.to_string())
        .join("data");
    let unmounted = std::process::Command::new("umount")
        .arg("-l")
        .arg(&data)
        .status()
        .expect("umount");
    assert!(unmounted.success(), "the volume was mounted on the node");
    agent = node.agent("sandbox");
    node.ready().await;
    let after = job(&node, &alice, "cat /ckpt/state", attach.clone()).await;
    assert!(
        after.contains(&SECRET.to_owned()),
        "{after:?}\n{}",
        node.agent_log()
    );

    // Past its size: ENOSPC inside, the node's file no larger.
    let full = job(
        &node,
        &alice,
        "dd if=/dev/zero of=/ckpt/fill bs=1M count=1200 2>&1 | grep -o 'No space left on device'; echo done",
        attach.clone(),
    )
    .await;
    assert!(
        full.iter().any(|l| l.contains("No space left on device")),
        "{full:?}"
    );
    assert_eq!(std::fs::metadata(&image).expect("file").len(), 1 << 30);

    // Grown, the next job has the room.
    node.server
        .patch(
            &format!("/api/v1/orgs/{}/volumes/{id}", alice.org_id),
            &alice.token,
            json!({ "size_gib": 2 }),
        )
        .await
        .expect(StatusCode::OK);
    volume_until(&node, &alice, id, "grown", |v| v["provisioned_gib"] == 2).await;
    let grown = job(
        &node,
        &alice,
        "dd if=/dev/zero of=/ckpt/more bs=1M count=600 2>/dev/null && echo fits; df -B1G --output=size /ckpt | tail -n 1 | tr -d ' '",
        attach.clone(),
    )
    .await;
    assert!(grown.contains(&"fits".to_owned()), "{grown:?}");
    assert!(grown.contains(&"2".to_owned()), "{grown:?}");

    // Read-only: the files are there, no write goes through.
    let read_only = job(
        &node,
        &alice,
        "head -c 40 /ckpt/state; echo; echo x > /ckpt/state 2>&1 || echo refused",
        json!([{ "volume_id": id, "mount_path": "/ckpt", "read_only": true }]),
    )
    .await;
    assert!(read_only.contains(&SECRET.to_owned()), "{read_only:?}");
    assert!(read_only.contains(&"refused".to_owned()), "{read_only:?}");

    // Another tenant's job on the same node: the volume is nowhere in its
    // view, by the node's path or by its mounts.
    let mallory = node.server.signup("mallory").await;
    let volumes_dir = node.state().join("volumes");
    let probe = job(
        &node,
        &mallory,
        &format!(
            "cat {dir}/{id}/data/state 2>&1; ls {dir} 2>&1; grep -c ckpt /proc/self/mountinfo; \
             grep -rs {SECRET} / --exclude-dir=proc --exclude-dir=sys 2>/dev/null | head -n 1; echo probed",
            dir = volumes_dir.display()
        ),
        json!([]),
    )
    .await;
    assert!(probe.contains(&"probed".to_owned()), "{probe:?}");
    assert!(!probe.iter().any(|l| l.contains(SECRET)), "{probe:?}");
    assert!(probe.contains(&"0".to_owned()), "{probe:?}");

    // Deleted: the file that held it keeps none of its bytes (read through
    // a descriptor held from before, as a later owner of its blocks would).
    let mut held = std::fs::File::open(&image).expect("open the volume's file");
    deleted(&node, &alice, id).await;
    assert!(!image.exists(), "the volume's file is gone");
    let mut bytes = Vec::new();
    held.read_to_end(&mut bytes).expect("read the erased file");
    let needle = SECRET.as_bytes();
    assert!(
        !bytes.windows(needle.len()).any(|w| w == needle),
        "the checkpoint survived the delete"
    );
    drop(agent);
}

async fn mount_paths_and_other_tenants_volumes_are_refused(engine: Engine) {
    let node = Node::new(engine).await;
    let _agent = node.agent("sandbox");
    node.ready().await;
    let alice = node.server.signup("alice").await;
    let bob = node.server.signup("bob").await;
    let created = node
        .server
        .post(
            &format!("/api/v1/orgs/{}/volumes", alice.org_id),
            &alice.token,
            json!({ "name": "data", "region": "lab", "size_gib": 1 }),
        )
        .await;
    created.expect(StatusCode::CREATED);
    let id = created.id("/id");
    let orders = |t: &Tenant| format!("/api/v1/orgs/{}/orders", t.org_id);
    let ordering = |path: &str| {
        json!({ "instance_type": "h100x2", "job": { "command": "true" },
                "volumes": [{ "volume_id": id, "mount_path": path }] })
    };

    // Bob names Alice's volume: not found, whichever way.
    node.server
        .post(&orders(&bob), &bob.token, ordering("/data"))
        .await
        .expect_problem(StatusCode::NOT_FOUND, "volume_not_found");
    for reply in [
        node.server
            .get(
                &format!("/api/v1/orgs/{}/volumes/{id}", bob.org_id),
                &bob.token,
            )
            .await,
        node.server
            .patch(
                &format!("/api/v1/orgs/{}/volumes/{id}", bob.org_id),
                &bob.token,
                json!({ "size_gib": 5 }),
            )
            .await,
        node.server
            .delete(
                &format!("/api/v1/orgs/{}/volumes/{id}", bob.org_id),
                &bob.token,
            )
            .await,
    ] {
        reply.expect_problem(StatusCode::NOT_FOUND, "volume_not_found");
    }
    node.server
        .get(
            &format!("/api/v1/orgs/{}/volumes/{id}", alice.org_id),
            &bob.token,
        )
        .await
        .expect_problem(StatusCode::NOT_FOUND, "organization_not_found");

    // Paths that would hide the system or escape: 422 naming the field,
    // and no order made.
    for path in [
        "/",
        "/proc",
        "/dev/shm",
        "data",
        "/data/../etc",
        "/etc",
        "/a//b",
    ] {
        let refused = node
            .server
            .post(&orders(&alice), &alice.token, ordering(path))
            .await;
        refused.expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
        assert!(
            refused.body["errors"][0]["field"] == "volumes[0].mount_path",
            "{path}: {}",
            refused.body
        );
    }
    let twice = node
        .server
        .post(
            &orders(&alice),
            &alice.token,
            json!({ "instance_type": "h100x2", "job": { "command": "true" },
                    "volumes": [{ "volume_id": id, "mount_path": "/a" },
                                { "volume_id": id, "mount_path": "/b" }] }),
        )
        .await;
    twice.expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    assert_eq!(twice.body["errors"][0]["field"], "volumes[1].volume_id");
    let listed = node.server.get(&orders(&alice), &alice.token).await;
    assert!(listed.items().is_empty(), "a refused order left a row");

    // Sizes of nothing, below nothing or past the node's room: refused,
    // nothing made.
    for size in [json!(0), json!(-1), json!(1_000_000), json!(60_000)] {
        node.server
            .post(
                &format!("/api/v1/orgs/{}/volumes", alice.org_id),
                &alice.token,
                json!({ "name": "big", "region": "lab", "size_gib": size }),
            )
            .await
            .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    }
    let listed = node
        .server
        .get(
            &format!("/api/v1/orgs/{}/volumes", alice.org_id),
            &alice.token,
        )
        .await;
    assert_eq!(listed.items().len(), 1, "only the first volume exists");

    // A volume never shrinks; one attached by a live order is not deleted.
    volume_until(&node, &alice, id, "available", |v| {
        v["status"] == "available"
    })
    .await;
    node.server
        .patch(
            &format!("/api/v1/orgs/{}/volumes/{id}", alice.org_id),
            &alice.token,
            json!({ "size_gib": 2 }),
        )
        .await
        .expect(StatusCode::OK);
    node.server
        .patch(
            &format!("/api/v1/orgs/{}/volumes/{id}", alice.org_id),
            &alice.token,
            json!({ "size_gib": 1 }),
        )
        .await
        .expect_problem(StatusCode::UNPROCESSABLE_ENTITY, "validation_failed");
    let holder = node
        .server
        .order(
            &alice,
            json!({ "instance_type": "h100x2", "job": { "command": "sleep 600" },
                    "volumes": [{ "volume_id": id, "mount_path": "/data" }] }),
        )
        .await;
    node.until(&alice, holder, "running", |o| o["status"] == "running")
        .await;
    let attached = volume(&node, &alice, id).await;
    assert_eq!(attached["status"], "attached");
    assert_eq!(attached["orders"][0]["order_id"], holder.to_string());
    node.server
        .delete(
            &format!("/api/v1/orgs/{}/volumes/{id}", alice.org_id),
            &alice.token,
        )
        .await
        .expect_problem(StatusCode::CONFLICT, "volume_attached");
}

async fn a_preempted_spot_job_resumes_from_its_volume(engine: Engine) {
    let node = Node::new(engine).await;
    let _agent = node.agent("sandbox");
    node.ready().await;
    let types = node
        .server
        .get("/api/v1/catalog/instance-types", &node.operator)
        .await;
    let h100x2 = types.items()[0]["id"].as_str().expect("id").to_owned();
    node.server
        .post(
            &format!("/api/v1/admin/catalog/instance-types/{h100x2}/prices"),
            &node.operator,
            json!({ "pricing_class": "spot", "hourly_micros": 1_000_000 }),
        )
        .await
        .expect(StatusCode::CREATED);
    let alice = node.server.signup("alice").await;
    let created = node
        .server
        .post(
            &format!("/api/v1/orgs/{}/volumes", alice.org_id),
            &alice.token,
            json!({ "name": "ckpt", "region": "lab", "size_gib": 1 }),
        )
        .await;
    created.expect(StatusCode::CREATED);
    let id = created.id("/id");
    volume_until(&node, &alice, id, "available", |v| {
        v["status"] == "available"
    })
    .await;

    // A spot job saves its step and works on; preempted, its next attempt
    // starts from the step it finds.
    let spot = node
        .server
        .order(
            &alice,
            json!({ "instance_type": "h100x2", "pricing_class": "spot",
                    "job": { "command": "if [ -f /ckpt/step ]; then echo resumed-from=$(cat /ckpt/step); else echo 41 > /ckpt/step && sync && echo saved && sleep 600; fi" },
                    "volumes": [{ "volume_id": id, "mount_path": "/ckpt" }] }),
        )
        .await;
    node.printed(&alice, spot, "saved").await;
    // Four GPUs: two standard jobs of two take the spot job's.
    let mut standard = Vec::new();
    for _ in 0..2 {
        standard.push(
            node.server
                .order(
                    &alice,
                    json!({ "instance_type": "h100x2", "job": { "command": "sleep 600" } }),
                )
                .await,
        );
    }
    node.until(&alice, spot, "preempted", |o| {
        o["attempts"].as_i64().is_some_and(|a| a >= 1) && o["status"] != "running"
    })
    .await;
    for order in standard {
        node.server.cancel(&alice, order).await;
    }
    node.printed(&alice, spot, "resumed-from=41").await;
    let done = node
        .until(&alice, spot, "completed", |o| o["status"] == "completed")
        .await;
    assert!(done["attempts"].as_i64().is_some_and(|a| a >= 2), "{done}");
}
