//! A webhook receiver for tests: `receiver.py` in its own process, with
//! the Standard Webhooks package from PyPI checking every signature.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;
use uuid::Uuid;

/// The workspace's root, found from the including crate's directory.
fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .find(|dir| dir.join("Cargo.lock").exists())
        .expect("the workspace root")
}

/// The `standardwebhooks` package in a virtual environment under `target/`.
fn python() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| {
        let venv = workspace().join("target/webhooks-venv");
        let pinned = venv.join(format!("pinned-{PACKAGE}"));
        if !pinned.exists() {
            let made = Command::new("python3")
                .args(["-m", "venv", "--clear"])
                .arg(&venv)
                .status()
                .expect("python3 -m venv");
            assert!(made.success(), "could not make {}", venv.display());
            let installed = Command::new(venv.join("bin/pip"))
                .args(["install", "--quiet", "--disable-pip-version-check", PACKAGE])
                .status()
                .expect("pip");
            assert!(installed.success(), "could not install {PACKAGE} from PyPI");
            std::fs::write(&pinned, "").expect("mark the environment");
        }
        venv.join("bin/python")
    })
}

const PACKAGE: &str = "standardwebhooks==1.3.0";

/// A receiver process and its log of requests.
pub struct Receiver {
    child: Child,
    pub port: u16,
    log: PathBuf,
}

impl Receiver {
    pub fn start(options: &[&str]) -> Self {
        let log = std::env::temp_dir().join(format!("gantry-webhooks-{}.jsonl", Uuid::new_v4()));
        let script = workspace().join("tests/support/receiver.py");
        let mut child = Command::new(python())
            .arg(script)
            .arg(&log)
            .args(options)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the receiver");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the receiver's port");
        let port = line.trim().parse().expect("a port");
        Self { child, port, log }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hooks", self.port)
    }

    pub async fn set_secret(&self, secret: &str) {
        reqwest::Client::new()
            .post(format!("http://127.0.0.1:{}/control/secret", self.port))
            .body(secret.to_owned())
            .send()
            .await
            .expect("the receiver takes the secret")
            .error_for_status()
            .expect("accepted");
    }

    pub fn requests(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).expect("a JSON line"))
            .collect()
    }

    /// Waits up to 30 s for the requests to satisfy `done`.
    pub async fn wait(&self, what: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        for _ in 0..300 {
            let requests = self.requests();
            if done(&requests) {
                return requests;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "the receiver never saw {what}; it saw {:#?}",
            self.requests()
        );
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
        std::fs::remove_file(&self.log).ok();
    }
}
