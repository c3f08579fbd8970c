//! The `sandbox` runtime: each workload in a user namespace of its own
//! (root inside, a range of the node's ids outside, no nested user
//! namespaces), with bubblewrap's mount, PID, IPC and UTS namespaces, its
//! image as a writable root on a disk of its instance type's size, a fresh
//! `/proc` that says its size, only its own GPUs' device nodes, the
//! capabilities of a container's root and `no_new_privs`, held to its
//! instance type by cgroups. The agent's state directory, other workloads'
//! files and the agent's environment are not there to be seen.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use uuid::Uuid;

use super::{Access, Inside, Launch, Prepared, Runtime, RuntimeKind, find_program};
use crate::cgroup::{Cgroups, Group};
use crate::devices::{DeviceNode, GpuDevices};
use crate::root::Roots;
use crate::ssh::{self, SshDir};
use crate::{network, view};

/// Where scratch is inside the sandbox: a job's working directory unless
/// it or its image names another.
pub const SCRATCH: &str = "/scratch";
/// Where the agent keeps its workloads' network sockets (root only).
const SOCKETS: &str = "/run/gantry-agent";

/// Programs the sandbox needs on the node.
#[derive(Debug, Clone)]
pub struct Tools {
    pub bwrap: PathBuf,
    /// Joins the workload's user namespace before bubblewrap starts.
    pub nsenter: PathBuf,
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
        let nsenter = find_program("nsenter")
            .ok_or("the sandbox runtime needs nsenter: install the Debian package `util-linux`")?;
        let ssh_keygen = find_program("sshd").and(find_program("ssh-keygen"));
        Ok(Self {
            bwrap,
            nsenter,
            ssh_keygen,
            slirp4netns: find_program("slirp4netns"),
        })
    }
}

/// What the sandbox and oci runtimes share: where roots, SSH files and
/// cgroups are, and what a workload is shown.
#[derive(Debug, Clone)]
pub struct Node {
    pub state_dir: PathBuf,
    pub roots: Roots,
    pub devices: GpuDevices,
    pub cgroups: Cgroups,
    pub pids_max: u64,
    /// Where lxcfs is mounted, when it is.
    pub lxcfs: Option<PathBuf>,
    /// The NVIDIA driver's files workloads with GPUs are shown.
    pub driver: Vec<crate::driver::DriverFile>,
    /// The node's RDMA devices, for workloads that hold the whole node.
    pub rdma: crate::rdma::Rdma,
}

impl Node {
    /// Refuses a state directory under the node's directories that SSH
    /// servers see, and locks it: only the directories a workload's own
    /// setup passes through (as its user namespace's root, on its way to
    /// its own directory, which is its alone) may be passed through by
    /// others, and listed by none.
    pub fn check_state_dir(state_dir: &Path) -> Result<PathBuf, String> {
        let state_dir = std::path::absolute(state_dir).map_err(|e| e.to_string())?;
        if let Some(shown) = ssh::SYSTEM
            .iter()
            .find(|s| state_dir.starts_with(Path::new("/").join(s)))
        {
            return Err(format!(
                "the state directory {} is under /{shown}, which instances' SSH servers see; \
                 keep it elsewhere (the default is /var/lib/gantry-agent)",
                state_dir.display()
            ));
        }
        // Each workload's setup runs as its own root, an unprivileged id
        // on the node: it must pass through every directory above.
        for dir in state_dir.ancestors().skip(1) {
            let mode = std::fs::metadata(dir)
                .map(|m| m.permissions().mode())
                .unwrap_or(0o755);
            if mode & 0o001 == 0 {
                return Err(format!(
                    "{} (mode {:o}) is above the state directory and others may not pass \
                     through it, as workloads' setup must; allow it (chmod o+x) or keep the \
                     state directory elsewhere",
                    dir.display(),
                    mode & 0o7777
                ));
            }
        }
        let dirs = [
            ("exits", 0o700),
            ("output", 0o700),
            ("env", 0o700),
            ("auth", 0o700),
            ("images", 0o700),
            ("ssh", 0o711),
            ("roots", 0o711),
            ("dev", 0o711),
        ];
        for (dir, mode) in dirs.into_iter().chain([("", 0o711)]) {
            let path = state_dir.join(dir);
            std::fs::create_dir_all(&path)
                .and_then(|()| {
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
                })
                .map_err(|e| format!("locking {}: {e}", path.display()))?;
        }
        Ok(state_dir)
    }

    pub fn ssh_dir(&self, id: Uuid) -> PathBuf {
        self.state_dir.join("ssh").join(id.to_string())
    }

    /// A workload's cgroup name: its order and this agent's state
    /// directory, since the members of one gang on agents that share a
    /// machine (emulated nodes) must never share, or clean up, one group.
    /// It stays the same across restarts, so adopted work is found again.
    pub fn group_name(&self, id: Uuid) -> String {
        format!("{id}-{}", self.tag())
    }

    /// Eight hex digits that tell this agent from others on the machine.
    pub fn tag(&self) -> String {
        use sha2::Digest;
        let agent = sha2::Sha256::digest(self.state_dir.as_os_str().as_encoded_bytes());
        agent[..4].iter().map(|b| format!("{b:02x}")).collect()
    }

    pub fn group(&self, id: Uuid) -> Group {
        self.cgroups.existing(&self.group_name(id))
    }

    /// The node's RDMA devices where the workload holds every GPU of the
    /// node, whole (see `rdma`); none otherwise.
    pub fn rdma_for(&self, launch: &Launch<'_>) -> Vec<DeviceNode> {
        let whole_node = launch.whole_gpus
            && !launch.gpus.is_empty()
            && launch.gpus.len() == self.devices.count();
        if whole_node {
            self.rdma.nodes()
        } else {
            Vec::new()
        }
    }

    /// The limits a workload gets: its own, with this node's ceiling on
    /// processes.
    pub fn limits(&self, launch: &Launch<'_>) -> crate::cgroup::Limits {
        crate::cgroup::Limits {
            pids: launch.limits.pids.min(self.pids_max),
            ..launch.limits
        }
    }

    /// Makes the workload's root and SSH files; answers the root, its
    /// environment, where it starts and how it is reached.
    pub fn prepare_root(
        &self,
        launch: &Launch<'_>,
        ssh_keygen: Option<&Path>,
    ) -> Result<Made, String> {
        let image = super::image_of(launch)?;
        let shm_mib = (launch.limits.memory_mib / 2).max(64);
        let root = self
            .roots
            .prepare(launch.id, launch.uid, image, launch.disk, shm_mib)?;
        self.roots.attach(&root, launch.uid, launch.volumes)?;
        super::write_etc(
            &root.tree,
            launch.uid,
            launch.private_network,
            launch.hostname,
        )?;
        if let Some(hosts) = launch.hosts {
            crate::names::write_in_place(&root.hosts(), hosts, true)
                .map_err(|e| format!("writing the workload's host table: {e}"))?;
        }
        let mut env = super::workload_env("/root", &image.env, launch.env);
        if !launch.gpus.is_empty() && !self.driver.is_empty() {
            add_driver_dirs(&mut env);
        }
        if !self.rdma_for(launch).is_empty() {
            env.push(("NCCL_IB_HCA".to_owned(), self.rdma.hca_list()));
        }
        let cwd = launch
            .working_dir
            .or(image.working_dir.as_deref())
            .unwrap_or(SCRATCH)
            .to_owned();
        let shell = ssh::shell_of(&root.tree);
        let ssh = ssh::for_instance(
            self.ssh_dir(launch.id),
            ssh_keygen,
            launch.ssh_port,
            |port| ssh::Settings {
                owner: launch.uid,
                port,
                keys: launch.ssh_keys,
                env: &env,
                shell,
            },
        )?;
        let access = Access {
            ssh,
            ports: launch.ports.to_vec(),
        };
        Ok(Made {
            root,
            env,
            cwd,
            access,
        })
    }

    /// The SSH server of a workload whose root is `root`, when it has one.
    pub fn ssh_server(
        &self,
        bwrap: &Path,
        launch: &Launch<'_>,
        made: &Made,
        devices: Vec<DeviceNode>,
        group: &Group,
    ) -> Result<Option<ssh::Server>, String> {
        if made.access.ssh.is_none() {
            return Ok(None);
        }
        let cgroup_procs = group
            .child_procs("ssh")
            .map_err(|e| format!("making the SSH server's cgroup: {e}"))?;
        Ok(Some(ssh::Server {
            bwrap: bwrap.to_owned(),
            dir: self.ssh_dir(launch.id),
            root: made.root.clone(),
            devices,
            driver: self.driver.clone(),
            cgroups: group.dirs().to_vec(),
            lxcfs: self.lxcfs.clone(),
            cgroup_procs,
        }))
    }

    /// Removes what an ended workload left: its cgroups, root and SSH
    /// files. False while something is still going away.
    pub fn clean(&self, id: Uuid) -> bool {
        let group = self.group(id);
        group.kill_all();
        if !group.remove() || !self.roots.remove(id) {
            return false;
        }
        let dir = self.ssh_dir(id);
        if dir.exists()
            && let Err(error) = std::fs::remove_dir_all(&dir)
        {
            tracing::warn!(order = %id, %error, "cannot remove {}", dir.display());
        }
        true
    }

    /// Why a workload ended, when the kernel killed it for memory.
    pub fn ending(&self, id: Uuid) -> Option<String> {
        (self.group(id).oom_kills() > 0).then(|| {
            "out of memory: the kernel killed the workload for using more memory than its \
             instance type has"
                .to_owned()
        })
    }

    pub fn authorize(&self, id: Uuid, keys: &[String]) {
        let dir = self.ssh_dir(id);
        if dir.exists()
            && let Err(error) = (SshDir { dir }).authorize(keys)
        {
            tracing::warn!(order = %id, %error, "cannot update the instance's SSH keys");
        }
    }

    pub fn update_hosts(&self, id: Uuid, hosts: &str) {
        if let Err(error) = crate::names::write_in_place(&self.roots.root(id).hosts(), hosts, false)
        {
            tracing::warn!(order = %id, %error, "cannot update the workload's host table");
        }
    }
}

/// Names the driver's directories in `PATH` and `LD_LIBRARY_PATH`, after
/// whatever the image says.
fn add_driver_dirs(env: &mut Vec<(String, String)>) {
    for (key, dir) in [
        ("PATH", crate::driver::BIN_DIR),
        ("LD_LIBRARY_PATH", crate::driver::LIB_DIR),
    ] {
        let current = env.iter().position(|(k, _)| k == key);
        let value = crate::driver::with_dir(current.map(|i| env[i].1.as_str()), dir);
        match current {
            Some(i) => env[i].1 = value,
            None => env.push((key.to_owned(), value)),
        }
    }
}

/// A workload's root and what comes with it.
pub struct Made {
    pub root: crate::root::Root,
    pub env: Vec<(String, String)>,
    pub cwd: String,
    pub access: Access,
}

pub struct Sandbox {
    tools: Tools,
    node: Node,
}

impl Sandbox {
    pub fn new(tools: Tools, node: Node) -> Self {
        Self { tools, node }
    }
}

/// slirp4netns's API socket: under /run, since a socket path must be
/// short and the state directory's may not be.
pub fn socket(id: Uuid) -> PathBuf {
    Path::new(SOCKETS).join(format!("{}.sock", id.simple()))
}

/// A workload's own network: what brings it up, and the end of its block
/// pipe that bubblewrap waits on.
pub fn private_network(
    slirp4netns: &Path,
    launch: &Launch<'_>,
) -> Result<(network::PrivateNetwork, std::os::fd::OwnedFd), String> {
    std::fs::create_dir_all(SOCKETS)
        .and_then(|()| std::fs::set_permissions(SOCKETS, std::fs::Permissions::from_mode(0o700)))
        .map_err(|e| format!("could not make {SOCKETS}: {e}"))?;
    let (block, theirs) =
        network::block_pipe().map_err(|e| format!("could not make a pipe: {e}"))?;
    let mut forwards: Vec<u16> = launch.ports.iter().map(|p| p.node_port).collect();
    forwards.extend(launch.ssh_port);
    Ok((
        network::PrivateNetwork {
            slirp4netns: slirp4netns.to_owned(),
            socket: socket(launch.id),
            forwards,
            block,
            gid: None,
        },
        theirs,
    ))
}

impl Runtime for Sandbox {
    fn kind(&self) -> RuntimeKind {
        RuntimeKind::Sandbox
    }

    fn offers_ssh(&self) -> bool {
        self.tools.ssh_keygen.is_some()
    }

    fn prepare(&self, launch: &Launch<'_>) -> Result<Prepared, String> {
        let image = super::image_of(launch)?;
        let made = self
            .node
            .prepare_root(launch, self.tools.ssh_keygen.as_deref())?;
        let mut devices = self
            .node
            .devices
            .for_launch(launch.gpus, launch.mig_devices);
        devices.extend(self.node.rdma_for(launch));
        let numbers: Vec<(u32, u32)> = devices.iter().filter_map(DeviceNode::number).collect();
        let group = self
            .node
            .cgroups
            .create(
                &self.node.group_name(launch.id),
                self.node.limits(launch),
                launch.cpus,
                Some(&numbers),
            )
            .map_err(|e| format!("could not set the workload's limits: {e}"))?;
        let (info, info_theirs) =
            network::info_pipe().map_err(|e| format!("could not make a pipe: {e}"))?;
        let own_network = match &self.tools.slirp4netns {
            Some(slirp) if launch.private_network => Some(private_network(slirp, launch)?),
            _ => None,
        };
        let mut argv: Vec<OsString> = vec![
            self.tools.nsenter.clone().into(),
            format!("--user={}", made.root.userns.display()).into(),
            "--".into(),
            self.tools.bwrap.clone().into(),
        ];
        argv.extend(
            [
                "--unshare-pid",
                "--unshare-ipc",
                "--unshare-uts",
                "--unshare-cgroup-try",
                "--hostname",
                launch.hostname,
                "--info-fd",
            ]
            .map(OsString::from),
        );
        argv.push(network::INFO_FD.to_string().into());
        let shown = view::View {
            root: &made.root,
            devices: &devices,
            driver: &self.node.driver,
            cgroups: group.dirs(),
            lxcfs: self.node.lxcfs.as_deref(),
        };
        argv.extend(shown.args(Path::new("/")));
        let mut fds = vec![(info_theirs, network::INFO_FD)];
        let network = match own_network {
            Some((network, block_theirs)) => {
                argv.extend(["--unshare-net", "--block-fd"].map(OsString::from));
                argv.push(network::BLOCK_FD.to_string().into());
                fds.push((block_theirs, network::BLOCK_FD));
                Some(network)
            }
            None => None,
        };
        argv.extend(ssh::capabilities());
        argv.extend(["--chdir".into(), made.cwd.clone().into(), "--".into()]);
        argv.extend(super::program_line(&image.entrypoint, launch.command));
        let ssh = self
            .node
            .ssh_server(&self.tools.bwrap, launch, &made, devices, &group)?;
        Ok(Prepared {
            argv,
            env: made.env,
            cwd: PathBuf::from("/"),
            cgroup_procs: group.procs_files(),
            access: made.access,
            fds,
            network,
            inside: Some(Inside::Info(info)),
            ssh,
        })
    }

    /// bubblewrap dies of SIGTERM, and with it the wrapper's wait: only the
    /// workload's own processes are told, and the group is killed when the
    /// grace period ends.
    fn stop(&self, id: Uuid) -> bool {
        self.node.group(id).signal_inside(libc::SIGTERM);
        true
    }

    fn authorize(&self, id: Uuid, keys: &[String]) {
        self.node.authorize(id, keys);
    }

    fn update_hosts(&self, id: Uuid, hosts: &str) {
        self.node.update_hosts(id, hosts);
    }

    fn ending(&self, id: Uuid) -> Option<String> {
        self.node.ending(id)
    }

    fn clean(&self, id: Uuid) -> bool {
        if !self.node.clean(id) {
            return false;
        }
        std::fs::remove_file(socket(id)).ok();
        true
    }
}
