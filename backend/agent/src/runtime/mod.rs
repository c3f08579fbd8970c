//! How a workload is isolated on this node. The supervisor owns a
//! workload's lifecycle (its process group, signals, exit code, output);
//! a runtime owns what the workload can see and use, and turns an
//! assignment into the program line the supervisor starts.
//!
//! - `sandbox`: bubblewrap namespaces in a user namespace of its own (root
//!   inside, an id range of its own outside), its image as a writable
//!   root on a disk of its size, only its GPUs' device nodes, cgroup
//!   limits; an SSH server beside instances.
//! - `oci`: the same root, user namespace, limits and SSH server, run by
//!   podman, with GPUs as CDI devices.
//! - `vm`: a virtual machine per instance (QEMU with KVM), its QEMU
//!   fenced as a sandbox's workload is.
//! - `process`: a plain process of the agent's user, for trusted
//!   single-tenant nodes only.

pub mod oci;
pub mod process;
pub mod sandbox;
pub mod vm;

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::PathBuf;

use serde::Serialize;
use uuid::Uuid;

use crate::cgroup::Limits;
use crate::images::{Image, Login};

/// The runtimes an agent can be started with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum RuntimeKind {
    Sandbox,
    Oci,
    Vm,
    Process,
}

impl RuntimeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sandbox => "sandbox",
            Self::Oci => "oci",
            Self::Vm => "vm",
            Self::Process => "process",
        }
    }
}

/// The image an assignment names.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct AssignedImage {
    /// The catalog name, when it is a catalog image.
    #[serde(default)]
    pub name: Option<String>,
    /// The OCI reference the node pulls.
    pub reference: String,
    /// The organization's credentials for its registry, when it keeps some.
    #[serde(default)]
    pub login: Option<Login>,
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
    /// The CPUs it runs on, in the kernel's list form (`0,1,5`).
    pub cpus: &'a str,
    /// Bytes of its disk (sandbox and oci).
    pub disk: u64,
    /// Its pulled image (sandbox and oci).
    pub image: Option<&'a Image>,
    /// The catalog name of the image it asked for, if any (vm: the disk
    /// of that name on the node).
    pub image_name: Option<&'a str>,
    /// The first of its ids on the node, its root inside (sandbox and
    /// oci): a range of its own from the agent's.
    pub uid: u32,
    /// Where an instance's SSH server listens, when it has one.
    pub ssh_port: Option<u16>,
    /// The public keys an instance admits.
    pub ssh_keys: &'a [String],
    pub ports: &'a [PortMapping],
    /// Whether it may have a network of its own: work on one node only,
    /// since a gang's nodes reach each other on ports of their choosing.
    pub private_network: bool,
    pub hostname: &'a str,
    /// Whether its GPUs are its alone (whole GPUs, no MIG instance, no
    /// share): with all of the node's, it gets the node's RDMA devices.
    pub whole_gpus: bool,
    /// Its `/etc/hosts` where it is on its organization's private network.
    pub hosts: Option<&'a str>,
    /// The volumes it sees (sandbox and oci), outer paths first.
    pub volumes: &'a [crate::volumes::VolumeMount],
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
    /// How to find a process inside it once it runs, when something must
    /// join it (its network, its SSH server).
    pub inside: Option<Inside>,
    /// Its SSH server, started beside it once it runs.
    pub ssh: Option<crate::ssh::Server>,
}

/// Where a workload's first process inside its namespaces is told.
pub enum Inside {
    /// bubblewrap's info pipe (read end) says it.
    Info(std::os::fd::OwnedFd),
    /// The runtime answers it (`Runtime::inside`) once it runs.
    Runtime,
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

    /// Asks the workload to stop (SIGTERM to its own processes); false
    /// when the runtime leaves that to the process group. Signalling only
    /// the workload's own processes keeps the runtime's helpers (which die
    /// of SIGTERM) alive through the grace period.
    fn stop(&self, id: Uuid) -> bool;

    /// How long a started workload may take to answer on SSH before it
    /// counts as failed to boot; None where it is up once started.
    fn boot_deadline(&self) -> Option<std::time::Duration> {
        None
    }

    /// Reconnects to a workload an earlier run of the agent started.
    fn adopted(&self, _id: Uuid) {}

    /// A process inside a running workload, where the runtime knows it
    /// (`Inside::Runtime`).
    fn inside(&self, _id: Uuid) -> Option<u32> {
        None
    }

    /// Replaces the keys a running instance admits.
    fn authorize(&self, id: Uuid, keys: &[String]);

    /// Why the workload ended, when the runtime knows better than its exit
    /// code (the kernel killed it for memory).
    fn ending(&self, id: Uuid) -> Option<String>;

    /// Rewrites a running workload's `/etc/hosts` (one on a private
    /// network, whose workloads came or went).
    fn update_hosts(&self, _id: Uuid, _hosts: &str) {}

    /// Removes what is left of an ended workload: stray processes, scratch,
    /// cgroups. False while something is still going away (asked again).
    fn clean(&self, id: Uuid) -> bool;
}

/// Makes a workload's private scratch directory (0700).
pub fn make_scratch(path: &std::path::Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(path)
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

/// The environment a workload starts with: the base, then its image's
/// variables, then the order's (each replacing what came before).
pub fn workload_env(
    home: &str,
    image: &[(String, String)],
    env: &HashMap<String, String>,
) -> Vec<(String, String)> {
    let mut all = base_env(home);
    for (key, value) in image {
        all.retain(|(k, _)| k != key);
        all.push((key.clone(), value.clone()));
    }
    let mut own: Vec<(String, String)> = env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    own.sort();
    all.retain(|(k, _)| !env.contains_key(k));
    all.extend(own);
    all
}

/// The program line that runs a workload's `command` (by `sh -c`),
/// through its image's entrypoint when it has one, as a container engine
/// runs an image with a command.
pub fn program_line(entrypoint: &[String], command: &str) -> Vec<OsString> {
    entrypoint
        .iter()
        .map(String::as_str)
        .chain(["sh", "-c", command])
        .map(Into::into)
        .collect()
}

/// The image a workload runs, which it needs.
pub fn image_of<'a>(launch: &Launch<'a>) -> Result<&'a Image, String> {
    launch
        .image
        .ok_or_else(|| "the workload has no image to run".to_owned())
}

/// The files every root gets from the node's agent: its host name and,
/// with a network of its own, slirp4netns's resolver; otherwise the
/// node's. On a private network, `/etc/hosts` is shown over the one
/// written here (see `names`).
pub fn write_etc(
    tree: &std::path::Path,
    owner: u32,
    private_network: bool,
    hostname: &str,
) -> Result<(), String> {
    let resolv = if private_network {
        crate::network::RESOLV_CONF.to_owned()
    } else {
        std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default()
    };
    let files = [
        ("resolv.conf", resolv),
        ("hostname", format!("{hostname}\n")),
        (
            "hosts",
            format!("127.0.0.1\tlocalhost {hostname}\n::1\tlocalhost ip6-localhost ip6-loopback\n"),
        ),
    ];
    let etc = tree.join("etc");
    std::fs::create_dir_all(&etc).map_err(|e| format!("preparing /etc: {e}"))?;
    for (name, text) in files {
        let path = etc.join(name);
        // A link (to systemd-resolved's file, say) is replaced, not followed.
        std::fs::remove_file(&path).ok();
        std::fs::write(&path, text)
            .and_then(|()| std::os::unix::fs::lchown(&path, Some(owner), Some(owner)))
            .map_err(|e| format!("writing /etc/{name}: {e}"))?;
    }
    Ok(())
}

/// Where a program is on `PATH`, if anywhere.
pub fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/sbin:/usr/bin:/sbin:/bin".into());
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}
