//! The `sandbox` runtime: each workload in its own mount, PID, IPC and UTS
//! namespaces (bubblewrap), as a user of its own with no capabilities and
//! `no_new_privs` (setpriv), seeing a read-only system, a private scratch
//! directory, only its own GPUs' device nodes and a fresh `/proc`, held to
//! its instance type by cgroups. The agent's state directory, other
//! workloads' files and the agent's environment are not there to be seen.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use uuid::Uuid;

use super::{Access, Launch, Prepared, Runtime, RuntimeKind, find_program};
use crate::cgroup::{Cgroups, Group};
use crate::devices::{DeviceNode, GpuDevices};
use crate::network;
use crate::ssh::{self, SshDir};

/// Where scratch appears inside the sandbox (also the home directory).
pub const SCRATCH: &str = "/scratch";
/// Where the agent keeps its workloads' network sockets (root only).
const SOCKETS: &str = "/run/gantry-agent";
/// What of the node's own system a workload sees (read-only); the
/// merged-/usr links are mirrored.
const SYSTEM: &[&str] = &[
    "usr", "etc", "opt", "bin", "sbin", "lib", "lib32", "lib64", "libx32",
];
/// What of an image's root is not shown: the sandbox brings its own.
const NOT_FROM_IMAGES: &[&str] = &["dev", "proc", "sys", "tmp", "run", "scratch"];

/// One top-level entry of the root a workload sees.
enum Entry {
    Link(PathBuf),
    Dir(PathBuf),
}

/// The top-level entries of `root` shown to workloads: the system
/// directories of the node's own root, or everything of an image's but
/// what the sandbox provides itself.
fn root_view(root: &Path, system: bool) -> Vec<(PathBuf, Entry)> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut view: Vec<(PathBuf, Entry)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let shown = if system {
                SYSTEM.contains(&name.as_str())
            } else {
                !NOT_FROM_IMAGES.contains(&name.as_str())
            };
            if !shown {
                return None;
            }
            let inside = Path::new("/").join(&name);
            let host = e.path();
            match std::fs::read_link(&host) {
                Ok(target) => Some((inside, Entry::Link(target))),
                Err(_) if host.is_dir() => Some((inside, Entry::Dir(host))),
                Err(_) => None,
            }
        })
        .collect();
    view.sort_by(|a, b| a.0.cmp(&b.0));
    view
}

/// Programs the sandbox needs on the node.
#[derive(Debug, Clone)]
pub struct Tools {
    pub bwrap: PathBuf,
    pub setpriv: PathBuf,
    /// ssh-keygen, when openssh-server (sshd) is installed too.
    pub ssh_keygen: Option<PathBuf>,
    /// For workloads' own networks; without it they share the node's.
    pub slirp4netns: Option<PathBuf>,
}

impl Tools {
    /// Finds them, or says which Debian package is missing.
    pub fn find() -> Result<Self, String> {
        let bwrap = find_program("bwrap").ok_or(
            "the sandbox runtime needs bubblewrap: install the Debian package `bubblewrap` \
             (or start the agent with --runtime process on a trusted single-tenant node)",
        )?;
        let setpriv = find_program("setpriv")
            .ok_or("the sandbox runtime needs setpriv: install the Debian package `util-linux`")?;
        let ssh_keygen = find_program("sshd").and(find_program("ssh-keygen"));
        Ok(Self {
            bwrap,
            setpriv,
            ssh_keygen,
            slirp4netns: find_program("slirp4netns"),
        })
    }
}

pub struct Sandbox {
    tools: Tools,
    state_dir: PathBuf,
    image_dir: PathBuf,
    devices: GpuDevices,
    cgroups: Cgroups,
    pids_max: u64,
}

impl Sandbox {
    /// Refuses a state directory that the read-only system view would
    /// show to workloads.
    pub fn new(
        tools: Tools,
        state_dir: &Path,
        image_dir: &Path,
        devices: GpuDevices,
        cgroups: Cgroups,
        pids_max: u64,
    ) -> Result<Self, String> {
        let state_dir = std::path::absolute(state_dir).map_err(|e| e.to_string())?;
        if let Some(shown) = SYSTEM
            .iter()
            .find(|s| state_dir.starts_with(Path::new("/").join(s)))
        {
            return Err(format!(
                "the state directory {} is under /{shown}, which every sandbox sees read-only; \
                 keep it elsewhere (the default is /var/lib/gantry-agent)",
                state_dir.display()
            ));
        }
        for dir in ["scratch", "ssh"] {
            std::fs::create_dir_all(state_dir.join(dir)).map_err(|e| e.to_string())?;
        }
        // Workloads never see it, but other local users must not either.
        std::fs::set_permissions(&state_dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("locking {}: {e}", state_dir.display()))?;
        Ok(Self {
            tools,
            state_dir,
            image_dir: image_dir.to_owned(),
            devices,
            cgroups,
            pids_max,
        })
    }

    fn scratch(&self, id: Uuid) -> PathBuf {
        self.state_dir.join("scratch").join(id.to_string())
    }

    fn ssh_dir(&self, id: Uuid) -> PathBuf {
        self.state_dir.join("ssh").join(id.to_string())
    }

    fn net_dir(&self, id: Uuid) -> PathBuf {
        self.state_dir.join("net").join(id.to_string())
    }

    /// slirp4netns's API socket: under /run, since a socket path must be
    /// short and the state directory's may not be.
    fn socket(id: Uuid) -> PathBuf {
        Path::new(SOCKETS).join(format!("{}.sock", id.simple()))
    }

    /// A workload's cgroup name: its order and this agent's state
    /// directory, since the members of one gang on agents that share a
    /// machine (emulated nodes) must never share, or clean up, one group.
    /// It stays the same across restarts, so adopted work is found again.
    fn group_name(&self, id: Uuid) -> String {
        use sha2::Digest;
        let agent = sha2::Sha256::digest(self.state_dir.as_os_str().as_encoded_bytes());
        let tag: String = agent[..4].iter().map(|b| format!("{b:02x}")).collect();
        format!("{id}-{tag}")
    }

    fn group(&self, id: Uuid) -> Group {
        self.cgroups.existing(&self.group_name(id))
    }

    /// Where an image's root file system is prepared on this node.
    fn image_root(&self, name: &str) -> PathBuf {
        self.image_dir.join(name)
    }

    /// The bubblewrap arguments for one workload (everything before `--`).
    fn bwrap_args(
        &self,
        launch: &Launch<'_>,
        devices: &[DeviceNode],
        scratch: &Path,
        ssh: Option<&Path>,
        resolv_conf: Option<&Path>,
    ) -> Result<Vec<OsString>, String> {
        let mut args: Vec<OsString> = Vec::new();
        let mut push = |items: &[&dyn AsRef<std::ffi::OsStr>]| {
            args.extend(items.iter().map(|i| i.as_ref().to_owned()));
        };
        push(&[
            &"--unshare-pid",
            &"--unshare-ipc",
            &"--unshare-uts",
            &"--unshare-cgroup-try",
            &"--hostname",
            &"gantry",
        ]);
        let root = match launch.image {
            Some(image) => {
                let root = self.image_root(&image.name);
                if !root.join("bin").exists() && !root.join("usr").exists() {
                    return Err(format!(
                        "this node cannot run image {:?}: no root file system at {}",
                        image.name,
                        root.display()
                    ));
                }
                root
            }
            None => PathBuf::from("/"),
        };
        for (path, entry) in root_view(&root, launch.image.is_none()) {
            match entry {
                Entry::Link(target) => push(&[&"--symlink", &target, &path]),
                Entry::Dir(host) => push(&[&"--ro-bind", &host, &path]),
            }
        }
        push(&[
            &"--proc",
            &"/proc",
            &"--dev",
            &"/dev",
            // Read-only, as container runtimes show it (CUDA and NVML read
            // PCI topology there), without the node's cgroups, whose names
            // are other tenants' order ids.
            &"--ro-bind-try",
            &"/sys",
            &"/sys",
            &"--tmpfs",
            &"/sys/fs/cgroup",
            &"--perms",
            &"1777",
            &"--tmpfs",
            &"/tmp",
            &"--perms",
            &"1777",
            &"--tmpfs",
            &"/dev/shm",
            &"--perms",
            &"0755",
            &"--dir",
            &"/run",
            // Where /etc/resolv.conf points on hosts with systemd-resolved.
            &"--ro-bind-try",
            &"/run/systemd/resolve",
            &"/run/systemd/resolve",
            &"--bind",
            &scratch,
            &SCRATCH,
        ]);
        // Directories under /dev (MIG's nvidia-caps) are made readable:
        // bubblewrap would make them root's alone.
        let mut dirs: Vec<&Path> = devices
            .iter()
            .filter_map(|d| d.inside.parent())
            .filter(|dir| *dir != Path::new("/dev"))
            .collect();
        dirs.sort_unstable();
        dirs.dedup();
        for dir in dirs {
            push(&[&"--perms", &"0755", &"--dir", &dir]);
        }
        for device in devices {
            push(&[&"--dev-bind", &device.host, &device.inside]);
        }
        if let Some(dir) = ssh {
            push(&[
                &"--ro-bind",
                &dir,
                &ssh::INSIDE,
                &"--ro-bind",
                &dir.join("passwd"),
                &"/etc/passwd",
                &"--ro-bind",
                &dir.join("group"),
                &"/etc/group",
            ]);
        }
        if let Some(resolv_conf) = resolv_conf {
            let (info, block) = (network::INFO_FD.to_string(), network::BLOCK_FD.to_string());
            push(&[
                &"--unshare-net",
                &"--info-fd",
                &info,
                &"--block-fd",
                &block,
                &"--ro-bind",
                &resolv_conf,
                &"/etc/resolv.conf",
            ]);
        }
        let cwd = launch.working_dir.unwrap_or(SCRATCH);
        push(&[&"--chdir", &cwd]);
        Ok(args)
    }
}

impl Runtime for Sandbox {
    fn kind(&self) -> RuntimeKind {
        RuntimeKind::Sandbox
    }

    fn offers_ssh(&self) -> bool {
        self.tools.ssh_keygen.is_some()
    }

    fn prepare(&self, launch: &Launch<'_>) -> Result<Prepared, String> {
        let scratch = self.scratch(launch.id);
        super::make_scratch(&scratch, Some(launch.uid))?;
        let devices = self.devices.for_launch(launch.gpus, launch.mig_devices);
        let env = super::workload_env(SCRATCH, launch.env);
        let ssh = ssh::for_instance(
            self.ssh_dir(launch.id),
            self.tools.ssh_keygen.as_deref(),
            launch.uid,
            launch.ssh_port,
            launch.ssh_keys,
            &env,
        )?;
        let ssh_dir = ssh.as_ref().map(|(dir, _)| dir.clone());
        let access = Access {
            ssh: ssh.map(|(_, access)| access),
            ports: launch.ports.to_vec(),
        };
        let private = match &self.tools.slirp4netns {
            Some(slirp) if launch.private_network => Some((
                slirp,
                network::resolv_conf(&self.net_dir(launch.id))
                    .map_err(|e| format!("could not write the resolver file: {e}"))?,
            )),
            _ => None,
        };
        let mut argv: Vec<OsString> = vec![self.tools.bwrap.clone().into()];
        argv.extend(self.bwrap_args(
            launch,
            &devices,
            &scratch,
            ssh_dir.as_deref(),
            private.as_ref().map(|(_, resolv)| resolv.as_path()),
        )?);
        let (fds, network) = match private {
            Some((slirp, _)) => {
                std::fs::create_dir_all(SOCKETS)
                    .and_then(|()| {
                        std::fs::set_permissions(SOCKETS, std::fs::Permissions::from_mode(0o700))
                    })
                    .map_err(|e| format!("could not make {SOCKETS}: {e}"))?;
                let ((info, info_theirs), (block, block_theirs)) =
                    network::pipes().map_err(|e| format!("could not make pipes: {e}"))?;
                let mut forwards: Vec<u16> = launch.ports.iter().map(|p| p.node_port).collect();
                forwards.extend(launch.ssh_port);
                let network = network::PrivateNetwork {
                    slirp4netns: slirp.clone(),
                    socket: Self::socket(launch.id),
                    forwards,
                    info,
                    block,
                };
                (
                    vec![
                        (info_theirs, network::INFO_FD),
                        (block_theirs, network::BLOCK_FD),
                    ],
                    Some(network),
                )
            }
            None => (Vec::new(), None),
        };
        let uid = launch.uid.to_string();
        argv.extend(
            [
                "--",
                &self.tools.setpriv.display().to_string(),
                "--reuid",
                &uid,
                "--regid",
                &uid,
                "--clear-groups",
                "--no-new-privs",
                "--inh-caps=-all",
                "--bounding-set=-all",
                "--",
            ]
            .map(OsString::from),
        );
        argv.extend(super::program_line(launch.command, ssh_dir.is_some()));
        let numbers: Vec<(u32, u32)> = devices.iter().filter_map(DeviceNode::number).collect();
        let limits = crate::cgroup::Limits {
            pids: launch.limits.pids.min(self.pids_max),
            ..launch.limits
        };
        let cgroup_procs = self
            .cgroups
            .create(&self.group_name(launch.id), limits, &numbers)
            .map_err(|e| format!("could not set the workload's limits: {e}"))?
            .procs_files();
        Ok(Prepared {
            argv,
            env,
            cwd: PathBuf::from("/"),
            cgroup_procs,
            access,
            fds,
            network,
        })
    }

    /// bubblewrap dies of SIGTERM, and with it the wrapper's wait: only the
    /// workload's own processes are told, and the group is killed when the
    /// grace period ends.
    fn stop(&self, id: Uuid, uid: u32) -> bool {
        self.group(id).signal_user(uid, libc::SIGTERM);
        true
    }

    fn authorize(&self, id: Uuid, keys: &[String]) {
        let dir = self.ssh_dir(id);
        if dir.exists()
            && let Err(error) = (SshDir { dir }).authorize(keys)
        {
            tracing::warn!(order = %id, %error, "cannot update the instance's SSH keys");
        }
    }

    fn ending(&self, id: Uuid) -> Option<String> {
        (self.group(id).oom_kills() > 0).then(|| {
            "out of memory: the kernel killed the workload for using more memory than its \
             instance type has"
                .to_owned()
        })
    }

    fn clean(&self, id: Uuid) -> bool {
        let group = self.group(id);
        group.kill_all();
        if !group.remove() {
            return false;
        }
        std::fs::remove_file(Self::socket(id)).ok();
        for dir in [self.scratch(id), self.ssh_dir(id), self.net_dir(id)] {
            if dir.exists()
                && let Err(error) = std::fs::remove_dir_all(&dir)
            {
                tracing::warn!(order = %id, %error, "cannot remove {}", dir.display());
            }
        }
        true
    }
}
