//! Control groups that hold each workload to its instance type: CPU time,
//! the CPUs it may run on (so `nproc` says its size), memory (with no swap
//! to escape into), a ceiling on processes, and on a v1 hierarchy a device
//! list that admits only its own GPUs. Both layouts are handled: the
//! unified v2 tree where it is mounted, the v1 controllers (`cpu`,
//! `cpuset`, `memory`, `pids`, `devices`) otherwise.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Device numbers every workload may use: null, zero, full, random,
/// urandom, tty, ptmx and the pseudo-terminals (for SSH sessions).
const BASE_DEVICES: &[&str] = &[
    "c 1:3 rwm",
    "c 1:5 rwm",
    "c 1:7 rwm",
    "c 1:8 rwm",
    "c 1:9 rwm",
    "c 5:0 rwm",
    "c 5:2 rwm",
    "c 136:* rwm",
];

/// What a workload may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub cpu_milli: u64,
    pub memory_mib: u64,
    pub pids: u64,
}

#[derive(Debug, Clone)]
enum Layout {
    /// The unified hierarchy at this path.
    V2(PathBuf),
    /// One directory per v1 controller.
    V1 {
        cpu: PathBuf,
        cpuset: PathBuf,
        memory: PathBuf,
        pids: PathBuf,
        devices: PathBuf,
    },
}

/// The node's cgroup hierarchy, with a `gantry` parent for workloads.
#[derive(Debug, Clone)]
pub struct Cgroups {
    layout: Layout,
}

/// One workload's groups.
#[derive(Debug, Clone)]
pub struct Group {
    dirs: Vec<PathBuf>,
    /// Where its memory events are counted.
    events: PathBuf,
}

impl Cgroups {
    /// The hierarchy under `root` (normally `/sys/fs/cgroup`), or a message
    /// saying what is missing.
    pub fn detect(root: &Path) -> Result<Self, String> {
        if root.join("cgroup.controllers").exists() {
            let controllers = std::fs::read_to_string(root.join("cgroup.controllers"))
                .map_err(|e| format!("reading {}: {e}", root.display()))?;
            for wanted in ["cpu", "cpuset", "memory", "pids"] {
                if !controllers.split_whitespace().any(|c| c == wanted) {
                    return Err(format!(
                        "the cgroup v2 hierarchy at {} lacks the {wanted} controller",
                        root.display()
                    ));
                }
            }
            let parent = root.join("gantry");
            std::fs::create_dir_all(&parent)
                .map_err(|e| format!("creating {}: {e}", parent.display()))?;
            // Controllers must be handed down level by level.
            for dir in [root, parent.as_path()] {
                std::fs::write(
                    dir.join("cgroup.subtree_control"),
                    "+cpu +cpuset +memory +pids",
                )
                .map_err(|e| format!("enabling controllers in {}: {e}", dir.display()))?;
            }
            return Ok(Self {
                layout: Layout::V2(parent),
            });
        }
        let controller = |name: &str| -> Result<PathBuf, String> {
            let mount = root.join(name);
            if !mount.join("cgroup.procs").exists() {
                return Err(format!(
                    "no cgroup v2 hierarchy and no v1 {name} controller under {}",
                    root.display()
                ));
            }
            let parent = mount.join("gantry");
            std::fs::create_dir_all(&parent)
                .map_err(|e| format!("creating {}: {e}", parent.display()))?;
            Ok(parent)
        };
        let cpuset = controller("cpuset")?;
        // A v1 cpuset group admits no process until it has CPUs and memory
        // nodes: the parent takes the root's.
        for file in ["cpuset.cpus", "cpuset.mems"] {
            let all = std::fs::read_to_string(root.join("cpuset").join(file))
                .map_err(|e| format!("reading the node's {file}: {e}"))?;
            std::fs::write(cpuset.join(file), all.trim())
                .map_err(|e| format!("writing {file} for workloads: {e}"))?;
        }
        Ok(Self {
            layout: Layout::V1 {
                cpu: controller("cpu")?,
                cpuset,
                memory: controller("memory")?,
                pids: controller("pids")?,
                devices: controller("devices")?,
            },
        })
    }

    /// Creates (or resets) the groups of workload `name` with its limits,
    /// on the CPUs `cpus` (such as `0-3,8`); `devices` are the
    /// `major:minor` numbers of its GPUs' device nodes, or None where the
    /// container runtime keeps the device list of a group below this one.
    pub fn create(
        &self,
        name: &str,
        limits: Limits,
        cpus: &str,
        devices: Option<&[(u32, u32)]>,
    ) -> std::io::Result<Group> {
        let quota = limits.cpu_milli.max(10) * 100;
        let memory = (limits.memory_mib.max(16) * 1024 * 1024).to_string();
        match &self.layout {
            Layout::V2(parent) => {
                let dir = parent.join(name);
                std::fs::create_dir_all(&dir)?;
                std::fs::write(dir.join("cpu.max"), format!("{quota} 100000"))?;
                std::fs::write(dir.join("cpuset.cpus"), cpus)?;
                std::fs::write(dir.join("memory.max"), &memory)?;
                write_if_present(&dir.join("memory.swap.max"), "0")?;
                std::fs::write(dir.join("pids.max"), limits.pids.to_string())?;
                Ok(Group {
                    events: dir.join("memory.events"),
                    dirs: vec![dir],
                })
            }
            Layout::V1 {
                cpu,
                cpuset,
                memory: mem,
                pids,
                devices: dev,
            } => {
                let dirs: Vec<PathBuf> = [cpu, mem, pids, dev, cpuset]
                    .iter()
                    .map(|p| p.join(name))
                    .collect();
                for dir in &dirs {
                    std::fs::create_dir_all(dir)?;
                }
                std::fs::write(dirs[0].join("cpu.cfs_period_us"), "100000")?;
                std::fs::write(dirs[0].join("cpu.cfs_quota_us"), quota.to_string())?;
                std::fs::write(dirs[1].join("memory.limit_in_bytes"), &memory)?;
                // Swap counts against the same ceiling: none to escape into.
                write_if_present(&dirs[1].join("memory.memsw.limit_in_bytes"), &memory)?;
                std::fs::write(dirs[2].join("pids.max"), limits.pids.to_string())?;
                if let Some(devices) = devices {
                    std::fs::write(dirs[3].join("devices.deny"), "a")?;
                    let own = devices
                        .iter()
                        .map(|(major, minor)| format!("c {major}:{minor} rwm"));
                    for rule in BASE_DEVICES.iter().map(|r| (*r).to_owned()).chain(own) {
                        std::fs::write(dirs[3].join("devices.allow"), rule)?;
                    }
                }
                let mems = std::fs::read_to_string(cpuset.join("cpuset.mems"))?;
                std::fs::write(dirs[4].join("cpuset.mems"), mems.trim())?;
                std::fs::write(dirs[4].join("cpuset.cpus"), cpus)?;
                Ok(Group {
                    events: dirs[1].join("memory.oom_control"),
                    dirs,
                })
            }
        }
    }

    /// The groups of workload `name`, as made by an earlier run.
    pub fn existing(&self, name: &str) -> Group {
        match &self.layout {
            Layout::V2(parent) => Group {
                events: parent.join(name).join("memory.events"),
                dirs: vec![parent.join(name)],
            },
            Layout::V1 {
                cpu,
                cpuset,
                memory,
                pids,
                devices,
            } => Group {
                events: memory.join(name).join("memory.oom_control"),
                dirs: [cpu, memory, pids, devices, cpuset]
                    .iter()
                    .map(|p| p.join(name))
                    .collect(),
            },
        }
    }

    /// Where a container runtime puts groups under workload `name`'s, as
    /// its `--cgroup-parent` (relative to each hierarchy's root).
    pub fn parent_path(&self, name: &str) -> String {
        format!("/gantry/{name}")
    }
}

fn write_if_present(path: &Path, value: &str) -> std::io::Result<()> {
    if path.exists() {
        std::fs::write(path, value)?;
    }
    Ok(())
}

impl Group {
    /// The files a new process writes its pid into to join every group.
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.dirs.iter().map(|d| d.join("cgroup.procs")).collect()
    }

    /// How many times the kernel killed a process here for memory.
    pub fn oom_kills(&self) -> u64 {
        let Ok(text) = std::fs::read_to_string(&self.events) else {
            return 0;
        };
        // v1's memory.oom_control and v2's memory.events share the line.
        text.lines()
            .filter_map(|l| l.split_once(' '))
            .find(|(key, _)| *key == "oom_kill")
            .and_then(|(_, n)| n.trim().parse().ok())
            .unwrap_or(0)
    }

    /// The processes in the group and in the groups below it.
    fn pids(&self) -> Vec<i32> {
        fn collect(dir: &Path, pids: &mut Vec<i32>) {
            if let Ok(text) = std::fs::read_to_string(dir.join("cgroup.procs")) {
                pids.extend(text.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
            }
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    collect(&entry.path(), pids);
                }
            }
        }
        let mut pids = Vec::new();
        if let Some(dir) = self.dirs.first() {
            collect(dir, &mut pids);
        }
        pids
    }

    /// SIGKILL for every process still in the group (one that left the
    /// workload's process group or PID namespace included).
    pub fn kill_all(&self) {
        for pid in self.pids() {
            signal(pid, libc::SIGKILL);
        }
    }

    /// `sig` for the group's processes inside the workload's own PID
    /// namespace, but for its first process (which ends the namespace):
    /// the runtime's helpers outside it live on through the grace period.
    pub fn signal_inside(&self, sig: i32) {
        for pid in self.pids() {
            let inner = std::fs::read_to_string(format!("/proc/{pid}/status"))
                .ok()
                .and_then(|status| {
                    status
                        .lines()
                        .find_map(|l| l.strip_prefix("NSpid:"))
                        .map(|ids| ids.split_whitespace().skip(1).last().map(str::to_owned))
                });
            if matches!(inner, Some(Some(ref id)) if id != "1") {
                signal(pid, sig);
            }
        }
    }

    /// The directories of the group, by controller name, to show the
    /// workload read-only (the first of a v2 tree is the whole group).
    pub fn dirs(&self) -> &[PathBuf] {
        &self.dirs
    }

    /// Makes (or finds) a group below this one for helpers of the
    /// workload, whose processes a v2 tree may not keep beside its
    /// children: the `cgroup.procs` files to join it by.
    pub fn child_procs(&self, name: &str) -> std::io::Result<Vec<PathBuf>> {
        self.dirs
            .iter()
            .map(|dir| {
                let child = dir.join(name);
                std::fs::create_dir_all(&child)?;
                // A v1 cpuset child starts with neither CPUs nor memory.
                for file in ["cpuset.cpus", "cpuset.mems"] {
                    if let Ok(value) = std::fs::read_to_string(dir.join(file)) {
                        std::fs::write(child.join(file), value.trim())?;
                    }
                }
                Ok(child.join("cgroup.procs"))
            })
            .collect()
    }

    /// Removes the groups (and any below them); false while processes are
    /// still leaving.
    pub fn remove(&self) -> bool {
        self.dirs.iter().all(|d| !d.exists() || remove_tree(d))
    }
}

/// `cgroup.procs` paths as [`join`] takes them, made before a fork.
pub fn procs_cstrings(files: &[PathBuf]) -> Vec<CString> {
    files
        .iter()
        .filter_map(|p| CString::new(p.as_os_str().as_bytes()).ok())
        .collect()
}

/// Moves the calling (just forked) process into each cgroup by writing its
/// pid to the `cgroup.procs` files.
pub fn join(files: &[CString]) -> std::io::Result<()> {
    // SAFETY: getpid(2) has no preconditions.
    let pid = unsafe { libc::getpid() };
    let mut digits = [0u8; 12];
    let mut at = digits.len();
    let mut rest = pid.unsigned_abs();
    loop {
        at -= 1;
        digits[at] = b'0' + u8::try_from(rest % 10).unwrap_or(0);
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    for file in files {
        // SAFETY: open/write/close on a NUL-terminated path made before the
        // fork and a buffer on this stack.
        let written = unsafe {
            let fd = libc::open(file.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let n = libc::write(fd, digits[at..].as_ptr().cast(), digits.len() - at);
            libc::close(fd);
            n
        };
        if written < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Removes a group and the groups below it, deepest first.
fn remove_tree(dir: &Path) -> bool {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) && !remove_tree(&entry.path()) {
                return false;
            }
        }
    }
    std::fs::remove_dir(dir).is_ok()
}

fn signal(pid: i32, sig: i32) {
    // SAFETY: kill(2) takes plain integers and touches no memory.
    unsafe {
        libc::kill(pid, sig);
    }
}
