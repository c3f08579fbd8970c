//! The `vm` runtime: each instance is a virtual machine with a kernel of
//! its own. QEMU with KVM runs it, with the instance type's vCPUs and
//! memory, a disk of the type's size (a copy-on-write overlay over the
//! image the operator placed on the node), the tenant's keys and host name
//! by cloud-init, and its GPUs passed through by VFIO.
//!
//! QEMU itself is fenced as a sandbox's workload is: it runs as root of a
//! user namespace of its own (an unprivileged id range on the node), in
//! bubblewrap's mount, PID, IPC and network namespaces, seeing only the
//! node's programs read-only, its own files and its own `/dev/kvm`, and
//! behind QEMU's own seccomp filter. Its network is QEMU's user-mode NAT
//! inside a namespace that slirp4netns connects to the outside with the
//! node's loopback out of reach, so the guest reaches neither the node's
//! services nor its neighbours, and only its SSH and exposed ports come in.
//!
//! The serial console is the order's log. Stopping asks the guest to shut
//! down (ACPI, over QMP), then kills it when the grace period ends. A
//! reboot from inside keeps the same QEMU. QEMU outlives the agent: a
//! restarted one finds it by its process group and drives it over its QMP
//! socket.

mod qemu;
pub mod qmp;
mod seed;
pub mod vfio;

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use uuid::Uuid;

use super::sandbox::{self, Node};
use super::{Access, Inside, Launch, Prepared, Runtime, RuntimeKind, SshAccess, find_program};
use crate::{network, userns};

/// Memory QEMU needs beside the guest's, in its cgroup.
const OVERHEAD_MIB: u64 = 256;
/// Where the VM's own files are inside its view.
const INSIDE: &str = "/vm";
/// The KVM device.
const KVM: &str = "/dev/kvm";
/// Where a VM's directory notes the PCI functions it was given.
const PASSTHROUGH: &str = "passthrough.json";

/// How QEMU runs guests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Accel {
    /// The CPU's virtualization through `/dev/kvm`.
    Kvm,
    /// QEMU's own emulation: many times slower, for machines whose KVM
    /// cannot boot a stock kernel (nested or paravirtual ones).
    Tcg,
}

impl Accel {
    /// QEMU's `-accel`. Emulation's cache of translated code is held to
    /// 128 MiB (QEMU's default is 1 GiB), inside the VM's overhead.
    pub fn qemu_arg(self) -> &'static str {
        match self {
            Self::Kvm => "kvm",
            Self::Tcg => "tcg,tb-size=128",
        }
    }
}

/// Programs the runtime needs on the node.
#[derive(Debug, Clone)]
pub struct Tools {
    pub qemu: PathBuf,
    pub qemu_img: PathBuf,
    pub genisoimage: PathBuf,
    pub ssh_keygen: PathBuf,
    pub bwrap: PathBuf,
    pub nsenter: PathBuf,
    /// The guest's way out: without it QEMU's own NAT would hand the guest
    /// the node's loopback.
    pub slirp4netns: PathBuf,
}

impl Tools {
    /// Finds them and checks that KVM can be used (where it is to be), or
    /// says what is missing.
    pub fn find(accel: Accel) -> Result<Self, String> {
        let need = |program: &str, package: &str| {
            find_program(program).ok_or(format!(
                "the vm runtime needs {program}: install the Debian package `{package}`"
            ))
        };
        let tools = Self {
            qemu: need("qemu-system-x86_64", "qemu-system-x86")?,
            qemu_img: need("qemu-img", "qemu-utils")?,
            genisoimage: need("genisoimage", "genisoimage")?,
            ssh_keygen: need("ssh-keygen", "openssh-client")?,
            bwrap: need("bwrap", "bubblewrap")?,
            nsenter: need("nsenter", "util-linux")?,
            slirp4netns: need("slirp4netns", "slirp4netns")?,
        };
        if accel == Accel::Tcg {
            return Ok(tools);
        }
        std::fs::File::options()
            .read(true)
            .write(true)
            .open(KVM)
            .map_err(|e| {
                format!(
                    "the vm runtime needs KVM, and {KVM} cannot be opened ({e}): turn on \
                     virtualization in the firmware and load kvm_intel or kvm_amd"
                )
            })?;
        Ok(tools)
    }
}

/// How the operator set the runtime up.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where VM images are: `NAME.qcow2` for the catalog's image `NAME`.
    pub image_dir: PathBuf,
    /// What instances that name no image boot.
    pub default_image: String,
    pub accel: Accel,
    /// QEMU's CPU model.
    pub cpu: String,
    /// How long a VM has to answer on SSH before its order fails.
    pub boot: Duration,
    /// Bytes of the node's disk no VM's disk may take.
    pub disk_reserve: u64,
    /// Each GPU index's PCI address (empty for simulated GPUs, which
    /// cannot be passed through).
    pub gpu_addresses: Vec<String>,
}

pub struct Vm {
    tools: Tools,
    node: Node,
    settings: Settings,
}

/// What one VM's preparation leaves for QEMU: its files and passthrough.
struct Files {
    run: PathBuf,
    fingerprint: String,
    devices: Vec<(PathBuf, PathBuf)>,
    numbers: Vec<(u32, u32)>,
    passthrough: Vec<String>,
}

impl Vm {
    pub fn new(tools: Tools, node: Node, settings: Settings) -> Self {
        Self {
            tools,
            node,
            settings,
        }
    }

    fn dir(&self, id: Uuid) -> PathBuf {
        self.node.state_dir.join("vms").join(id.to_string())
    }

    fn qmp(&self, id: Uuid) -> PathBuf {
        self.dir(id).join("run/qmp.sock")
    }

    /// The image's file, or why it cannot be booted here.
    fn image(&self, launch: &Launch<'_>) -> Result<(String, PathBuf), String> {
        let name = launch.image_name.unwrap_or(&self.settings.default_image);
        let plain = !name.is_empty()
            && !name.starts_with('.')
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
        if !plain {
            return Err(format!(
                "{name:?} is not a VM image name: VM nodes boot catalog images by name"
            ));
        }
        let file = self.settings.image_dir.join(format!("{name}.qcow2"));
        if !file.is_file() {
            return Err(format!(
                "VM image {name} is not on this node: an operator must place it at {}",
                file.display()
            ));
        }
        Ok((name.to_owned(), file))
    }

    /// Refuses a VM this node cannot hold: more vCPUs than it has CPUs,
    /// more memory than it has free, a disk that would eat its reserve.
    fn check_size(&self, launch: &Launch<'_>, vcpus: u32) -> Result<(), String> {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        if usize::try_from(vcpus).unwrap_or(usize::MAX) > cpus {
            return Err(format!(
                "the instance type's {vcpus} vCPUs are more than this node's {cpus} CPUs"
            ));
        }
        let wanted = launch.limits.memory_mib + OVERHEAD_MIB;
        let available = available_mib().unwrap_or(u64::MAX);
        if wanted > available {
            return Err(format!(
                "the instance type's {} MiB of memory (and {OVERHEAD_MIB} MiB for QEMU) do \
                 not fit in this node's {available} MiB free",
                launch.limits.memory_mib
            ));
        }
        let free = crate::disk::free_bytes(&self.node.state_dir).unwrap_or(0);
        if launch.disk.saturating_add(self.settings.disk_reserve) > free {
            return Err(format!(
                "a disk of {} does not fit on this node: {} free, {} kept in reserve",
                crate::disk::size(launch.disk),
                crate::disk::size(free),
                crate::disk::size(self.settings.disk_reserve)
            ));
        }
        Ok(())
    }

    /// Makes the VM's directory, user namespace, disk, seed and device
    /// nodes, and binds its GPUs to `vfio-pci`.
    fn make_files(&self, launch: &Launch<'_>, base: &Path) -> Result<Files, String> {
        let fail = |what: &str, e: &dyn std::fmt::Display| format!("{what}: {e}");
        let dir = self.dir(launch.id);
        let run = dir.join("run");
        std::fs::create_dir_all(&run).map_err(|e| fail("making the VM's directory", &e))?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711))
            .and_then(|()| std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o700)))
            .and_then(|()| std::os::unix::fs::chown(&run, Some(launch.uid), Some(launch.uid)))
            .map_err(|e| fail("locking the VM's directory", &e))?;
        userns::create(launch.uid, &dir.join("userns"))?;
        let disk = run.join("disk.qcow2");
        let made = Command::new(&self.tools.qemu_img)
            .args(["create", "-q", "-f", "qcow2", "-F", "qcow2", "-b"])
            .arg(base)
            .arg(&disk)
            .arg(launch.disk.to_string())
            .output()
            .map_err(|e| fail("running qemu-img", &e))?;
        if !made.status.success() {
            return Err(format!(
                "qemu-img could not make the VM's disk: {}",
                String::from_utf8_lossy(&made.stderr).trim()
            ));
        }
        let key = dir.join("ssh_host_ed25519_key");
        let fingerprint = crate::ssh::host_key(&self.tools.ssh_keygen, &key)?;
        let read = |path: &Path| {
            std::fs::read_to_string(path).map_err(|e| fail("reading the VM's host key", &e))
        };
        let (private, public) = (read(&key)?, read(&key.with_extension("pub"))?);
        let seed = run.join("seed.iso");
        seed::Seed {
            instance_id: &launch.id.to_string(),
            hostname: launch.hostname,
            keys: launch.ssh_keys,
            host_key_private: &private,
            host_key_public: &public,
        }
        .write(&self.tools.genisoimage, &seed)?;
        std::fs::write(dir.join("resolv.conf"), network::RESOLV_CONF)
            .map_err(|e| fail("writing the VM's resolver", &e))?;
        let mut devices = Vec::new();
        if self.settings.accel == Accel::Kvm {
            devices.push((run.join("kvm"), PathBuf::from(KVM)));
        }
        let functions = self.passthrough(launch, &dir)?;
        if !functions.is_empty() {
            devices.push((run.join("vfio"), PathBuf::from("/dev/vfio/vfio")));
            let groups: std::collections::BTreeSet<&str> =
                functions.iter().map(|f| f.group.as_str()).collect();
            devices.extend(groups.into_iter().map(|g| {
                (
                    run.join(format!("vfio-{g}")),
                    PathBuf::from(format!("/dev/vfio/{g}")),
                )
            }));
        }
        let mut numbers = Vec::new();
        for (own, shown) in &devices {
            numbers.push(own_node(shown, own, launch.uid)?);
        }
        for file in [&disk, &seed] {
            std::os::unix::fs::chown(file, Some(launch.uid), Some(launch.uid))
                .map_err(|e| fail("handing the VM its files", &e))?;
        }
        Ok(Files {
            run,
            fingerprint,
            devices,
            numbers,
            passthrough: functions.into_iter().map(|f| f.address).collect(),
        })
    }

    /// Binds the order's GPUs (and their slots' other functions) to
    /// `vfio-pci`, noting in the VM's directory what they were bound to;
    /// answers them. None on nodes whose GPUs are simulated.
    fn passthrough(&self, launch: &Launch<'_>, dir: &Path) -> Result<Vec<vfio::Function>, String> {
        let addresses: Vec<String> = launch
            .gpus
            .iter()
            .filter_map(|i| {
                self.settings
                    .gpu_addresses
                    .get(usize::try_from(*i).ok()?)
                    .cloned()
            })
            .filter(|a| !a.is_empty())
            .collect();
        if addresses.is_empty() {
            return Ok(Vec::new());
        }
        let sysfs = Path::new("/sys");
        let functions = vfio::plan(sysfs, &addresses)?;
        serde_json::to_vec(&functions)
            .map_err(std::io::Error::other)
            .and_then(|noted| std::fs::write(dir.join(PASSTHROUGH), noted))
            .map_err(|e| format!("noting the VM's passthrough: {e}"))?;
        vfio::apply(&vfio::bind(sysfs, &functions))?;
        Ok(functions)
    }

    /// bubblewrap's arguments: the node's programs read-only, the VM's
    /// own files and devices, nothing else.
    fn view(&self, files: &Files, base: &Path, hostname: &str) -> Vec<OsString> {
        let dir = files.run.parent().unwrap_or(&files.run);
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
            &hostname,
            &"--ro-bind",
            &"/usr",
            &"/usr",
        ]);
        for link in ["lib", "lib64", "bin", "sbin"] {
            push(&[&"--symlink", &format!("usr/{link}"), &format!("/{link}")]);
        }
        push(&[
            &"--ro-bind",
            &"/etc/ld.so.cache",
            &"/etc/ld.so.cache",
            &"--ro-bind",
            &dir.join("resolv.conf"),
            &"/etc/resolv.conf",
            &"--proc",
            &"/proc",
            &"--dev",
            &"/dev",
            &"--tmpfs",
            &"/tmp",
            &"--bind",
            &files.run,
            &INSIDE,
            &"--ro-bind",
            &base,
            &base,
        ]);
        for (own, shown) in &files.devices {
            push(&[&"--dev-bind", own, shown]);
        }
        push(&[&"--cap-drop", &"ALL", &"--chdir", &INSIDE]);
        args
    }
}

/// The node's free memory, from `/proc/meminfo`.
fn available_mib() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024)
}

/// A device node of the node's `shown`, made at `own` for the VM's root
/// alone (the node's is root's), as `major:minor` for its cgroup.
fn own_node(shown: &Path, own: &Path, uid: u32) -> Result<(u32, u32), String> {
    use std::os::unix::fs::MetadataExt;
    let fail = |e: &dyn std::fmt::Display| format!("making the VM's {}: {e}", shown.display());
    let rdev = std::fs::metadata(shown).map_err(|e| fail(&e))?.rdev();
    let path = std::ffi::CString::new(own.as_os_str().as_encoded_bytes()).map_err(|e| fail(&e))?;
    std::fs::remove_file(own).ok();
    // SAFETY: mknod(2) with a path we own and plain integers.
    if unsafe { libc::mknod(path.as_ptr(), libc::S_IFCHR | 0o600, rdev) } != 0 {
        return Err(fail(&std::io::Error::last_os_error()));
    }
    std::os::unix::fs::chown(own, Some(uid), Some(uid)).map_err(|e| fail(&e))?;
    Ok((libc::major(rdev), libc::minor(rdev)))
}

/// The passthrough a VM's directory notes (see `passthrough`).
fn noted_functions(dir: &Path) -> Vec<vfio::Function> {
    std::fs::read(dir.join(PASSTHROUGH))
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
}

impl Runtime for Vm {
    fn kind(&self) -> RuntimeKind {
        RuntimeKind::Vm
    }

    fn offers_ssh(&self) -> bool {
        true
    }

    fn prepare(&self, launch: &Launch<'_>) -> Result<Prepared, String> {
        let Some(ssh_port) = launch.ssh_port else {
            return Err(
                "this node runs virtual machines, which are instances: jobs run on sandbox \
                 and oci nodes"
                    .into(),
            );
        };
        let (name, base) = self.image(launch)?;
        let vcpus = u32::try_from(launch.limits.cpu_milli.div_ceil(1000))
            .unwrap_or(1)
            .max(1);
        self.check_size(launch, vcpus)?;
        let virtual_size = image_size(&self.tools.qemu_img, &base)?;
        if virtual_size > launch.disk {
            return Err(format!(
                "VM image {name} is a disk of {}, larger than the instance type's {}",
                crate::disk::size(virtual_size),
                crate::disk::size(launch.disk)
            ));
        }
        let files = self.make_files(launch, &base)?;
        let limits = crate::cgroup::Limits {
            memory_mib: launch.limits.memory_mib + OVERHEAD_MIB,
            ..self.node.limits(launch)
        };
        let group = self
            .node
            .cgroups
            .create(
                &self.node.group_name(launch.id),
                limits,
                launch.cpus,
                Some(&files.numbers),
            )
            .map_err(|e| format!("could not set the VM's limits: {e}"))?;
        let (info, info_theirs) =
            network::info_pipe().map_err(|e| format!("could not make a pipe: {e}"))?;
        let mut forwards = vec![qemu::Forward {
            outer: ssh_port,
            guest: 22,
        }];
        forwards.extend(launch.ports.iter().map(|p| qemu::Forward {
            outer: p.node_port,
            guest: p.port,
        }));
        let machine = qemu::Machine {
            name: format!("gantry-{}", launch.id.simple()),
            accel: self.settings.accel.qemu_arg(),
            cpu: self.settings.cpu.clone(),
            vcpus,
            memory_mib: launch.limits.memory_mib,
            disk: Path::new(INSIDE).join("disk.qcow2"),
            seed: Path::new(INSIDE).join("seed.iso"),
            qmp: Path::new(INSIDE).join("qmp.sock"),
            forwards,
            passthrough: files.passthrough.clone(),
        };
        let mut argv: Vec<OsString> = vec![
            self.tools.nsenter.clone().into(),
            format!("--user={}", self.dir(launch.id).join("userns").display()).into(),
            "--".into(),
            self.tools.bwrap.clone().into(),
            "--info-fd".into(),
            network::INFO_FD.to_string().into(),
        ];
        argv.extend(self.view(&files, &base, launch.hostname));
        let (network, block_theirs) = sandbox::private_network(&self.tools.slirp4netns, launch)?;
        argv.extend(["--unshare-net", "--block-fd"].map(OsString::from));
        argv.push(network::BLOCK_FD.to_string().into());
        let fds = vec![
            (info_theirs, network::INFO_FD),
            (block_theirs, network::BLOCK_FD),
        ];
        argv.push("--".into());
        argv.push(self.tools.qemu.clone().into());
        argv.extend(machine.args());
        Ok(Prepared {
            argv,
            env: super::base_env(INSIDE),
            cwd: PathBuf::from("/"),
            cgroup_procs: group.procs_files(),
            access: Access {
                ssh: Some(SshAccess {
                    user: crate::ssh::USER.to_owned(),
                    port: ssh_port,
                    host_key_fingerprint: files.fingerprint,
                }),
                ports: launch.ports.to_vec(),
            },
            fds,
            network: Some(network),
            inside: Some(Inside::Info(info)),
            ssh: None,
        })
    }

    /// Presses the VM's power button: the guest shuts down by itself
    /// within the grace period, or is killed when it ends.
    fn stop(&self, id: Uuid) -> bool {
        match qmp::execute(&self.qmp(id), "system_powerdown") {
            Ok(_) => true,
            Err(error) => {
                tracing::warn!(order = %id, %error, "cannot ask the VM to shut down");
                false
            }
        }
    }

    fn boot_deadline(&self) -> Option<Duration> {
        Some(self.settings.boot)
    }

    fn adopted(&self, id: Uuid) {
        match qmp::execute(&self.qmp(id), "query-status") {
            Ok(status) => {
                tracing::info!(order = %id, status = %status["status"], "reconnected to the VM")
            }
            Err(error) => tracing::warn!(order = %id, %error, "cannot reach the VM's QMP socket"),
        }
    }

    /// A VM's keys are the guest's own once it has booted: those given at
    /// boot stay until the tenant changes them inside.
    fn authorize(&self, id: Uuid, _keys: &[String]) {
        tracing::info!(order = %id, "a VM keeps the SSH keys it booted with");
    }

    fn ending(&self, id: Uuid) -> Option<String> {
        self.node.ending(id)
    }

    fn clean(&self, id: Uuid) -> bool {
        if !self.node.clean(id) {
            return false;
        }
        let dir = self.dir(id);
        let functions = noted_functions(&dir);
        if !functions.is_empty()
            && let Err(error) = vfio::apply(&vfio::release(Path::new("/sys"), &functions))
        {
            tracing::warn!(order = %id, %error, "cannot give the VM's GPUs back to their driver");
        }
        userns::release(&dir.join("userns"));
        if dir.exists()
            && let Err(error) = std::fs::remove_dir_all(&dir)
        {
            tracing::warn!(order = %id, %error, "cannot remove {}", dir.display());
            return false;
        }
        std::fs::remove_file(sandbox::socket(id)).ok();
        true
    }
}

/// The size of the disk an image is, from `qemu-img info`.
fn image_size(qemu_img: &Path, image: &Path) -> Result<u64, String> {
    let out = Command::new(qemu_img)
        .args(["info", "--output=json", "-U"])
        .arg(image)
        .output()
        .map_err(|e| format!("running qemu-img: {e}"))?;
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|_| {
        format!(
            "{} is not a disk image qemu-img reads: {}",
            image.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )
    })?;
    if info["format"] != "qcow2" {
        return Err(format!(
            "{} is a {} image; VM images are qcow2",
            image.display(),
            info["format"]
        ));
    }
    info["virtual-size"]
        .as_u64()
        .ok_or_else(|| format!("qemu-img gave no size for {}", image.display()))
}
