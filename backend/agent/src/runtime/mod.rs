//! How a workload is isolated on this node. The supervisor owns a
//! workload's lifecycle (its process group, signals, exit code, output);
//! a runtime owns what the workload can see and use, and turns an
//! assignment into the program line the supervisor starts.
//!
//! - `sandbox`: bubblewrap namespaces, a user of its own, only its GPUs'
//!   device nodes, a private scratch directory and cgroup limits.
//! - `oci`: the same guarantees through podman with GPUs as CDI devices.
//! - `process`: a plain process of the agent's user, for trusted
//!   single-tenant nodes only.

pub mod oci;
pub mod process;
pub mod sandbox;

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::PathBuf;

use serde::Serialize;
use uuid::Uuid;

use crate::cgroup::Limits;

/// The runtimes an agent can be started with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum RuntimeKind {
    Sandbox,
    Oci,
    Process,
}

impl RuntimeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sandbox => "sandbox",
            Self::Oci => "oci",
            Self::Process => "process",
        }
    }
}

/// A catalog image as an assignment names it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct Image {
    pub name: String,
    pub reference: String,
}

/// A port the order exposes and the node port it is reached on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct PortMapping {
    pub port: u16,
    pub node_port: u16,
}

/// What the supervisor asks a runtime to start.
#[derive(Debug)]
pub struct Launch<'a> {
    pub id: Uuid,
    pub gpus: &'a [u32],
    /// The MIG instances it holds on those GPUs, by UUID.
    pub mig_devices: &'a [String],
    /// The order's variables with Gantry's own.
    pub env: &'a HashMap<String, String>,
    /// Run by `sh -c`.
    pub command: &'a str,
    pub working_dir: Option<&'a str>,
    pub limits: Limits,
    pub image: Option<&'a Image>,
    /// The user it runs as (sandbox and oci), from the agent's range.
    pub uid: u32,
    /// Where an instance's SSH server listens, when it has one.
    pub ssh_port: Option<u16>,
    /// The public keys an instance admits.
    pub ssh_keys: &'a [String],
    pub ports: &'a [PortMapping],
    /// Whether it may have a network of its own: work on one node only,
    /// since a gang's nodes reach each other on ports of their choosing.
    pub private_network: bool,
}

/// A workload ready to start.
pub struct Prepared {
    /// Program and arguments; the supervisor's exit-code wrapper runs them.
    pub argv: Vec<OsString>,
    /// The whole environment: nothing of the agent's own is passed on.
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    /// `cgroup.procs` files the workload's first process joins.
    pub cgroup_procs: Vec<PathBuf>,
    pub access: Access,
    /// Descriptors its first process gets, at these numbers.
    pub fds: Vec<(std::os::fd::OwnedFd, i32)>,
    /// Its own network, brought up once it runs.
    pub network: Option<crate::network::PrivateNetwork>,
}

/// How a tenant reaches the workload on this node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Access {
    pub ssh: Option<SshAccess>,
    pub ports: Vec<PortMapping>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SshAccess {
    pub user: String,
    pub port: u16,
    pub host_key_fingerprint: String,
}

pub trait Runtime: Send {
    fn kind(&self) -> RuntimeKind;

    /// Whether instances get an SSH server.
    fn offers_ssh(&self) -> bool;

    /// Sets up what the workload needs and answers how to start it, or why
    /// this node cannot run it.
    fn prepare(&self, launch: &Launch<'_>) -> Result<Prepared, String>;

    /// Asks the workload to stop (SIGTERM to the processes of its user,
    /// `uid`); false when the runtime leaves that to the process group.
    /// Signalling only the workload's own processes keeps the runtime's
    /// helpers (which die of SIGTERM) alive through the grace period.
    fn stop(&self, id: Uuid, uid: u32) -> bool;

    /// Replaces the keys a running instance admits.
    fn authorize(&self, id: Uuid, keys: &[String]);

    /// Why the workload ended, when the runtime knows better than its exit
    /// code (the kernel killed it for memory).
    fn ending(&self, id: Uuid) -> Option<String>;

    /// Removes what is left of an ended workload: stray processes, scratch,
    /// cgroups. False while something is still going away (asked again).
    fn clean(&self, id: Uuid) -> bool;
}

/// Makes a workload's private scratch directory (0700), owned by `owner`
/// when the workload runs as a user of its own.
pub fn make_scratch(path: &std::path::Path, owner: Option<u32>) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path)
        .and_then(|()| match owner {
            Some(uid) => std::os::unix::fs::chown(path, Some(uid), Some(uid)),
            None => Ok(()),
        })
        .and_then(|()| std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)))
        .map_err(|e| format!("could not make the scratch directory: {e}"))
}

/// `PATH` and friends for an environment that starts empty.
pub fn base_env(home: &str) -> Vec<(String, String)> {
    vec![
        (
            "PATH".to_owned(),
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_owned(),
        ),
        ("HOME".to_owned(), home.to_owned()),
        ("LANG".to_owned(), "C.UTF-8".to_owned()),
    ]
}

/// The environment a workload starts with: the base, then the order's.
pub fn workload_env(home: &str, env: &HashMap<String, String>) -> Vec<(String, String)> {
    let mut all = base_env(home);
    let mut own: Vec<(String, String)> = env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    own.sort();
    all.retain(|(k, _)| !env.contains_key(k));
    all.extend(own);
    all
}

/// The program line that runs a workload's `command` (by `sh -c`), with
/// an instance's SSH server beside it (in its process group, so that it stops with it) when
/// it has one.
pub fn program_line(command: &str, with_ssh: bool) -> Vec<std::ffi::OsString> {
    let line: Vec<&str> = if with_ssh {
        vec![
            "sh",
            "-c",
            "/usr/sbin/sshd -D -f /run/gantry-ssh/sshd_config & exec sh -c \"$1\"",
            "gantry-instance",
            command,
        ]
    } else {
        vec!["sh", "-c", command]
    };
    line.into_iter().map(Into::into).collect()
}

/// Where a program is on `PATH`, if anywhere.
pub fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/sbin:/usr/bin:/sbin:/bin".into());
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}
