//! The `oci` runtime: each workload is a podman (or docker) container of
//! its order's image, as the workload's own user with no capabilities and
//! `no-new-privileges`, a read-only root, a private scratch volume, the
//! instance type's CPU, memory and process limits, and its GPUs as CDI
//! devices from a spec the agent writes from what it discovered. The
//! container runs in the foreground under the supervisor's exit-code
//! wrapper, so signals, exit codes and restarts work as for any workload.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use uuid::Uuid;

use super::{Access, Launch, Prepared, Runtime, RuntimeKind, find_program};
use crate::devices::{DeviceNode, GpuDevices};
use crate::discovery::Gpu;
use crate::ssh::{self, SshDir};

/// The CDI kind the agent's spec declares; devices are `nvidia.com/gpu=N`.
pub const CDI_KIND: &str = "nvidia.com/gpu";
/// Used when an order names no image.
const DEFAULT_IMAGE: &str = "docker.io/library/debian:bookworm";

pub struct Oci {
    engine: PathBuf,
    keygen: Option<PathBuf>,
    state_dir: PathBuf,
    pids_max: u64,
}

impl Oci {
    /// Finds podman (or docker) and writes the CDI spec for `gpus` to
    /// `cdi_dir`.
    pub fn new(
        state_dir: &Path,
        cdi_dir: &Path,
        devices: GpuDevices,
        gpus: &[Gpu],
        pids_max: u64,
    ) -> Result<Self, String> {
        let engine = find_program("podman")
            .or_else(|| find_program("docker"))
            .ok_or("the oci runtime needs podman: install the Debian package `podman`")?;
        std::fs::create_dir_all(cdi_dir)
            .and_then(|()| {
                let spec = cdi_spec(&devices, gpus);
                std::fs::write(cdi_dir.join("gantry-nvidia.json"), spec.to_string())
            })
            .map_err(|e| format!("writing the CDI spec to {}: {e}", cdi_dir.display()))?;
        for dir in ["scratch", "ssh", "env"] {
            std::fs::create_dir_all(state_dir.join(dir)).map_err(|e| e.to_string())?;
        }
        Ok(Self {
            engine,
            keygen: find_program("ssh-keygen"),
            state_dir: state_dir.to_owned(),
            pids_max,
        })
    }

    fn path(&self, what: &str, id: Uuid) -> PathBuf {
        self.state_dir.join(what).join(id.to_string())
    }
}

/// A CDI spec (version 0.6.0) with one device per GPU index, one per MIG
/// instance (named by its UUID: its GPU's node and its own capability
/// nodes), and the shared nodes every GPU container gets.
pub fn cdi_spec(devices: &GpuDevices, gpus: &[Gpu]) -> Value {
    let node = |d: &DeviceNode| json!({ "path": d.inside, "hostPath": d.host });
    let entry = |name: String, own: Vec<DeviceNode>| {
        let own: Vec<Value> = own.iter().map(node).collect();
        json!({ "name": name, "containerEdits": { "deviceNodes": own } })
    };
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
    let shared: Vec<Value> = devices.shared().iter().map(node).collect();
    json!({
        "cdiVersion": "0.6.0",
        "kind": CDI_KIND,
        "devices": per_gpu,
        "containerEdits": { "deviceNodes": shared },
    })
}

/// The container's name, by which it is found again after a restart.
pub fn container_name(id: Uuid) -> String {
    format!("gantry-{id}")
}

/// `podman run` for one workload (before the command): everything the
/// sandbox guarantees, said in the engine's words.
pub fn run_args(
    launch: &Launch<'_>,
    scratch: &Path,
    env_file: &Path,
    ssh_dir: Option<&Path>,
    pids_max: u64,
) -> Vec<OsString> {
    let mut args: Vec<String> = vec![
        "run".into(),
        "--replace".into(),
        "--name".into(),
        container_name(launch.id),
        "--hostname".into(),
        "gantry".into(),
        "--user".into(),
        format!("{0}:{0}", launch.uid),
        "--cap-drop=all".into(),
        "--security-opt=no-new-privileges".into(),
        "--read-only".into(),
        "--tmpfs".into(),
        "/tmp:rw,mode=1777".into(),
        if launch.private_network {
            "--network=slirp4netns:allow_host_loopback=false".into()
        } else {
            "--network=host".into()
        },
        format!(
            "--cpus={}.{:03}",
            launch.limits.cpu_milli / 1000,
            launch.limits.cpu_milli % 1000
        ),
        format!("--memory={}m", launch.limits.memory_mib),
        format!("--memory-swap={}m", launch.limits.memory_mib),
        format!("--pids-limit={}", launch.limits.pids.min(pids_max)),
        "--env-file".into(),
        env_file.display().to_string(),
        "--volume".into(),
        format!("{}:{}:rw", scratch.display(), super::sandbox::SCRATCH),
        "--workdir".into(),
        launch
            .working_dir
            .unwrap_or(super::sandbox::SCRATCH)
            .to_owned(),
    ];
    if launch.private_network {
        let ports = launch
            .ports
            .iter()
            .map(|p| p.node_port)
            .chain(launch.ssh_port);
        for port in ports {
            args.push("--publish".into());
            args.push(format!("{port}:{port}"));
        }
    }
    // A MIG workload gets its instances, which bring their GPU's node.
    if launch.mig_devices.is_empty() {
        for gpu in launch.gpus {
            args.push("--device".into());
            args.push(format!("{CDI_KIND}={gpu}"));
        }
    }
    for mig in launch.mig_devices {
        args.push("--device".into());
        args.push(format!("{CDI_KIND}={mig}"));
    }
    if let Some(dir) = ssh_dir {
        args.push("--volume".into());
        args.push(format!("{}:{}:ro", dir.display(), ssh::INSIDE));
        for file in ["passwd", "group"] {
            args.push("--volume".into());
            args.push(format!("{}:/etc/{file}:ro", dir.join(file).display()));
        }
    }
    args.push(
        launch
            .image
            .map_or(DEFAULT_IMAGE, |i| i.reference.as_str())
            .to_owned(),
    );
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
        let scratch = self.path("scratch", launch.id);
        super::make_scratch(&scratch, Some(launch.uid))?;
        let env = super::workload_env(super::sandbox::SCRATCH, launch.env);
        // Variables go through a root-only file: on the command line every
        // local user could read them.
        let env_file = self.path("env", launch.id);
        let text: String = env.iter().map(|(k, v)| format!("{k}={v}\n")).collect();
        std::fs::write(&env_file, text)
            .and_then(|()| {
                std::fs::set_permissions(&env_file, std::fs::Permissions::from_mode(0o600))
            })
            .map_err(|e| format!("could not write the environment: {e}"))?;
        let ssh = ssh::for_instance(
            self.path("ssh", launch.id),
            self.keygen.as_deref(),
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
        let mut argv = vec![self.engine.clone().into_os_string()];
        argv.extend(run_args(
            launch,
            &scratch,
            &env_file,
            ssh_dir.as_deref(),
            self.pids_max,
        ));
        argv.extend(super::program_line(launch.command, ssh_dir.is_some()));
        Ok(Prepared {
            argv,
            env: super::base_env("/"),
            cwd: PathBuf::from("/"),
            cgroup_procs: Vec::new(),
            access,
            fds: Vec::new(),
            network: None,
        })
    }

    /// podman forwards the group's SIGTERM to the container and waits.
    fn stop(&self, _id: Uuid, _uid: u32) -> bool {
        false
    }

    fn authorize(&self, id: Uuid, keys: &[String]) {
        let dir = self.path("ssh", id);
        if dir.exists() {
            (SshDir { dir }).authorize(keys).ok();
        }
    }

    fn ending(&self, id: Uuid) -> Option<String> {
        let out = Command::new(&self.engine)
            .args([
                "inspect",
                "--format",
                "{{.State.OOMKilled}}",
                &container_name(id),
            ])
            .output()
            .ok()?;
        (String::from_utf8_lossy(&out.stdout).trim() == "true").then(|| {
            "out of memory: the kernel killed the workload for using more memory than its \
             instance type has"
                .to_owned()
        })
    }

    fn clean(&self, id: Uuid) -> bool {
        Command::new(&self.engine)
            .args(["rm", "--force", &container_name(id)])
            .output()
            .ok();
        for what in ["scratch", "ssh", "env"] {
            let path = self.path(what, id);
            if path.is_dir() {
                std::fs::remove_dir_all(path).ok();
            } else {
                std::fs::remove_file(path).ok();
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::cgroup::Limits;
    use crate::runtime::{Image, PortMapping};

    #[test]
    fn the_cdi_spec_names_each_gpu_and_the_shared_nodes() {
        let dir = std::env::temp_dir().join(format!("gantry-cdi-{}", Uuid::now_v7()));
        let gpus = crate::discovery::simulated("2xH100-SXM-80GB").expect("GPUs");
        let devices = GpuDevices::simulated(&dir, &gpus).expect("stand-ins");
        let spec = cdi_spec(&devices, &gpus);
        let host = |name: &str| dir.join("dev").join(name).display().to_string();
        assert_eq!(
            spec,
            json!({
                "cdiVersion": "0.6.0",
                "kind": "nvidia.com/gpu",
                "devices": [
                    { "name": "0", "containerEdits": { "deviceNodes": [
                        { "path": "/dev/nvidia0", "hostPath": host("nvidia0") } ] } },
                    { "name": "1", "containerEdits": { "deviceNodes": [
                        { "path": "/dev/nvidia1", "hostPath": host("nvidia1") } ] } },
                ],
                "containerEdits": { "deviceNodes": [
                    { "path": "/dev/nvidiactl", "hostPath": host("nvidiactl") },
                    { "path": "/dev/nvidia-uvm", "hostPath": host("nvidia-uvm") },
                ] },
            })
        );
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn each_mig_instance_is_a_cdi_device_of_its_own() {
        let dir = std::env::temp_dir().join(format!("gantry-cdi-{}", Uuid::now_v7()));
        let gpus = crate::discovery::simulated("1xH100-SXM-80GB:mig=3g.40gb*2").expect("GPUs");
        let devices = GpuDevices::simulated(&dir, &gpus).expect("stand-ins");
        let spec = cdi_spec(&devices, &gpus);
        let host = |name: &str| dir.join("dev").join(name).display().to_string();
        let mig = &gpus[0].mig_devices[1];
        let entry = spec["devices"]
            .as_array()
            .and_then(|all| all.iter().find(|d| d["name"] == mig.uuid.as_str()))
            .expect("the instance is a device");
        let mut nodes = vec![json!({ "path": "/dev/nvidia0", "hostPath": host("nvidia0") })];
        nodes.extend(mig.caps.iter().map(|minor| {
            let name = format!("nvidia-caps/nvidia-cap{minor}");
            json!({ "path": format!("/dev/{name}"), "hostPath": host(&name) })
        }));
        assert_eq!(entry["containerEdits"]["deviceNodes"], json!(nodes));
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn a_container_gets_the_sandboxs_guarantees_in_podmans_words() {
        let id = Uuid::from_u128(7);
        let env = HashMap::new();
        let image = Image {
            name: "pytorch".into(),
            reference: "nvcr.io/nvidia/pytorch:24.05-py3".into(),
        };
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
            image: Some(&image),
            uid: 200_001,
            ssh_port: Some(42_017),
            ssh_keys: &[],
            ports: &[PortMapping {
                port: 8888,
                node_port: 42_018,
            }],
            private_network: true,
        };
        let args: Vec<String> = run_args(
            &launch,
            Path::new("/var/lib/gantry-agent/scratch/x"),
            Path::new("/var/lib/gantry-agent/env/x"),
            Some(Path::new("/var/lib/gantry-agent/ssh/x")),
            4096,
        )
        .into_iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
        let expected = [
            "run",
            "--replace",
            "--name",
            "gantry-00000000-0000-0000-0000-000000000007",
            "--hostname",
            "gantry",
            "--user",
            "200001:200001",
            "--cap-drop=all",
            "--security-opt=no-new-privileges",
            "--read-only",
            "--tmpfs",
            "/tmp:rw,mode=1777",
            "--network=slirp4netns:allow_host_loopback=false",
            "--cpus=12.500",
            "--memory=65536m",
            "--memory-swap=65536m",
            "--pids-limit=4096",
            "--env-file",
            "/var/lib/gantry-agent/env/x",
            "--volume",
            "/var/lib/gantry-agent/scratch/x:/scratch:rw",
            "--workdir",
            "/scratch",
            "--publish",
            "42018:42018",
            "--publish",
            "42017:42017",
            "--device",
            "nvidia.com/gpu=1",
            "--device",
            "nvidia.com/gpu=3",
            "--volume",
            "/var/lib/gantry-agent/ssh/x:/run/gantry-ssh:ro",
            "--volume",
            "/var/lib/gantry-agent/ssh/x/passwd:/etc/passwd:ro",
            "--volume",
            "/var/lib/gantry-agent/ssh/x/group:/etc/group:ro",
            "nvcr.io/nvidia/pytorch:24.05-py3",
        ];
        assert_eq!(args, expected);
    }
}
