//! The `oci` runtime: each workload is a podman container whose root is the
//! workload's own (its image under a writable layer on a disk of its
//! instance type's size, see `root`), in the workload's user namespace
//! (root inside, a range of the node's ids outside, no nested user
//! namespaces), with a container root's capabilities and
//! `no-new-privileges`, in a cgroup that holds it (and its SSH server) to
//! its instance type, and its GPUs as CDI devices from a spec the agent
//! writes from what it discovered. The container runs in the foreground
//! under the supervisor's exit-code wrapper, so signals, exit codes and
//! restarts work as for any workload.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use uuid::Uuid;

use super::sandbox::{Made, Node};
use super::{Inside, Launch, Prepared, Runtime, RuntimeKind, find_program};
use crate::devices::{DeviceNode, GpuDevices};
use crate::discovery::Gpu;
use crate::driver::DriverFile;
use crate::images::Images;
use crate::ssh;

/// The CDI kind of the agent's spec: `gantry.dev/gpu=<agent>.<index>`.
/// The agent's tag in each name keeps agents that share a machine
/// (emulated nodes) apart, and the vendor keeps the spec apart from
/// NVIDIA's own.
pub const CDI_KIND: &str = "gantry.dev/gpu";
/// The newest CDI version podman 4.3 (Debian 12) reads.
const CDI_VERSION: &str = "0.5.0";

pub struct Oci {
    node: Node,
    images: Images,
    /// The OCI runtime podman starts containers with.
    engine: String,
    keygen: Option<PathBuf>,
    bwrap: Option<PathBuf>,
    cdi_file: PathBuf,
}

impl Oci {
    /// Writes the CDI spec of this node's GPUs to `cdi_dir`.
    pub fn new(
        node: Node,
        images: Images,
        engine: &str,
        cdi_dir: &Path,
        gpus: &[Gpu],
    ) -> Result<Self, String> {
        let cdi_file = cdi_dir.join(format!("gantry-gpu-{}.json", node.tag()));
        std::fs::create_dir_all(cdi_dir)
            .and_then(|()| {
                let spec = cdi_spec(&node.devices, gpus, &node.tag(), &node.driver);
                std::fs::write(&cdi_file, spec.to_string())
            })
            .map_err(|e| format!("writing the CDI spec to {}: {e}", cdi_dir.display()))?;
        std::fs::create_dir_all(node.state_dir.join("env")).map_err(|e| e.to_string())?;
        // The instances' SSH servers run in a bubblewrap sandbox of their
        // own beside the container.
        let bwrap = find_program("bwrap");
        Ok(Self {
            images,
            engine: engine.to_owned(),
            keygen: find_program("ssh-keygen").filter(|_| bwrap.is_some()),
            bwrap,
            cdi_file,
            node,
        })
    }

    fn env_file(&self, id: Uuid) -> PathBuf {
        self.node.state_dir.join("env").join(id.to_string())
    }

    fn podman(&self, args: &[&str]) -> Option<std::process::Output> {
        self.images.podman().args(args).output().ok()
    }
}

impl Drop for Oci {
    fn drop(&mut self) {
        std::fs::remove_file(&self.cdi_file).ok();
    }
}

/// A CDI spec with one device per GPU index, one per MIG instance (named
/// by its UUID: its GPU's node and its own capability nodes), and the
/// shared nodes and the driver's files every GPU container gets; each name
/// starts with `tag`.
pub fn cdi_spec(devices: &GpuDevices, gpus: &[Gpu], tag: &str, driver: &[DriverFile]) -> Value {
    // In a user namespace runc cannot make device nodes: it binds the
    // node's own at the same path. Simulated GPUs' stand-ins live elsewhere,
    // so they are bound where real ones would be.
    let simulated = devices.is_simulated();
    let edits = |nodes: &[DeviceNode]| {
        if simulated {
            let mounts: Vec<Value> = nodes
                .iter()
                .map(|d| json!({ "hostPath": d.host, "containerPath": d.inside, "options": ["bind"] }))
                .collect();
            json!({ "mounts": mounts })
        } else {
            let nodes: Vec<Value> = nodes
                .iter()
                .map(|d| json!({ "path": d.inside, "hostPath": d.host }))
                .collect();
            json!({ "deviceNodes": nodes })
        }
    };
    let entry = |name: String, own: Vec<DeviceNode>| json!({ "name": format!("{tag}.{name}"), "containerEdits": edits(&own) });
    let mut per_gpu = Vec::new();
    for gpu in gpus {
        let index = u32::try_from(gpu.index).unwrap_or(u32::MAX);
        let parent: Vec<DeviceNode> = devices.gpu(index).into_iter().collect();
        per_gpu.push(entry(index.to_string(), parent.clone()));
        for mig in &gpu.mig_devices {
            let mut own = parent.clone();
            own.extend(devices.caps(&mig.uuid));
            per_gpu.push(entry(mig.uuid.clone(), own));
        }
    }
    let mut shared = edits(&devices.shared());
    let files = driver.iter().map(|f| {
        json!({ "hostPath": f.host, "containerPath": f.inside, "options": ["ro", "nosuid", "nodev", "bind"] })
    });
    if let Some(mounts) = shared
        .as_object_mut()
        .map(|edits| edits.entry("mounts").or_insert_with(|| json!([])))
        .and_then(Value::as_array_mut)
    {
        mounts.extend(files);
    }
    json!({
        "cdiVersion": CDI_VERSION,
        "kind": CDI_KIND,
        "devices": per_gpu,
        "containerEdits": shared,
    })
}

/// The container's name, by which it is found again after a restart.
pub fn container_name(id: Uuid) -> String {
    format!("gantry-{id}")
}

/// The agent's own limit of open files as podman's `--ulimit` takes it: a
/// container may not be given more than the agent has (raising a limit
/// needs a capability root may lack).
fn open_files() -> String {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit(2) fills the struct on this stack.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut limit) } != 0 {
        return "nofile=1024:1024".to_owned();
    }
    let show = |v: libc::rlim_t| {
        if v == libc::RLIM_INFINITY {
            "-1".to_owned()
        } else {
            v.to_string()
        }
    };
    format!("nofile={}:{}", show(limit.rlim_cur), show(limit.rlim_max))
}

/// What `podman run` needs beside the launch.
pub struct RunSettings<'a> {
    pub engine: &'a str,
    pub tag: &'a str,
    pub made: &'a Made,
    pub env_file: &'a Path,
    pub cgroup_parent: &'a str,
    pub lxcfs: Option<&'a Path>,
    pub ulimits: [String; 2],
    /// The node's RDMA devices, where the workload gets them.
    pub rdma: &'a [DeviceNode],
}

/// `podman run` for one workload (after podman's own options, before the
/// command): everything the sandbox guarantees, in podman's words.
pub fn run_args(launch: &Launch<'_>, settings: &RunSettings<'_>) -> Vec<OsString> {
    let root = &settings.made.root;
    let mut args: Vec<String> = vec![
        "--runtime".into(),
        settings.engine.into(),
        "run".into(),
        "--replace".into(),
        "--name".into(),
        container_name(launch.id),
        "--hostname".into(),
        launch.hostname.into(),
        format!("--userns=ns:{}", root.userns.display()),
        "--cgroup-parent".into(),
        settings.cgroup_parent.into(),
        "--cap-drop=all".into(),
    ];
    args.extend(
        ssh::ROOT_CAPABILITIES
            .iter()
            .map(|c| format!("--cap-add={c}")),
    );
    args.push("--security-opt=no-new-privileges".into());
    for limit in &settings.ulimits {
        args.extend(["--ulimit".into(), limit.clone()]);
    }
    args.push(if launch.private_network {
        "--network=slirp4netns:allow_host_loopback=false".into()
    } else {
        "--network=host".into()
    });
    args.extend([
        "--env-file".into(),
        settings.env_file.display().to_string(),
        "--volume".into(),
        format!("{}:/dev/shm", root.shm.display()),
        "--workdir".into(),
        settings.made.cwd.clone(),
    ]);
    if launch.hosts.is_some() {
        args.extend([
            "--volume".into(),
            format!("{}:/etc/hosts:ro", root.hosts().display()),
        ]);
    }
    if let Some(lxcfs) = settings.lxcfs {
        for file in crate::view::LXCFS_FILES {
            let host = lxcfs.join(file);
            if host.exists() {
                args.extend(["--volume".into(), format!("{}:/{file}:ro", host.display())]);
            }
        }
    }
    if launch.private_network {
        let ports = launch
            .ports
            .iter()
            .map(|p| p.node_port)
            .chain(launch.ssh_port);
        for port in ports {
            args.extend(["--publish".into(), format!("{port}:{port}")]);
        }
    }
    // A MIG workload gets its instances, which bring their GPU's node.
    let tag = settings.tag;
    if launch.mig_devices.is_empty() {
        for gpu in launch.gpus {
            args.extend(["--device".into(), format!("{CDI_KIND}={tag}.{gpu}")]);
        }
    }
    for mig in launch.mig_devices {
        args.extend(["--device".into(), format!("{CDI_KIND}={tag}.{mig}")]);
    }
    // As with GPUs (see `cdi_spec`), runc binds a device node from the same
    // path on the node: a stand-in that lives elsewhere is bound instead.
    for device in settings.rdma {
        let flag = if device.host == device.inside {
            "--device"
        } else {
            "--volume"
        };
        args.extend([
            flag.into(),
            format!("{}:{}", device.host.display(), device.inside.display()),
        ]);
    }
    args.extend(["--rootfs".into(), root.tree.display().to_string()]);
    args.into_iter().map(OsString::from).collect()
}

impl Runtime for Oci {
    fn kind(&self) -> RuntimeKind {
        RuntimeKind::Oci
    }

    fn offers_ssh(&self) -> bool {
        self.keygen.is_some()
    }

    fn prepare(&self, launch: &Launch<'_>) -> Result<Prepared, String> {
        let image = super::image_of(launch)?;
        let made = self.node.prepare_root(launch, self.keygen.as_deref())?;
        let name = self.node.group_name(launch.id);
        // The container's own groups go below this one, which holds the
        // container and its SSH server to the instance type together.
        let group = self
            .node
            .cgroups
            .create(&name, self.node.limits(launch), launch.cpus, None)
            .map_err(|e| format!("could not set the workload's limits: {e}"))?;
        // Variables go through a root-only file: on the command line every
        // local user could read them.
        let env_file = self.env_file(launch.id);
        let rdma = self.node.rdma_for(launch);
        let text: String = made.env.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
        std::fs::write(&env_file, text)
            .and_then(|()| {
                std::fs::set_permissions(&env_file, std::fs::Permissions::from_mode(0o600))
            })
            .map_err(|e| format!("could not write the environment: {e}"))?;
        let mut argv = self.images.podman_line();
        argv.extend(run_args(
            launch,
            &RunSettings {
                engine: &self.engine,
                tag: &self.node.tag(),
                made: &made,
                env_file: &env_file,
                cgroup_parent: &self.node.cgroups.parent_path(&name),
                lxcfs: self.node.lxcfs.as_deref(),
                // Processes are held by the cgroup: the same ceiling per
                // user inside (podman itself refuses above 32,768).
                ulimits: [
                    open_files(),
                    format!("nproc={0}:{0}", self.node.limits(launch).pids.min(32_768)),
                ],
                rdma: &rdma,
            },
        ));
        argv.extend(super::program_line(&image.entrypoint, launch.command));
        let mut devices = self
            .node
            .devices
            .for_launch(launch.gpus, launch.mig_devices);
        devices.extend(rdma);
        let ssh = match &self.bwrap {
            Some(bwrap) => self
                .node
                .ssh_server(bwrap, launch, &made, devices, &group)?,
            None => None,
        };
        Ok(Prepared {
            argv,
            env: super::base_env("/"),
            cwd: PathBuf::from("/"),
            cgroup_procs: Vec::new(),
            access: made.access,
            fds: Vec::new(),
            network: None,
            inside: ssh.as_ref().map(|_| Inside::Runtime),
            ssh,
        })
    }

    /// podman forwards the group's SIGTERM to the container and waits.
    fn stop(&self, _id: Uuid) -> bool {
        false
    }

    fn inside(&self, id: Uuid) -> Option<u32> {
        let out = self.podman(&["inspect", "--format", "{{.State.Pid}}", &container_name(id)])?;
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .ok()
            .filter(|pid| *pid > 0)
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
        self.podman(&["rm", "--force", "--time", "0", &container_name(id)]);
        if !self.node.clean(id) {
            return false;
        }
        std::fs::remove_file(self.env_file(id)).ok();
        true
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::cgroup::Limits;
    use crate::runtime::{Access, PortMapping};

    #[test]
    fn the_cdi_spec_names_each_gpu_and_the_shared_nodes() {
        let dir = std::env::temp_dir().join(format!("gantry-cdi-{}", Uuid::now_v7()));
        let gpus = crate::discovery::simulated("2xH100-SXM-80GB").expect("GPUs");
        let devices = GpuDevices::simulated(&dir, &gpus).expect("stand-ins");
        let spec = cdi_spec(&devices, &gpus, "abcd0123", &[]);
        let bind = |name: &str| {
            json!({ "hostPath": dir.join("dev").join(name), "containerPath": format!("/dev/{name}"),
                    "options": ["bind"] })
        };
        assert_eq!(
            spec,
            json!({
                "cdiVersion": "0.5.0",
                "kind": "gantry.dev/gpu",
                "devices": [
                    { "name": "abcd0123.0", "containerEdits": { "mounts": [
                        bind("nvidia0") ] } },
                    { "name": "abcd0123.1", "containerEdits": { "mounts": [
                        bind("nvidia1") ] } },
                ],
                "containerEdits": { "mounts": [ bind("nvidiactl"), bind("nvidia-uvm") ] },
            })
        );
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn each_mig_instance_is_a_cdi_device_of_its_own() {
        let dir = std::env::temp_dir().join(format!("gantry-cdi-{}", Uuid::now_v7()));
        let gpus = crate::discovery::simulated("1xH100-SXM-80GB:mig=3g.40gb*2").expect("GPUs");
        let devices = GpuDevices::simulated(&dir, &gpus).expect("stand-ins");
        let spec = cdi_spec(&devices, &gpus, "t", &[]);
        let bind = |name: &str| {
            json!({ "hostPath": dir.join("dev").join(name), "containerPath": format!("/dev/{name}"),
                    "options": ["bind"] })
        };
        let mig = &gpus[0].mig_devices[1];
        let entry = spec["devices"]
            .as_array()
            .and_then(|all| all.iter().find(|d| d["name"] == format!("t.{}", mig.uuid)))
            .expect("the instance is a device");
        let mut nodes = vec![bind("nvidia0")];
        nodes.extend(
            mig.caps
                .iter()
                .map(|minor| bind(&format!("nvidia-caps/nvidia-cap{minor}"))),
        );
        assert_eq!(entry["containerEdits"]["mounts"], json!(nodes));
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn gpu_containers_get_the_drivers_files_read_only() {
        let gpus = crate::discovery::simulated("1xH100-SXM-80GB").expect("GPUs");
        let devices = GpuDevices::real(vec![0], &gpus);
        let driver = [DriverFile {
            host: "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15".into(),
            inside: "/usr/local/nvidia/lib64/libcuda.so.1".into(),
        }];
        let spec = cdi_spec(&devices, &gpus, "t", &driver);
        assert_eq!(
            spec["containerEdits"]["mounts"],
            json!([{ "hostPath": "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15",
                     "containerPath": "/usr/local/nvidia/lib64/libcuda.so.1",
                     "options": ["ro", "nosuid", "nodev", "bind"] }])
        );
    }

    #[test]
    fn a_container_gets_the_sandboxs_guarantees_in_podmans_words() {
        let id = Uuid::from_u128(7);
        let env = HashMap::new();
        let launch = Launch {
            id,
            gpus: &[1, 3],
            mig_devices: &[],
            env: &env,
            command: "python train.py",
            working_dir: None,
            limits: Limits {
                cpu_milli: 12_500,
                memory_mib: 65_536,
                pids: 9_999,
            },
            cpus: "0-12",
            disk: 1 << 30,
            image: None,
            image_name: None,
            uid: 200_000,
            ssh_port: Some(42_017),
            ssh_keys: &[],
            ports: &[PortMapping {
                port: 8888,
                node_port: 42_018,
            }],
            private_network: true,
            hostname: "train-0",
            hosts: Some("198.19.0.4\ttrain-0\n"),
            whole_gpus: true,
            volumes: &[],
        };
        let dir = std::env::temp_dir().join(format!("gantry-roots-{}", Uuid::now_v7()));
        let roots = crate::root::Roots::new(&dir, 0).expect("mkfs.ext4 and mount");
        let made = Made {
            root: roots.root(id),
            env: Vec::new(),
            cwd: "/scratch".into(),
            access: Access::default(),
        };
        let args: Vec<String> = run_args(
            &launch,
            &RunSettings {
                engine: "runc",
                tag: "abcd0123",
                made: &made,
                env_file: Path::new("/var/lib/gantry-agent/env/x"),
                cgroup_parent: "/gantry/x",
                lxcfs: None,
                ulimits: ["nofile=1024:1024".into(), "nproc=4096:4096".into()],
                rdma: &[DeviceNode {
                    host: "/dev/infiniband/uverbs0".into(),
                    inside: "/dev/infiniband/uverbs0".into(),
                }],
            },
        )
        .into_iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
        let root = dir.join("00000000-0000-0000-0000-000000000007");
        let root = root.display();
        let mut expected: Vec<String> = [
            "--runtime",
            "runc",
            "run",
            "--replace",
            "--name",
            "gantry-00000000-0000-0000-0000-000000000007",
            "--hostname",
            "train-0",
        ]
        .map(String::from)
        .to_vec();
        expected.push(format!("--userns=ns:{root}/userns"));
        expected.extend(["--cgroup-parent", "/gantry/x", "--cap-drop=all"].map(String::from));
        expected.extend(
            ssh::ROOT_CAPABILITIES
                .iter()
                .map(|c| format!("--cap-add={c}")),
        );
        expected.extend(
            [
                "--security-opt=no-new-privileges",
                "--ulimit",
                "nofile=1024:1024",
                "--ulimit",
                "nproc=4096:4096",
                "--network=slirp4netns:allow_host_loopback=false",
                "--env-file",
                "/var/lib/gantry-agent/env/x",
                "--volume",
            ]
            .map(String::from),
        );
        expected.push(format!("{root}/shm:/dev/shm"));
        expected.extend(["--workdir", "/scratch", "--volume"].map(String::from));
        expected.push(format!("{root}/hosts:/etc/hosts:ro"));
        expected.extend(
            [
                "--publish",
                "42018:42018",
                "--publish",
                "42017:42017",
                "--device",
                "gantry.dev/gpu=abcd0123.1",
                "--device",
                "gantry.dev/gpu=abcd0123.3",
                "--device",
                "/dev/infiniband/uverbs0:/dev/infiniband/uverbs0",
                "--rootfs",
            ]
            .map(String::from),
        );
        expected.push(format!("{root}/tree"));
        assert_eq!(args, expected);
        std::fs::remove_dir_all(&dir).ok();
    }
}
