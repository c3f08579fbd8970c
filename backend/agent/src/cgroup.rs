//! Control groups that hold each sandboxed workload to its instance type:
//! CPU, memory (with no swap to escape into), a ceiling on processes, and
//! on a v1 hierarchy a device list that admits only its own GPUs. Both
//! layouts are handled: the unified v2 tree where it is mounted, the v1
//! controllers (`cpu`, `memory`, `pids`, `devices`) otherwise.

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
            for wanted in ["cpu", "memory", "pids"] {
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
                std::fs::write(dir.join("cgroup.subtree_control"), "+cpu +memory +pids")
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
        Ok(Self {
            layout: Layout::V1 {
                cpu: controller("cpu")?,
                memory: controller("memory")?,
                pids: controller("pids")?,
                devices: controller("devices")?,
            },
        })
    }

    /// Creates (or resets) the groups of workload `name` with its limits;
    /// `devices` are the `major:minor` numbers of its GPUs' device nodes.
    pub fn create(
        &self,
        name: &str,
        limits: Limits,
        devices: &[(u32, u32)],
    ) -> std::io::Result<Group> {
        let quota = limits.cpu_milli.max(10) * 100;
        let memory = (limits.memory_mib.max(16) * 1024 * 1024).to_string();
        match &self.layout {
            Layout::V2(parent) => {
                let dir = parent.join(name);
                std::fs::create_dir_all(&dir)?;
                std::fs::write(dir.join("cpu.max"), format!("{quota} 100000"))?;
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
                memory: mem,
                pids,
                devices: dev,
            } => {
                let dirs: Vec<PathBuf> =
                    [cpu, mem, pids, dev].iter().map(|p| p.join(name)).collect();
                for dir in &dirs {
                    std::fs::create_dir_all(dir)?;
                }
                std::fs::write(dirs[0].join("cpu.cfs_period_us"), "100000")?;
                std::fs::write(dirs[0].join("cpu.cfs_quota_us"), quota.to_string())?;
                std::fs::write(dirs[1].join("memory.limit_in_bytes"), &memory)?;
                // Swap counts against the same ceiling: none to escape into.
                write_if_present(&dirs[1].join("memory.memsw.limit_in_bytes"), &memory)?;
                std::fs::write(dirs[2].join("pids.max"), limits.pids.to_string())?;
                std::fs::write(dirs[3].join("devices.deny"), "a")?;
                let own = devices
                    .iter()
                    .map(|(major, minor)| format!("c {major}:{minor} rwm"));
                for rule in BASE_DEVICES.iter().map(|r| (*r).to_owned()).chain(own) {
                    std::fs::write(dirs[3].join("devices.allow"), rule)?;
                }
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
                memory,
                pids,
                devices,
            } => Group {
                events: memory.join(name).join("memory.oom_control"),
                dirs: [cpu, memory, pids, devices]
                    .iter()
                    .map(|p| p.join(name))
                    .collect(),
            },
        }
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

    /// The processes in the group.
    fn pids(&self) -> Vec<i32> {
        self.dirs
            .first()
            .and_then(|dir| std::fs::read_to_string(dir.join("cgroup.procs")).ok())
            .map(|text| text.lines().filter_map(|l| l.trim().parse().ok()).collect())
            .unwrap_or_default()
    }

    /// SIGKILL for every process still in the group (one that left the
    /// workload's process group or PID namespace included).
    pub fn kill_all(&self) {
        for pid in self.pids() {
            signal(pid, libc::SIGKILL);
        }
    }

    /// `sig` for the group's processes whose real user is `uid`.
    pub fn signal_user(&self, uid: u32, sig: i32) {
        for pid in self.pids() {
            let owner = std::fs::read_to_string(format!("/proc/{pid}/status"))
                .ok()
                .and_then(|status| {
                    status
                        .lines()
                        .find_map(|l| l.strip_prefix("Uid:"))
                        .and_then(|ids| ids.split_whitespace().next())
                        .and_then(|id| id.parse::<u32>().ok())
                });
            if owner == Some(uid) {
                signal(pid, sig);
            }
        }
    }

    /// Removes the groups; false while processes are still leaving.
    pub fn remove(&self) -> bool {
        self.dirs
            .iter()
            .all(|d| !d.exists() || std::fs::remove_dir(d).is_ok())
    }
}

fn signal(pid: i32, sig: i32) {
    // SAFETY: kill(2) takes plain integers and touches no memory.
    unsafe {
        libc::kill(pid, sig);
    }
}
