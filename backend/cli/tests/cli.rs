//! The `gantry-cli` binary against a real server over HTTP: jobs from YAML
//! run by a real agent process and followed to their end, the exit codes
//! scripts rely on, sign-in kept and refreshed in the config file, and the
//! tenant and operator commands.

use gantry_test_support as support;
use gantry_test_support::on_both_engines;

use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use serde_json::Value;
use support::{Engine, PASSWORD, Tenant, TestServer};
use uuid::Uuid;

const CLI: &str = env!("CARGO_BIN_EXE_gantry-cli");

on_both_engines!(a_yaml_job_is_followed_to_its_end_and_its_outcome_is_the_exit_code);

/// The agent binary the workspace builds beside this one.
fn agent_binary() -> PathBuf {
    let path = Path::new(CLI).with_file_name("gantry-agent");
    assert!(
        path.exists(),
        "{} is missing: build the agent first (cargo build -p gantry-agent)",
        path.display()
    );
    path
}

struct Agent(Child);

impl Drop for Agent {
    fn drop(&mut self) {
        self.0.kill().ok();
        self.0.wait().ok();
    }
}

/// A user's machine: a home for the config file and the files it writes.
struct Desk {
    dir: PathBuf,
    server: String,
}

impl Drop for Desk {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.dir).ok();
    }
}

impl Desk {
    fn new(server: &TestServer) -> Self {
        let dir = std::env::temp_dir().join(format!("gantry-cli-test-{}", Uuid::now_v7().simple()));
        std::fs::create_dir_all(&dir).expect("desk");
        Self {
            dir,
            server: server.base.clone(),
        }
    }

    fn config(&self) -> PathBuf {
        self.dir.join("config").join("gantry.json")
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(CLI);
        command
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", &self.dir)
            .env("GANTRY_CONFIG", self.config())
            .args(args)
            .stdin(Stdio::null());
        command
    }

    async fn run(&self, args: &[&str]) -> Output {
        let mut command = self.command(args);
        tokio::task::spawn_blocking(move || command.output().expect("run gantry-cli"))
            .await
            .expect("join")
    }

    async fn login(&self, email: &str) {
        let mut command = self.command(&[
            "login",
            "--server",
            &self.server,
            "--email",
            email,
            "--password-stdin",
        ]);
        let output = tokio::task::spawn_blocking(move || {
            let mut child = command
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start login");
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(format!("{PASSWORD}\n").as_bytes())
                .expect("password");
            child.wait_with_output().expect("login")
        })
        .await
        .expect("join");
        assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    }

    fn write(&self, name: &str, contents: &str) -> String {
        let path = self.dir.join(name);
        std::fs::write(&path, contents).expect("write");
        path.display().to_string()
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[track_caller]
fn exits(output: &Output, code: i32) {
    assert_eq!(
        output.status.code(),
        Some(code),
        "stdout:\n{}\nstderr:\n{}",
        text(&output.stdout),
        text(&output.stderr)
    );
}

async fn orders_of(server: &TestServer, tenant: &Tenant) -> Vec<Value> {
    server
        .get(
            &format!("/api/v1/orgs/{}/orders?limit=200", tenant.org_id),
            &tenant.token,
        )
        .await
        .items()
        .clone()
}

async fn a_yaml_job_is_followed_to_its_end_and_its_outcome_is_the_exit_code(engine: Engine) {
    let server = TestServer::start_with(engine, |config| {
        config.agent_heartbeat_deadline_seconds = 2;
    })
    .await;
    let operator = server.operator().await;
    server.cluster(&operator, 0).await;
    let join = server
        .post(
            "/api/v1/admin/join-tokens",
            &operator.token,
            serde_json::json!({ "region": "r1" }),
        )
        .await;
    let state = std::env::temp_dir().join(format!("gantry-cli-agent-{}", Uuid::now_v7().simple()));
    let _agent = Agent(
        Command::new(agent_binary())
            .env("GANTRY_JOIN_TOKEN", join.str("/token"))
            .args([
                "--server",
                &server.base,
                "--name",
                "gpu-box",
                "--runtime",
                "process",
            ])
            .args([
                "--simulate-gpus",
                "4xH100",
                "--simulate-cpu-milli",
                "200000",
            ])
            .args(["--simulate-memory-mib", "2097152", "--interval-ms", "100"])
            .args(["--grace-seconds", "1"])
            .arg("--state-dir")
            .arg(&state)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the agent"),
    );
    let tenant = server.signup("pipeline").await;
    let desk = Desk::new(&server);
    desk.login(&tenant.email).await;
    let mode = std::fs::metadata(desk.config())
        .expect("config")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the config file is its owner's alone");

    // A job that writes to both streams, followed to its end: its stdout on
    // standard output, in order, its stderr on standard error, exit 0.
    let job = desk.write(
        "train.yaml",
        "name: train-small\ninstance_type: h100x1\n\
         command: 'for i in 1 2 3; do echo \"step $i of $EPOCHS\"; sleep 0.2; done; echo warned >&2'\n\
         env:\n  EPOCHS: \"3\"\nwalltime: 10m\n",
    );
    let followed = desk
        .run(&["job", "submit", &job, "--follow", "--timeout", "120s"])
        .await;
    exits(&followed, 0);
    let stdout = text(&followed.stdout);
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        ["step 1 of 3", "step 2 of 3", "step 3 of 3"],
        "{stdout}"
    );
    assert!(
        text(&followed.stderr).contains("warned"),
        "{}",
        text(&followed.stderr)
    );

    // Its output again, by name, after the end; and as JSON lines.
    let again = desk.run(&["logs", "train-small"]).await;
    exits(&again, 0);
    assert_eq!(text(&again.stdout).lines().count(), 3);
    let lines = desk
        .run(&["logs", "train-small", "-f", "--output", "json"])
        .await;
    exits(&lines, 0);
    let parsed: Vec<Value> = text(&lines.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON line each"))
        .collect();
    assert_eq!(parsed.len(), 4, "{parsed:?}");
    assert_eq!(parsed[3]["stream"], "stderr");

    // A job that fails: exit 3, and the message says how it ended. A job
    // that depends on it by name fails with it.
    let failing = desk.write(
        "fail.yaml",
        "name: doomed\ninstance_type: h100x1\ncommand: echo trying; exit 7\n",
    );
    let failed = desk
        .run(&["job", "submit", &failing, "--follow", "--timeout", "120s"])
        .await;
    exits(&failed, 3);
    assert_eq!(text(&failed.stdout).trim(), "trying");
    assert!(
        text(&failed.stderr).contains("doomed ended failed"),
        "{}",
        text(&failed.stderr)
    );
    let dependent = desk.write(
        "after.yaml",
        "instance_type: h100x1\ncommand: echo never\ndepends_on: [doomed]\n",
    );
    let waited = desk
        .run(&["job", "submit", &dependent, "--wait", "--timeout", "60s"])
        .await;
    exits(&waited, 3);

    // A bad file: the line and the field, exit 2, and nothing ordered.
    let before = orders_of(&server, &tenant).await.len();
    let bad = desk.write(
        "bad.yaml",
        "instance_type: h100x1\ncommand: echo hi\nnodez: 2\n",
    );
    let refused = desk.run(&["job", "submit", &bad]).await;
    exits(&refused, 2);
    let message = text(&refused.stderr);
    assert!(
        message.contains("line 3") && message.contains("nodez"),
        "{message}"
    );
    let typed = desk.write(
        "typed.yaml",
        "instance_type: h100x1\ncommand: echo hi\nretries:\n  max: lots\n",
    );
    let refused = desk.run(&["job", "submit", &typed]).await;
    exits(&refused, 2);
    let message = text(&refused.stderr);
    assert!(
        message.contains("line 4") && message.contains("retries.max"),
        "{message}"
    );
    // The server's own refusal of a file that parses: its problem, exit 1.
    let unknown = desk.write(
        "unknown.yaml",
        "instance_type: no-such-type\ncommand: echo hi\n",
    );
    let refused = desk.run(&["job", "submit", &unknown]).await;
    exits(&refused, 1);
    assert!(
        text(&refused.stderr).contains("no-such-type"),
        "{}",
        text(&refused.stderr)
    );
    assert_eq!(orders_of(&server, &tenant).await.len(), before);

    // Waiting longer than a --timeout: exit 4. Cancelled, the job's wait
    // ends with exit 3.
    let sleeper = desk.write(
        "sleep.yaml",
        "name: sleeper\ninstance_type: h100x1\ncommand: sleep 600\n",
    );
    exits(&desk.run(&["job", "submit", &sleeper]).await, 0);
    let waited = desk
        .run(&["order", "wait", "sleeper", "--timeout", "1s"])
        .await;
    exits(&waited, 4);
    assert!(
        text(&waited.stderr).contains("sleeper did not end within 1s"),
        "{}",
        text(&waited.stderr)
    );
    exits(&desk.run(&["order", "cancel", "sleeper"]).await, 0);
    let waited = desk
        .run(&["order", "wait", "sleeper", "--timeout", "60s"])
        .await;
    exits(&waited, 3);
    assert!(
        text(&waited.stderr).contains("sleeper ended cancelled"),
        "{}",
        text(&waited.stderr)
    );
    std::fs::remove_dir_all(state).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_and_operator_commands_read_what_the_api_says() {
    let server = TestServer::start_with(Engine::Sqlite, |config| {
        config.jwt_ttl_seconds = 2;
    })
    .await;
    let operator = server.operator().await;
    server.cluster(&operator, 2).await;
    let tenant = server.signup("tables").await;
    let desk = Desk::new(&server);

    // Not signed in: a clear error, exit 1; a missing argument: exit 2.
    let anonymous = desk.run(&["order", "list"]).await;
    exits(&anonymous, 1);
    assert!(
        text(&anonymous.stderr).contains("gantry-cli login"),
        "{}",
        text(&anonymous.stderr)
    );
    exits(&desk.run(&["order", "wait"]).await, 2);

    desk.login(&tenant.email).await;
    let catalog = desk.run(&["catalog"]).await;
    exits(&catalog, 0);
    let table = text(&catalog.stdout);
    assert!(
        table.contains("h100x8") && table.contains("16.00 on_demand"),
        "{table}"
    );

    let created = desk
        .run(&[
            "order",
            "create",
            "-t",
            "h100x1",
            "--name",
            "notebook",
            "--wait",
            "--timeout",
            "60s",
        ])
        .await;
    exits(&created, 0);
    assert!(
        text(&created.stdout).contains("running"),
        "{}",
        text(&created.stdout)
    );
    // An image from a registry the installation does not allow: the
    // server's refusal names the field, exit 1.
    let refused = desk
        .run(&[
            "order",
            "create",
            "-t",
            "h100x1",
            "--image",
            "registry.example/team/train:v3",
        ])
        .await;
    exits(&refused, 1);
    let message = text(&refused.stderr);
    assert!(
        message.contains("image") && message.contains("is not allowed"),
        "{message}"
    );
    // `ssh` runs the access command the order shows, with what follows
    // `--`; an `ssh` first on PATH records how it was called.
    let bin = desk.dir.join("bin");
    std::fs::create_dir_all(&bin).expect("bin");
    std::fs::write(bin.join("ssh"), "#!/bin/sh\necho \"ssh $*\"\n").expect("ssh");
    std::fs::set_permissions(bin.join("ssh"), std::fs::Permissions::from_mode(0o755))
        .expect("executable");
    let mut ssh = desk.command(&["ssh", "notebook", "--", "nvidia-smi", "-L"]);
    ssh.env(
        "PATH",
        format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        ),
    );
    let ssh = tokio::task::spawn_blocking(move || ssh.output().expect("ssh"))
        .await
        .expect("join");
    exits(&ssh, 0);
    let called = text(&ssh.stdout);
    assert!(
        called.starts_with("ssh root@") && called.trim_end().ends_with("nvidia-smi -L"),
        "{called}"
    );
    let listed = desk.run(&["order", "list"]).await;
    exits(&listed, 0);
    assert!(
        text(&listed.stdout).contains("notebook"),
        "{}",
        text(&listed.stdout)
    );

    // The access token lives 2 s: later commands refresh the session and
    // keep the new single-use refresh token.
    let refresh_token = |desk: &Desk| -> String {
        let config: Value =
            serde_json::from_slice(&std::fs::read(desk.config()).expect("config")).expect("JSON");
        config["credential"]["refresh_token"]
            .as_str()
            .expect("a session")
            .to_owned()
    };
    let first = refresh_token(&desk);
    tokio::time::sleep(Duration::from_secs(3)).await;
    exits(&desk.run(&["whoami"]).await, 0);
    let second = refresh_token(&desk);
    assert_ne!(first, second, "the refresh token was rotated and kept");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let shown = desk.run(&["order", "show", "notebook", "-o", "json"]).await;
    exits(&shown, 0);
    let shown: Value = serde_json::from_slice(&shown.stdout).expect("JSON");
    assert_eq!(shown["name"], "notebook");

    for args in [
        &["usage"][..],
        &["usage", "--by", "order"],
        &["invoices"],
        &["quota"],
    ] {
        exits(&desk.run(args).await, 0);
    }
    let usage = desk.run(&["usage", "-o", "json"]).await;
    let usage: Value = serde_json::from_slice(&usage.stdout).expect("JSON");
    assert!(usage["spend"]["currency"].is_string(), "{usage:#}");

    // A tenant is no operator.
    let refused = desk.run(&["nodes"]).await;
    exits(&refused, 1);
    assert!(
        text(&refused.stderr).contains("403"),
        "{}",
        text(&refused.stderr)
    );

    // An API key from the environment, as a pipeline would use one.
    // Its own access token has expired by now: a new one makes the key.
    let tenant = Tenant {
        token: server
            .login(&tenant.email, PASSWORD)
            .await
            .str("/access_token"),
        ..tenant
    };
    let (_, secret) = server.api_key(&tenant, "member").await;
    let mut keyed = Command::new(CLI);
    keyed
        .env_clear()
        .env("GANTRY_SERVER", &server.base)
        .env("GANTRY_API_KEY", &secret)
        .env("GANTRY_CONFIG", desk.dir.join("unused.json"))
        .args(["order", "list", "-o", "json"]);
    let keyed = tokio::task::spawn_blocking(move || keyed.output().expect("run"))
        .await
        .expect("join");
    exits(&keyed, 0);
    let page: Value = serde_json::from_slice(&keyed.stdout).expect("JSON");
    assert_eq!(page["items"][0]["name"], "notebook");

    // The operator: the fleet, a cordon and its undoing, a drain, what-if.
    let ops = Desk::new(&server);
    ops.login(&operator.email).await;
    let nodes = ops.run(&["nodes"]).await;
    exits(&nodes, 0);
    let table = text(&nodes.stdout);
    assert!(
        table.contains("n1") && table.contains("n2") && table.contains("8 × H100"),
        "{table}"
    );
    let cordoned = ops
        .run(&["cordon", "n2", "--reason", "fan swap & reseat"])
        .await;
    exits(&cordoned, 0);
    assert!(
        text(&cordoned.stdout).contains("cordoned")
            && text(&cordoned.stdout).contains("fan swap & reseat"),
        "{}",
        text(&cordoned.stdout)
    );
    let uncordoned = ops.run(&["uncordon", "n2", "-o", "json"]).await;
    exits(&uncordoned, 0);
    let node: Value = serde_json::from_slice(&uncordoned.stdout).expect("JSON");
    assert_eq!(node["state"], "ready");
    exits(&ops.run(&["drain", "n2"]).await, 0);
    let unknown = ops.run(&["drain", "n9"]).await;
    exits(&unknown, 2);
    let what_if = ops.run(&["what-if", "--add-nodes", "h100x8:r1:2"]).await;
    exits(&what_if, 0);
    assert!(
        text(&what_if.stdout).contains("Starts"),
        "{}",
        text(&what_if.stdout)
    );
    let malformed = ops.run(&["what-if", "--add-nodes", "h100x8"]).await;
    exits(&malformed, 2);

    // Signing out ends the session on the server too.
    let before = refresh_token(&desk);
    exits(&desk.run(&["logout"]).await, 0);
    assert!(!desk.config().exists());
    let reused = server
        .http
        .post(server.url("/api/v1/auth/refresh"))
        .header("cookie", format!("gantry_refresh={before}"))
        .send()
        .await
        .expect("refresh");
    assert_eq!(reused.status(), reqwest::StatusCode::UNAUTHORIZED);

    let completions = desk.run(&["completions", "bash"]).await;
    exits(&completions, 0);
    assert!(text(&completions.stdout).contains("gantry-cli"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volumes_are_made_attached_grown_and_removed_by_name() {
    let server = TestServer::start(Engine::Sqlite).await;
    let operator = server.operator().await;
    server.cluster(&operator, 0).await;
    // A node the test plays, with room for volumes.
    let node = server.join_agent(&operator, "r1", "gpu-box", 8).await;
    server
        .post(
            "/api/v1/agent/heartbeat",
            &node,
            serde_json::json!({ "gpus": [], "volume_free_bytes": 100_i64 << 30, "volumes": [] }),
        )
        .await
        .expect(reqwest::StatusCode::OK);
    let tenant = server.signup("storage").await;
    let desk = Desk::new(&server);
    desk.login(&tenant.email).await;

    let created = desk
        .run(&[
            "volume",
            "create",
            "ckpt",
            "--region",
            "r1",
            "--size-gib",
            "5",
        ])
        .await;
    exits(&created, 0);
    assert!(
        text(&created.stdout).contains("gpu-box"),
        "{}",
        text(&created.stdout)
    );
    let listed = desk.run(&["volume", "list", "-o", "json"]).await;
    exits(&listed, 0);
    let volumes: Value = serde_json::from_slice(&listed.stdout).expect("json");
    assert_eq!(volumes[0]["name"], "ckpt");
    assert_eq!(volumes[0]["size_gib"], 5);

    // Attached by name, from the command line and from a job file.
    exits(
        &desk
            .run(&[
                "order",
                "create",
                "-t",
                "h100x1",
                "--name",
                "nb",
                "--volume",
                "ckpt:/ckpt",
            ])
            .await,
        0,
    );
    let file = desk.write(
        "job.yaml",
        "instance_type: h100x1\ncommand: ls /data\nvolumes:\n  - { volume: ckpt, path: /data, read_only: true }\n",
    );
    exits(&desk.run(&["job", "submit", &file]).await, 0);
    let orders = orders_of(&server, &tenant).await;
    let attached: Vec<&Value> = orders.iter().map(|o| &o["volumes"][0]).collect();
    assert!(
        attached
            .iter()
            .any(|v| v["mount_path"] == "/ckpt" && v["read_only"] == false),
        "{orders:?}"
    );
    assert!(
        attached
            .iter()
            .any(|v| v["mount_path"] == "/data" && v["read_only"] == true),
        "{orders:?}"
    );
    let bad = desk
        .run(&["order", "create", "-t", "h100x1", "--volume", "ckpt"])
        .await;
    exits(&bad, 2);
    let unknown = desk
        .run(&["order", "create", "-t", "h100x1", "--volume", "nope:/x"])
        .await;
    exits(&unknown, 2);
    assert!(
        text(&unknown.stderr).contains("nope"),
        "{}",
        text(&unknown.stderr)
    );

    // Grown; not removed while orders attach it, then removed.
    let grown = desk
        .run(&["volume", "grow", "ckpt", "--size-gib", "8"])
        .await;
    exits(&grown, 0);
    assert!(
        text(&grown.stdout).contains("8 GiB"),
        "{}",
        text(&grown.stdout)
    );
    let busy = desk.run(&["volume", "rm", "ckpt"]).await;
    exits(&busy, 1);
    assert!(
        text(&busy.stderr).contains("attached"),
        "{}",
        text(&busy.stderr)
    );
    for order in &orders {
        exits(
            &desk
                .run(&["order", "cancel", order["id"].as_str().unwrap_or_default()])
                .await,
            0,
        );
    }
    let removed = desk.run(&["volume", "rm", "ckpt"]).await;
    exits(&removed, 0);
    let gone = desk.run(&["volume", "list", "-o", "json"]).await;
    let left: Value = serde_json::from_slice(&gone.stdout).expect("json");
    assert_eq!(
        left[0]["status"], "deleting",
        "its node erases it, and the played node never reports: {left}"
    );
}
