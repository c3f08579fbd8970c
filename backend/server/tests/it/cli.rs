//! The `gantry` binary as an operator runs it: migrate, create an operator,
//! print the spec, serve, and stop cleanly on SIGTERM.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BINARY: &str = env!("CARGO_BIN_EXE_gantry");

struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        let dir =
            std::env::temp_dir().join(format!("gantry-cli-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.0).ok();
    }
}

fn gantry(data_dir: &Path) -> Command {
    let mut command = Command::new(BINARY);
    command
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("GANTRY_DATA_DIR", data_dir);
    command
}

fn http_get(port: u16, path: &str) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    Some(response)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

#[test]
fn migrate_then_create_and_promote_an_operator() {
    let dir = TempDir::new();
    let migrate = gantry(&dir.0).arg("migrate").output().expect("run migrate");
    assert!(
        migrate.status.success(),
        "{}",
        String::from_utf8_lossy(&migrate.stderr)
    );
    assert!(
        dir.0.join("gantry.db").exists(),
        "the default SQLite file is created in the data dir"
    );

    let create = gantry(&dir.0)
        .args([
            "admin",
            "create-operator",
            "--email",
            "Ops@Example.com",
            "--password",
            "a long operator passphrase",
        ])
        .output()
        .expect("run create-operator");
    assert!(
        create.status.success(),
        "{}",
        String::from_utf8_lossy(&create.stderr)
    );
    assert!(String::from_utf8_lossy(&create.stdout).starts_with("created operator"));

    let again = gantry(&dir.0)
        .args([
            "admin",
            "create-operator",
            "--email",
            "ops@example.com",
            "--password",
            "unused here",
        ])
        .output()
        .expect("run create-operator");
    assert!(again.status.success());
    assert!(String::from_utf8_lossy(&again.stdout).starts_with("promoted"));

    let weak = gantry(&dir.0)
        .args([
            "admin",
            "create-operator",
            "--email",
            "new@example.com",
            "--password",
            "short",
        ])
        .output()
        .expect("run create-operator");
    assert!(!weak.status.success(), "a weak password is refused");
}

#[test]
fn openapi_prints_the_committed_document() {
    let dir = TempDir::new();
    let output = gantry(&dir.0).arg("openapi").output().expect("run openapi");
    assert!(output.status.success());
    let committed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../openapi/openapi.json"
    ))
    .expect("committed spec");
    assert_eq!(String::from_utf8_lossy(&output.stdout), committed);
}

#[test]
fn a_bad_configuration_file_is_refused() {
    let dir = TempDir::new();
    let file = dir.0.join("gantry.toml");
    std::fs::write(&file, "listen = \"not an address\"\n").expect("write");
    let output = gantry(&dir.0)
        .arg("--config")
        .arg(&file)
        .arg("migrate")
        .output()
        .expect("run");
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("invalid configuration"));
}

#[cfg(unix)]
#[test]
fn serve_logs_json_answers_and_stops_on_sigterm() {
    let dir = TempDir::new();
    let port = free_port();
    let mut child = gantry(&dir.0)
        .args(["--log-format", "json", "serve"])
        .env("GANTRY_LISTEN", format!("127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn serve");

    let started = Instant::now();
    let ready = loop {
        if let Some(response) = http_get(port, "/readyz") {
            break response;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the server did not come up"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");
    assert!(
        dir.0.join("jwt-secret").exists(),
        "a signing secret is generated on first start"
    );

    let pid = child.id().to_string();
    let killed = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the server did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "a graceful stop exits 0");

    let mut logs = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut logs)
        .expect("logs");
    let lines: Vec<serde_json::Value> = logs
        .lines()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|_| panic!("a JSON log line: {line}"))
        })
        .collect();
    assert!(lines.iter().any(|l| l["message"] == "serving"));
    assert!(lines.iter().any(|l| l["message"] == "stopped"));
}
