//! Workload images: OCI references pulled with podman into the agent's own
//! image store, in the background, while the workload waits. Layers are
//! cached by digest, but every start asks the registry again with the
//! order's own credentials, so an image one organization pulled is never
//! run by another that may not pull it. A pulled image is used from its
//! layers as the store unpacked them: each workload's root stacks them
//! under a writable layer of its own (see `root`).

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use base64::Engine;
use serde::Deserialize;
use uuid::Uuid;

/// Registry credentials an assignment carries for its organization.
#[derive(Clone, PartialEq, Eq, Deserialize)]
pub struct Login {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Login")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// A pulled image: what a workload's root and environment are made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    pub reference: String,
    /// The image id (its configuration's digest).
    pub id: String,
    /// Bytes of all its layers, unpacked.
    pub size: u64,
    /// Its layers' directories, topmost first.
    pub layers: Vec<PathBuf>,
    pub env: Vec<(String, String)>,
    pub working_dir: Option<String>,
    /// Run with the workload's program line as its arguments.
    pub entrypoint: Vec<String>,
}

/// How many progress lines of one pull are kept for the workload's log.
const PROGRESS_LINES: usize = 200;

#[derive(Default)]
struct PullState {
    lines: Vec<String>,
    shown: usize,
    outcome: Option<Result<Arc<Image>, String>>,
}

/// One pull under way (or done), for one workload.
#[derive(Clone, Default)]
pub struct Pull(Arc<Mutex<PullState>>);

impl Pull {
    /// Progress lines not taken before.
    pub fn progress(&self) -> Vec<String> {
        let Ok(mut state) = self.0.lock() else {
            return Vec::new();
        };
        let new = state.lines[state.shown..].to_vec();
        state.shown = state.lines.len();
        new
    }

    /// The image, or why it could not be pulled, once the pull ended.
    pub fn outcome(&self) -> Option<Result<Arc<Image>, String>> {
        self.0.lock().ok().and_then(|s| s.outcome.clone())
    }

    fn line(&self, line: String) {
        if let Ok(mut state) = self.0.lock()
            && state.lines.len() < PROGRESS_LINES
        {
            state.lines.push(line);
        }
    }

    fn finish(&self, outcome: Result<Arc<Image>, String>) {
        if let Ok(mut state) = self.0.lock() {
            state.outcome = Some(outcome);
        }
    }
}

/// The agent's image store: podman with a storage of the agent's own.
#[derive(Debug, Clone)]
pub struct Images {
    podman: PathBuf,
    root: PathBuf,
    runroot: PathBuf,
    auth_dir: PathBuf,
    /// Registries reached over plain HTTP or with unchecked certificates.
    insecure: Vec<String>,
}

impl Images {
    /// Finds podman; the store lives in `dir` (layers, by digest) and
    /// `runroot` (its locks, on a file system that a reboot empties).
    pub fn new(
        dir: &Path,
        runroot: &Path,
        auth_dir: &Path,
        insecure: Vec<String>,
    ) -> Result<Self, String> {
        let podman = crate::runtime::find_program("podman").ok_or(
            "images need podman to pull them: install the Debian package `podman` \
             (or start the agent with --runtime process on a trusted single-tenant node)",
        )?;
        for path in [dir, runroot, auth_dir] {
            std::fs::create_dir_all(path).map_err(|e| format!("making {}: {e}", path.display()))?;
        }
        Ok(Self {
            podman,
            root: dir.join("storage"),
            runroot: runroot.to_owned(),
            auth_dir: auth_dir.to_owned(),
            insecure,
        })
    }

    /// podman with this store, and the options every call of the agent's
    /// takes, as a program line.
    pub fn podman_line(&self) -> Vec<OsString> {
        let mut line: Vec<OsString> = vec![
            self.podman.clone().into(),
            "--root".into(),
            self.root.clone().into(),
            "--runroot".into(),
            self.runroot.clone().into(),
        ];
        line.extend(
            [
                "--storage-driver",
                "overlay",
                "--cgroup-manager",
                "cgroupfs",
                "--events-backend",
                "file",
            ]
            .map(OsString::from),
        );
        line
    }

    /// [`Self::podman_line`] as a command.
    pub fn podman(&self) -> Command {
        let line = self.podman_line();
        let mut command = Command::new(&line[0]);
        command.args(&line[1..]).stdin(Stdio::null());
        command
    }

    /// Starts pulling `reference` for workload `id` in the background.
    pub fn pull(&self, id: Uuid, reference: &str, login: Option<&Login>) -> Pull {
        let pull = Pull::default();
        let (images, reference, login, handle) = (
            self.clone(),
            reference.to_owned(),
            login.cloned(),
            pull.clone(),
        );
        std::thread::spawn(move || {
            let outcome = images.fetch(id, &reference, login.as_ref(), &handle);
            handle.finish(outcome.map(Arc::new));
        });
        pull
    }

    fn fetch(
        &self,
        id: Uuid,
        reference: &str,
        login: Option<&Login>,
        pull: &Pull,
    ) -> Result<Image, String> {
        let auth_file = self.auth_dir.join(format!("{id}.json"));
        let mut command = self.podman();
        command.arg("pull").arg("--quiet=false");
        if self.insecure.iter().any(|r| r == registry(reference)) {
            command.arg("--tls-verify=false");
        }
        if let Some(login) = login {
            write_auth_file(&auth_file, registry(reference), login)
                .map_err(|e| format!("image pull failed: writing its credentials: {e}"))?;
            command.arg("--authfile").arg(&auth_file);
        }
        command
            .arg(reference)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        pull.line(format!("pulling {reference}"));
        let pulled = run_reporting(command, pull);
        std::fs::remove_file(&auth_file).ok();
        let said = pulled.map_err(|e| format!("image pull failed: running podman: {e}"))?;
        if let Some(error) = said {
            return Err(format!("image pull failed: {}", explain(&error, reference)));
        }
        let inspected = self
            .podman()
            .args(["image", "inspect", "--format", "json", reference])
            .stderr(Stdio::null())
            .output()
            .map_err(|e| format!("image pull failed: running podman: {e}"))?;
        let image = parse_inspect(reference, &inspected.stdout)?;
        pull.line(format!(
            "pulled {reference} ({}, {:.1} MiB)",
            image.id.get(..19).unwrap_or(&image.id),
            image.size as f64 / 1_048_576.0
        ));
        Ok(image)
    }
}

/// Runs `command`, passing its stderr lines on as progress; answers the
/// error it ended with, if it failed.
fn run_reporting(mut command: Command, pull: &Pull) -> std::io::Result<Option<String>> {
    let mut child = command.spawn()?;
    let mut last_error = None;
    if let Some(stderr) = child.stderr.take() {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let line = line.trim().to_owned();
            if line.is_empty() {
                continue;
            }
            if let Some(error) = line.strip_prefix("Error: ") {
                last_error = Some(error.to_owned());
            }
            pull.line(line);
        }
    }
    let status = child.wait()?;
    Ok((!status.success()).then(|| last_error.unwrap_or_else(|| format!("podman {status}"))))
}

/// The registry a reference names: its first part when that is a host
/// (it has a dot or a port, or is `localhost`), Docker Hub otherwise.
pub fn registry(reference: &str) -> &str {
    match reference.split_once('/') {
        Some((first, _)) if first.contains(['.', ':']) || first == "localhost" => first,
        _ => "docker.io",
    }
}

/// An auth file as podman reads it, for the agent's user alone.
fn write_auth_file(path: &Path, registry: &str, login: &Login) -> std::io::Result<()> {
    let token = base64::engine::general_purpose::STANDARD
        .encode(format!("{}:{}", login.username, login.password));
    let json = serde_json::json!({ "auths": { registry: { "auth": token } } });
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    std::io::Write::write_all(&mut file, json.to_string().as_bytes())
}

/// A pull failure in words a tenant can act on.
fn explain(error: &str, reference: &str) -> String {
    let lower = error.to_lowercase();
    let host = registry(reference);
    if lower.contains("manifest unknown") || lower.contains("not found: manifest") {
        format!("manifest unknown for {reference}")
    } else if lower.contains("unauthorized")
        || lower.contains("authentication required")
        || lower.contains("denied")
    {
        format!(
            "{host} refused access to {reference}: the organization's credentials for {host} \
             are missing or wrong"
        )
    } else if lower.contains("no space left on device") {
        format!("{reference} does not fit in this node's image store")
    } else if lower.contains("connection refused")
        || lower.contains("no such host")
        || lower.contains("i/o timeout")
    {
        format!("cannot reach the registry {host} for {reference}")
    } else {
        error.to_owned()
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Inspected {
    id: String,
    #[serde(default)]
    size: u64,
    #[serde(default)]
    config: Option<InspectedConfig>,
    graph_driver: GraphDriver,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct InspectedConfig {
    #[serde(default)]
    env: Option<Vec<String>>,
    #[serde(default)]
    working_dir: Option<String>,
    #[serde(default)]
    entrypoint: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct GraphDriver {
    name: String,
    #[serde(default)]
    data: HashMap<String, String>,
}

/// The image from `podman image inspect --format json`.
fn parse_inspect(reference: &str, json: &[u8]) -> Result<Image, String> {
    let fail = |why: String| format!("image pull failed: inspecting {reference}: {why}");
    let mut all: Vec<Inspected> = serde_json::from_slice(json).map_err(|e| fail(e.to_string()))?;
    let inspected = all
        .pop()
        .ok_or_else(|| fail("podman found no image".into()))?;
    if inspected.graph_driver.name != "overlay" {
        return Err(fail(format!(
            "the store keeps layers with the {} driver; workloads need overlay",
            inspected.graph_driver.name
        )));
    }
    let data = &inspected.graph_driver.data;
    let mut layers: Vec<PathBuf> = data
        .get("UpperDir")
        .map(PathBuf::from)
        .into_iter()
        .collect();
    layers.extend(
        data.get("LowerDir")
            .into_iter()
            .flat_map(|l| l.split(':'))
            .filter(|l| !l.is_empty())
            .map(PathBuf::from),
    );
    if layers.is_empty() {
        return Err(fail("it has no layers".into()));
    }
    let config = inspected.config.unwrap_or_default();
    Ok(Image {
        reference: reference.to_owned(),
        id: inspected.id,
        size: inspected.size,
        layers,
        env: config
            .env
            .unwrap_or_default()
            .iter()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        working_dir: config.working_dir.filter(|d| d.starts_with('/')),
        entrypoint: config.entrypoint.unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_is_the_first_part_when_it_is_a_host() {
        assert_eq!(registry("nvcr.io/nvidia/pytorch:24.05-py3"), "nvcr.io");
        assert_eq!(registry("127.0.0.1:5000/team/train:v3"), "127.0.0.1:5000");
        assert_eq!(registry("localhost/train"), "localhost");
        assert_eq!(registry("library/debian"), "docker.io");
        assert_eq!(registry("debian"), "docker.io");
    }

    #[test]
    fn an_inspected_image_gives_its_layers_topmost_first_and_its_config() {
        let json = br#"[{"Id":"sha256:abc","Size":42,
            "Config":{"Env":["PATH=/opt/conda/bin:/usr/bin","EMPTY="],"WorkingDir":"/workspace",
                      "Entrypoint":["/opt/nvidia/nvidia_entrypoint.sh"]},
            "GraphDriver":{"Name":"overlay","Data":{"UpperDir":"/s/3/diff","LowerDir":"/s/2/diff:/s/1/diff"}}}]"#;
        let image = parse_inspect("nvcr.io/nvidia/pytorch:24.05-py3", json).expect("parsed");
        assert_eq!(
            image.layers,
            ["/s/3/diff", "/s/2/diff", "/s/1/diff"].map(PathBuf::from)
        );
        assert_eq!(
            image.env,
            vec![
                ("PATH".to_owned(), "/opt/conda/bin:/usr/bin".to_owned()),
                ("EMPTY".to_owned(), String::new())
            ]
        );
        assert_eq!(image.working_dir.as_deref(), Some("/workspace"));
        assert_eq!(image.entrypoint, ["/opt/nvidia/nvidia_entrypoint.sh"]);
        let vfs = br#"[{"Id":"x","GraphDriver":{"Name":"vfs","Data":{}}}]"#;
        assert!(
            parse_inspect("r/x", vfs)
                .expect_err("refused")
                .contains("vfs driver")
        );
    }

    #[test]
    fn failures_are_said_in_words() {
        let reference = "registry.example/team/train:v3";
        assert_eq!(
            explain(
                "initializing source docker://registry.example/team/train:v3: reading manifest v3 \
                 in registry.example/team/train: manifest unknown",
                reference
            ),
            "manifest unknown for registry.example/team/train:v3"
        );
        assert!(
            explain(
                "reading manifest: unauthorized: authentication required",
                reference
            )
            .starts_with("registry.example refused access")
        );
    }
}
