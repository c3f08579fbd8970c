//! A node whose workloads are isolated (the `sandbox` or `oci` runtime)
//! and the server it joins, as the isolation and instance tests share it:
//! the test images served by Debian's docker-registry (an open one and one
//! that wants a login), a real agent process with ids, ports and an image
//! store of its own, and clean-up of whatever a failed test left running
//! or mounted.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::lab::{self, Agent};
use crate::support::{Engine, Tenant, TestServer};

/// Something only the agent's own environment holds.
pub const AGENT_CANARY: &str = "agent-environment-canary";
/// The login the private registry wants.
pub const REGISTRY_USER: &str = "team";
pub const REGISTRY_PASSWORD: &str = "registry-password-of-the-team";
/// Ids per workload, as the agent maps them.
const IDS: u32 = 65_536;
/// The image store each node gets, in GiB.
pub const STORE_GIB: u64 = 2;

/// The test images, served on this machine.
pub struct Registries {
    /// `127.0.0.1:port` of a registry anyone may pull from.
    pub open: String,
    /// `127.0.0.1:port` of one that wants `REGISTRY_USER`'s login.
    pub private: String,
    images: Value,
}

impl Registries {
    /// The reference of test image `name` (`base`, `setuid`, `exits`,
    /// `huge`) in the open registry.
    pub fn image(&self, name: &str) -> String {
        format!(
            "{}/{}",
            self.open,
            self.images[name].as_str().expect("image")
        )
    }
}

/// Builds the test images once per machine (the fixture script) and serves
/// them for this test process; the registries die with it.
pub fn registries() -> &'static Registries {
    static REGISTRIES: OnceLock<Registries> = OnceLock::new();
    REGISTRIES.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/test-fixtures.sh");
        let out = Command::new(&script)
            .stderr(Stdio::inherit())
            .output()
            .expect("run the fixture script");
        assert!(out.status.success(), "the fixture script failed");
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        let images: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join("images.json")).expect("images.json"),
        )
        .expect("images.json");
        let storage = images["registry_storage"].as_str().expect("storage").to_owned();
        let work = std::env::temp_dir().join(format!("gantry-registries-{}", std::process::id()));
        std::fs::create_dir_all(&work).expect("registry dir");
        let htpasswd = Command::new("htpasswd")
            .args(["-Bbn", REGISTRY_USER, REGISTRY_PASSWORD])
            .output()
            .expect("htpasswd (Debian's apache2-utils)");
        std::fs::write(work.join("htpasswd"), &htpasswd.stdout).expect("htpasswd file");
        let (open_port, private_port) = (free_port(), free_port());
        let config = |port: u16, auth: bool| {
            let mut text = format!(
                "version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {storage}\n  \
                 maintenance:\n    readonly:\n      enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n"
            );
            if auth {
                text.push_str(&format!(
                    "auth:\n  htpasswd:\n    realm: gantry-test\n    path: {}\n",
                    work.join("htpasswd").display()
                ));
            }
            text
        };
        std::fs::write(work.join("open.yml"), config(open_port, false)).expect("config");
        std::fs::write(work.join("private.yml"), config(private_port, true)).expect("config");
        // The registries are children of a thread that lives as long as
        // the process: they are killed when it exits.
        let (started, ready) = std::sync::mpsc::channel();
        let configs = [work.join("open.yml"), work.join("private.yml")];
        std::thread::spawn(move || {
            let children: Vec<Child> = configs
                .iter()
                .map(|config| {
                    let mut command = Command::new("docker-registry");
                    command
                        .arg("serve")
                        .arg(config)
                        .stdout(Stdio::null())
                        .stderr(Stdio::null());
                    // SAFETY: prctl(2) with integers, between fork and exec.
                    unsafe {
                        std::os::unix::process::CommandExt::pre_exec(&mut command, || {
                            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                            Ok(())
                        });
                    }
                    command.spawn().expect("docker-registry (Debian's docker-registry)")
                })
                .collect();
            started.send(()).ok();
            let _kept = children;
            loop {
                std::thread::park();
            }
        });
        ready.recv().expect("registries started");
        for port in [open_port, private_port] {
            let up = (0..100).any(|_| {
                std::thread::sleep(Duration::from_millis(50));
                std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
            });
            assert!(up, "the registry on port {port} never answered");
        }
        Registries {
            open: format!("127.0.0.1:{open_port}"),
            private: format!("127.0.0.1:{private_port}"),
            images,
        }
    })
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// An isolating node and the server it joins; whatever it left goes when
/// done.
pub struct Node {
    pub server: TestServer,
    pub operator: String,
    pub token: String,
    pub dir: PathBuf,
    /// The node's ids and ports, apart from other tests'.
    pub uids: (u32, u32),
    pub ports: (u16, u16),
}

impl Drop for Node {
    /// Workloads outlive agents by design: whatever a failed test left
    /// running under this node's ids, mounted under its directory or
    /// registered with podman goes too.
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
        let store = self.state().join("images");
        Command::new("podman")
            .arg("--root")
            .arg(store.join("storage"))
            .args(["rm", "--all", "--force", "--time", "0"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .ok();
        let dir = self.dir.display().to_string();
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut points: Vec<&str> = mounts
            .lines()
            .filter_map(|l| l.split_whitespace().nth(4))
            .filter(|p| p.starts_with(&dir))
            .collect();
        points.sort_by_key(|p| std::cmp::Reverse(p.len()));
        for point in points {
            Command::new("umount").args(["-l", point]).status().ok();
        }
        for spec in std::fs::read_dir("/etc/cdi")
            .into_iter()
            .flatten()
            .flatten()
        {
            if std::fs::read_to_string(spec.path()).is_ok_and(|t| t.contains(&dir)) {
                std::fs::remove_file(spec.path()).ok();
            }
        }
        std::fs::remove_dir_all(&self.dir).ok();
    }
}

impl Node {
    pub async fn new(engine: Engine) -> Self {
        Self::new_with(engine, |_| {}).await
    }

    /// [`Node::new`] with the server's configuration changed by `configure`.
    pub async fn new_with(
        engine: Engine,
        configure: impl FnOnce(&mut gantry_core::config::Config),
    ) -> Self {
        let server = TestServer::start_with(engine, |config| {
            config.agent_heartbeat_deadline_seconds = 10;
            configure(config);
        })
        .await;
        let operator = server.operator().await.token;
        let token = lab::catalog(&server, &operator).await;
        let registries = registries();
        server
            .put(
                "/api/v1/admin/catalog/image-policy",
                &operator,
                json!({ "allowed_prefixes": [registries.open, registries.private] }),
            )
            .await
            .expect(StatusCode::OK);
        let dir = std::env::temp_dir().join(format!("gantry-node-{}", Uuid::now_v7().simple()));
        std::fs::create_dir_all(&dir).expect("work dir");
        // Tests run side by side: each node takes its own ids and ports (a
        // shared range would let one test's clean-up kill another's work).
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let slot = (std::process::id() % 20) * 20 + NEXT.fetch_add(1, Ordering::Relaxed) % 20;
        let first_uid = 100_000_000 + slot * 8 * IDS;
        let first_port = 20_000 + u16::try_from(slot).unwrap_or(0) * 100;
        Node {
            server,
            operator,
            token,
            uids: (first_uid, first_uid + 8 * IDS - 1),
            ports: (first_port, first_port + 99),
            dir,
        }
    }

    pub fn state(&self) -> PathBuf {
        self.dir.join("state")
    }

    pub fn agent(&self, runtime: &str) -> Agent {
        self.spawn(lab::agent_command(
            &self.server,
            &self.token,
            "gpu-box-1",
            &self.state(),
            runtime,
        ))
    }

    pub fn agent_simulating(&self, runtime: &str, gpus: &str) -> Agent {
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

    /// Starts the agent with this node's ids, ports, image store, the
    /// test registries and the canary.
    pub fn spawn(&self, command: Command) -> Agent {
        self.spawn_share(command, 0, 1)
    }

    /// [`Node::spawn`] for the `part`-th of `parts` agents sharing this
    /// node's ids and ports (agents standing for several nodes).
    pub fn spawn_share(&self, command: Command, part: u32, parts: u32) -> Agent {
        self.spawn_graced(command, part, parts, 1)
    }

    /// [`Node::spawn_share`] with `grace` seconds between a stop's request
    /// and its kill.
    pub fn spawn_graced(&self, mut command: Command, part: u32, parts: u32, grace: u32) -> Agent {
        let ids = (self.uids.1 - self.uids.0 + 1) / parts;
        let uids = (self.uids.0 + part * ids, self.uids.0 + (part + 1) * ids - 1);
        let span = (self.ports.1 - self.ports.0 + 1) / u16::try_from(parts).unwrap_or(1);
        let first_port = self.ports.0 + u16::try_from(part).unwrap_or(0) * span;
        let ports = (first_port, first_port + span - 1);
        let log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(self.dir.join("agent.log"))
            .expect("agent log");
        let registries = registries();
        let child = command
            .env("GANTRY_AGENT_CANARY", AGENT_CANARY)
            .args(["--grace-seconds", &grace.to_string(), "--pids-max", "64"])
            .args(["--public-host", "127.0.0.1"])
            .arg("--uid-range")
            .arg(format!("{}-{}", uids.0, uids.1))
            .arg("--port-range")
            .arg(format!("{}-{}", ports.0, ports.1))
            .args(["--insecure-registry", &registries.open])
            .args(["--insecure-registry", &registries.private])
            .args(["--default-image", &registries.image("base")])
            .args(["--image-store-gib", &STORE_GIB.to_string()])
            .args(["--default-disk-gib", "1", "--disk-reserve-gib", "1"])
            .stderr(log)
            .spawn()
            .expect("start the agent");
        Agent(child)
    }

    pub fn agent_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("agent.log")).unwrap_or_default()
    }

    /// Waits until the node is ready, isolated as its runtime says.
    pub async fn ready(&self) {
        for _ in 0..400 {
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

    pub async fn order(&self, tenant: &Tenant, order: Uuid) -> Value {
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

    /// Waits up to a minute (a first pull included) for `done`.
    pub async fn until(
        &self,
        tenant: &Tenant,
        order: Uuid,
        what: &str,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        self.until_within(tenant, order, what, Duration::from_secs(60), done)
            .await
    }

    /// [`Node::until`], waiting up to `limit` (a VM's boot).
    pub async fn until_within(
        &self,
        tenant: &Tenant,
        order: Uuid,
        what: &str,
        limit: Duration,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = std::time::Instant::now() + limit;
        while std::time::Instant::now() < deadline {
            let current = self.order(tenant, order).await;
            if done(&current) {
                return current;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "order {order} never became {what}: {}\noutput: {:?}\nagent: {}",
            self.order(tenant, order).await,
            self.output(tenant, order).await,
            self.agent_log()
        );
    }

    pub async fn output(&self, tenant: &Tenant, order: Uuid) -> Vec<String> {
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

    /// The fingerprint of the ed25519 host key the SSH server on `port`
    /// presents.
    pub fn host_key_on(port: u16) -> String {
        let scanned = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "ssh-keyscan -t ed25519 -p {port} 127.0.0.1 2>/dev/null | ssh-keygen -lf -"
            ))
            .output()
            .expect("ssh-keyscan");
        String::from_utf8_lossy(&scanned.stdout).to_string()
    }

    /// Waits for `line` in the order's output.
    pub async fn printed(&self, tenant: &Tenant, order: Uuid, line: &str) -> Vec<String> {
        for _ in 0..600 {
            let lines = self.output(tenant, order).await;
            if lines.iter().any(|l| l == line) {
                return lines;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "order {order} never printed {line:?}: {:?}\nagent: {}",
            self.output(tenant, order).await,
            self.agent_log()
        );
    }

    /// An instance type of one H100 (`shape` says its vCPUs, memory and
    /// disk) with an on-demand price.
    pub async fn instance_type(&self, name: &str, shape: Value) {
        let mut body = json!({ "name": name, "gpu_model": "H100-SXM-80GB", "gpus_per_node": 1 });
        if let (Some(body), Some(shape)) = (body.as_object_mut(), shape.as_object()) {
            body.extend(shape.clone());
        }
        let made = self
            .server
            .post("/api/v1/admin/catalog/instance-types", &self.operator, body)
            .await;
        made.expect(StatusCode::CREATED);
        self.server
            .post(
                &format!(
                    "/api/v1/admin/catalog/instance-types/{}/prices",
                    made.id("/id")
                ),
                &self.operator,
                json!({ "pricing_class": "on_demand", "hourly_micros": 2_500_000 }),
            )
            .await
            .expect(StatusCode::CREATED);
    }

    /// A tenant with an SSH key: answers the tenant and the private key.
    pub async fn tenant_with_key(&self, label: &str) -> (Tenant, PathBuf) {
        let tenant = self.server.signup(label).await;
        let (key, public) = key_pair(&self.dir, label);
        self.server
            .post(
                "/api/v1/me/ssh-keys",
                &tenant.token,
                json!({ "name": "laptop", "public_key": public }),
            )
            .await
            .expect(StatusCode::CREATED);
        (tenant, key)
    }

    /// Orders an instance and waits until it runs with SSH access; answers
    /// the order and its SSH port.
    pub async fn instance(&self, tenant: &Tenant, body: Value) -> (Uuid, u16) {
        let order = self.server.order(tenant, body).await;
        let running = self
            .until(tenant, order, "running with access", |o| {
                o["status"] == "running" && o["access"]["hosts"][0]["ssh"].is_object()
            })
            .await;
        let port = running["access"]["hosts"][0]["ssh"]["port"]
            .as_u64()
            .and_then(|p| u16::try_from(p).ok())
            .expect("an SSH port");
        (order, port)
    }
}

/// The GPU indices an order holds on its first node.
pub fn gpus_of(order: &Value) -> Vec<u64> {
    order["placement"][0]["gpu_ids"]
        .as_array()
        .expect("gpu ids")
        .iter()
        .filter_map(Value::as_u64)
        .collect()
}

/// `key=value` lines of a probe's output, by key.
pub fn verdict(lines: &[String], key: &str) -> String {
    lines
        .iter()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key} in {lines:?}"))
        .to_owned()
}

/// A key pair made by Debian's ssh-keygen.
pub fn key_pair(dir: &Path, name: &str) -> (PathBuf, String) {
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

/// Runs `command` on the instance as `user` with Debian's ssh client;
/// answers its exit status and output.
pub fn ssh_as(key: &Path, port: u16, user: &str, command: &str) -> (i32, String) {
    let out = Command::new("ssh")
        .arg("-i")
        .arg(key)
        .args(["-p", &port.to_string()])
        .args(["-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes"])
        .args(["-o", "ConnectTimeout=5", "-o", "ServerAliveInterval=5"])
        .args([
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
        ])
        .args([
            "-o",
            "LogLevel=ERROR",
            &format!("{user}@127.0.0.1"),
            command,
        ])
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

/// `ssh_as` root.
pub fn ssh(key: &Path, port: u16, command: &str) -> (i32, String) {
    ssh_as(key, port, "root", command)
}

/// `ssh` until the server answers (it starts beside the instance).
pub async fn ssh_when_up(key: &Path, port: u16, command: &str) -> (i32, String) {
    ssh_when_up_within(key, port, command, Duration::from_secs(20)).await
}

/// [`ssh_when_up`], trying for up to `limit` (a VM's reboot).
pub async fn ssh_when_up_within(
    key: &Path,
    port: u16,
    command: &str,
    limit: Duration,
) -> (i32, String) {
    let deadline = std::time::Instant::now() + limit;
    let mut last = (255, String::new());
    while std::time::Instant::now() < deadline {
        last = ssh(key, port, command);
        if last.0 != 255 || last.1.contains("Permission denied") {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    last
}

/// Bytes free on the file system of `path`.
pub fn free_bytes(path: &Path) -> u64 {
    let out = Command::new("df")
        .args(["--output=avail", "-B1"])
        .arg(path)
        .output()
        .expect("df");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .nth(1)
        .and_then(|l| l.trim().parse().ok())
        .expect("df's figure")
}
