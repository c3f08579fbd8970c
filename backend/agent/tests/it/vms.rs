//! Instances on the `vm` runtime, as a tenant and an attacker meet them: a
//! Debian VM image built from Debian's archive (the fixture script, once
//! per machine) boots in real QEMU; the tenant SSHes in as root with their
//! key and meets the host key they were shown, `nproc`, `free` and `df /`
//! say the instance type, another tenant's key is refused, a file survives
//! a reboot from inside and an agent killed and restarted, and a cancel
//! shuts the guest down by ACPI within the grace period. From inside, the node's own services are out of
//! reach, and QEMU on the node is an unprivileged, seccomp-fenced process
//! whose sockets are its alone. Then bad input: an image that does not
//! boot, one the node lacks, a type larger than the node has free.
//!
//! QEMU uses KVM where this machine's KVM can boot a stock kernel; a
//! paravirtual one (`kvm_pvm`, found on some cloud machines) boots only its
//! own guest kernels, and there QEMU's emulation (TCG) runs the same image.

use crate::node;
use crate::support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use node::{Node, ssh, ssh_when_up_within, verdict};
use reqwest::StatusCode;
use serde_json::json;
use support::Engine;
use uuid::Uuid;

const GIB: u64 = 1 << 30;
/// How long a guest may take to boot here, emulated on a busy machine.
const BOOT: Duration = Duration::from_secs(600);
/// Between ACPI's shutdown and the kill: ample for a guest's shutdown.
const GRACE: u32 = 120;

/// The test image's directory and how this machine runs it.
fn vm_image() -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/test-vm-image.sh");
    let out = Command::new(&script)
        .stderr(Stdio::inherit())
        .output()
        .expect("run the VM image script");
    assert!(out.status.success(), "the VM image script failed");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// `--vm-accel` and `--vm-cpu` for this machine.
fn accel() -> [&'static str; 4] {
    let kvm_boots_stock_kernels =
        Path::new("/dev/kvm").exists() && !Path::new("/sys/module/kvm_pvm").exists();
    if kvm_boots_stock_kernels {
        ["--vm-accel", "kvm", "--vm-cpu", "host"]
    } else {
        ["--vm-accel", "tcg", "--vm-cpu", "max"]
    }
}

/// A vm agent on `node` booting images from `images`.
fn vm_agent(node: &Node, images: &Path, boot_seconds: u64, extra: &[&str]) -> crate::lab::Agent {
    let mut command =
        crate::lab::agent_command(&node.server, &node.token, "gpu-box-1", &node.state(), "vm");
    command
        .arg("--vm-image-dir")
        .arg(images)
        .args(accel())
        .args(["--vm-boot-seconds", &boot_seconds.to_string()])
        .args(extra);
    node.spawn_graced(command, 0, 1, GRACE)
}

/// An instance type `name` of one vCPU, `memory_gib` and `disk_gib`, and
/// catalog images named as the node's files.
async fn catalog(node: &Node, name: &str, memory_gib: u64, disk_gib: u64, images: &[&str]) {
    node.instance_type(
        name,
        json!({ "vcpus": 1, "memory_gib": memory_gib, "disk_gib": disk_gib }),
    )
    .await;
    for image in images {
        let reply = node
            .server
            .post(
                "/api/v1/admin/catalog/images",
                &node.operator,
                json!({ "name": image, "reference": format!("vm-images/{image}") }),
            )
            .await;
        assert!(
            reply.status == StatusCode::CREATED || reply.status == StatusCode::CONFLICT,
            "{:?}",
            reply.body
        );
    }
}

fn run(key: &Path, port: u16, command: &str) -> String {
    let (code, out) = ssh(key, port, command);
    assert_eq!(code, 0, "`{command}` failed: {out}");
    out
}

/// The QEMU process of order `id` on this machine: its pid and status.
fn qemu_of(id: Uuid) -> Option<(u32, String)> {
    let name = format!("gantry-{}", id.simple());
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let line = std::fs::read(entry.path().join("cmdline")).ok()?;
            let line = String::from_utf8_lossy(&line);
            (line.starts_with("/usr/bin/qemu-system") && line.contains(&name))
                .then(|| {
                    Some((
                        pid,
                        std::fs::read_to_string(entry.path().join("status")).ok()?,
                    ))
                })
                .flatten()
        })
}

fn status_field(status: &str, field: &str) -> String {
    status
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_default()
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_boots_a_vm_and_it_keeps_its_files_through_reboot_and_agent_restart() {
    let images = vm_image();
    let node = Node::new(Engine::Sqlite).await;
    catalog(&node, "vm1", 1, 4, &["debian-12"]).await;
    let mut agent = vm_agent(&node, &images, BOOT.as_secs(), &[]);
    node.ready().await;
    let (tenant, key) = node.tenant_with_key("vm-tenant").await;

    let asked = Instant::now();
    let order = node
        .server
        .order(
            &tenant,
            json!({ "instance_type": "vm1", "image": "debian-12" }),
        )
        .await;
    let running = node
        .until_within(&tenant, order, "running", BOOT, |o| {
            o["status"] == "running"
        })
        .await;
    eprintln!(
        "vm: order to SSH answering in {:.1} s ({})",
        asked.elapsed().as_secs_f64(),
        accel()[1]
    );
    let host = &running["access"]["hosts"][0];
    assert_eq!(running["access"]["runtime"], "vm", "{running}");
    let port = host["ssh"]["port"]
        .as_u64()
        .and_then(|p| u16::try_from(p).ok())
        .expect("an SSH port");

    // The host key the tenant was shown is the one the guest presents.
    let scanned = Node::host_key_on(port);
    let fingerprint = host["ssh"]["host_key_fingerprint"]
        .as_str()
        .expect("fingerprint");
    assert!(scanned.contains(fingerprint), "{fingerprint} vs {scanned}");

    // Root, in a machine of the type's size.
    let size = run(
        &key,
        port,
        "echo uid=$(id -u); echo nproc=$(nproc); \
         echo memory=$(awk '/MemTotal/ {print $2}' /proc/meminfo); \
         echo disk=$(df -B1 --output=size / | tail -1); echo kernel=$(uname -r); \
         echo host=$(hostname)",
    );
    let lines: Vec<String> = size.lines().map(str::to_owned).collect();
    assert_eq!(verdict(&lines, "uid"), "0", "{size}");
    assert_eq!(verdict(&lines, "nproc"), "1", "{size}");
    let memory_kib: u64 = verdict(&lines, "memory").parse().expect("MemTotal");
    assert!(
        (GIB / 1024 * 85 / 100..=GIB / 1024).contains(&memory_kib),
        "1 GiB less the guest kernel's own: {size}"
    );
    let disk: u64 = verdict(&lines, "disk").trim().parse().expect("df's size");
    assert!(
        (4 * GIB * 9 / 10..=4 * GIB).contains(&disk),
        "the 4 GiB disk, grown from the image's 2 GiB: {size}"
    );
    assert!(
        verdict(&lines, "kernel").contains("cloud-amd64"),
        "its own kernel: {size}"
    );

    // Another tenant's key, even with the port, is not let in.
    let (_stranger, stranger_key) = node.tenant_with_key("vm-stranger").await;
    let (code, out) = ssh(&stranger_key, port, "true");
    assert_eq!(code, 255, "{out}");
    assert!(out.contains("Permission denied"), "{out}");

    // From inside, the node's own services are out of reach: the server on
    // the node's loopback, by QEMU's gateway or any other way.
    let server_port = reqwest::Url::parse(&node.server.url("/"))
        .ok()
        .and_then(|u| u.port())
        .expect("the server's port");
    let probe = run(
        &key,
        port,
        &format!(
            "for target in 10.0.2.2:{server_port} 10.0.2.2:5432 10.0.2.2:22 \
             127.0.0.1:{server_port}; do host=${{target%:*}}; p=${{target#*:}}; \
             if timeout 3 bash -c \"echo > /dev/tcp/$host/$p\" 2>/dev/null; \
             then echo reached=$target; fi; done; echo probed"
        ),
    );
    assert!(
        !probe.contains("reached="),
        "the guest reached the node: {probe}"
    );
    assert!(probe.contains("probed"), "{probe}");

    // On the node, QEMU is an unprivileged id of the VM's own range, under
    // QEMU's seccomp filter, and its sockets are in a directory of its own.
    let (pid, status) = qemu_of(order).expect("the VM's QEMU");
    let uid: u32 = status_field(&status, "Uid").parse().expect("uid");
    assert!(
        (node.uids.0..=node.uids.1).contains(&uid),
        "QEMU runs as {uid}, not one of the VM's ids"
    );
    assert_eq!(status_field(&status, "Seccomp"), "2", "{status}");
    let run_dir = node.state().join("vms").join(order.to_string()).join("run");
    let meta = std::fs::metadata(&run_dir).expect("the VM's directory");
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    assert_eq!(meta.permissions().mode() & 0o777, 0o700);
    assert_eq!(meta.uid(), uid);
    assert!(run_dir.join("qmp.sock").exists());

    // A file written survives a reboot from inside, in the same QEMU.
    run(&key, port, "echo kept > /root/marker && sync");
    ssh(&key, port, "systemctl reboot");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (code, out) = ssh_when_up_within(&key, port, "cat /root/marker", BOOT).await;
    assert_eq!((code, out.trim()), (0, "kept"), "after the reboot: {out}");
    assert_eq!(qemu_of(order).map(|q| q.0), Some(pid), "the same QEMU");
    assert_eq!(node.order(&tenant, order).await["status"], "running");

    // The agent is killed and started again: the VM runs on and the new
    // agent reconnects to it.
    agent.0.kill().ok();
    agent.0.wait().ok();
    agent = vm_agent(&node, &images, BOOT.as_secs(), &[]);
    node.ready().await;
    assert_eq!(run(&key, port, "cat /root/marker").trim(), "kept");
    assert_eq!(qemu_of(order).map(|q| q.0), Some(pid), "the same QEMU");
    for _ in 0..100 {
        if node.agent_log().contains("reconnected to the VM") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        node.agent_log().contains("reconnected to the VM"),
        "{}",
        node.agent_log()
    );

    // A cancel shuts the guest down by ACPI, well inside the grace period,
    // and its disk goes with it.
    let cancelled = Instant::now();
    node.server.cancel(&tenant, order).await;
    node.until_within(&tenant, order, "ended", BOOT, |o| o["ended_at"].is_string())
        .await;
    let took = cancelled.elapsed();
    eprintln!("vm: cancel to QEMU's end in {:.1} s", took.as_secs_f64());
    assert!(took < Duration::from_secs(u64::from(GRACE)), "{took:?}");
    let console = node.output(&tenant, order).await.join("\n");
    assert!(
        console.contains("reboot: Power down"),
        "shut down by itself: {console}"
    );
    assert!(qemu_of(order).is_none());
    for _ in 0..100 {
        if !run_dir.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!run_dir.exists(), "the VM's disk outlived it");
    drop(agent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vms_that_cannot_boot_here_fail_with_clear_reasons_and_the_node_stays_healthy() {
    let cached = vm_image();
    let node = Node::new(Engine::Sqlite).await;
    // The node's images: the good one, and a blank disk with no boot loader.
    let images = node.dir.join("vm-images");
    std::fs::create_dir_all(&images).expect("image dir");
    std::os::unix::fs::symlink(
        cached.join("debian-12.qcow2"),
        images.join("debian-12.qcow2"),
    )
    .expect("link");
    let blank = Command::new("qemu-img")
        .args(["create", "-q", "-f", "qcow2"])
        .arg(images.join("blank.qcow2"))
        .arg("1G")
        .status()
        .expect("qemu-img");
    assert!(blank.success());
    catalog(&node, "vm1", 1, 4, &["debian-12", "blank", "absent"]).await;
    catalog(&node, "vm-huge", 400, 4, &[]).await;
    // The node says it has far more memory than this machine has free.
    let _agent = vm_agent(&node, &images, 20, &["--simulate-memory-mib", "1048576"]);
    node.ready().await;
    let (tenant, _key) = node.tenant_with_key("vm-bad").await;

    let cases = [
        ("vm1", "blank", "did not answer on SSH within 20 s"),
        ("vm1", "absent", "VM image absent is not on this node"),
        ("vm-huge", "debian-12", "MiB of memory"),
    ];
    for (instance_type, image, reason) in cases {
        let order = node
            .server
            .order(
                &tenant,
                json!({ "instance_type": instance_type, "image": image }),
            )
            .await;
        let failed = node
            .until_within(&tenant, order, "failed", BOOT, |o| o["status"] == "failed")
            .await;
        let why = failed["failure_reason"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(why.contains(reason), "{image} on {instance_type}: {failed}");
        if image == "blank" {
            assert!(
                why.contains("No bootable device"),
                "the console's last lines: {why}"
            );
        }
        assert!(qemu_of(order).is_none(), "{image}: QEMU outlived the order");
    }
    let nodes = node.server.get("/api/v1/admin/nodes", &node.operator).await;
    assert_eq!(nodes.items()[0]["state"], "ready", "{:?}", nodes.body);
    let vms = node.state().join("vms");
    for _ in 0..100 {
        if std::fs::read_dir(&vms).map_or(0, Iterator::count) == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        std::fs::read_dir(&vms).map_or(0, Iterator::count),
        0,
        "nothing left"
    );
}
