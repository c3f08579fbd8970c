//! What a workload sees, as bubblewrap arguments: its root (see `root`), a
//! fresh `/proc` whose memory and CPU files say its instance type's size
//! (lxcfs), a `/dev` with only its own GPUs, its shared `/dev/shm`, a
//! read-only `/sys` whose cgroup directory holds only its own groups,
//! read-only. The sandbox runtime builds it at `/`; an instance's SSH
//! server builds the same view under its own, for the sessions it starts.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::devices::DeviceNode;
use crate::driver::DriverFile;
use crate::root::Root;

/// Files lxcfs answers for the reading process's cgroup, shown over the
/// kernel's.
pub const LXCFS_FILES: &[&str] = &[
    "proc/cpuinfo",
    "proc/diskstats",
    "proc/loadavg",
    "proc/meminfo",
    "proc/stat",
    "proc/swaps",
    "proc/uptime",
    "sys/devices/system/cpu/online",
];

/// The parts of a workload's view.
pub struct View<'a> {
    pub root: &'a Root,
    pub devices: &'a [DeviceNode],
    /// The NVIDIA driver's files, for a workload with GPUs.
    pub driver: &'a [DriverFile],
    /// The workload's cgroup directories, shown read-only.
    pub cgroups: &'a [PathBuf],
    /// Where lxcfs is mounted on the node, when it is.
    pub lxcfs: Option<&'a Path>,
}

/// Where lxcfs is mounted, if it is at `dir`.
pub fn lxcfs_at(dir: &Path) -> Option<PathBuf> {
    dir.join("proc/meminfo").exists().then(|| dir.to_owned())
}

impl View<'_> {
    /// bubblewrap arguments that build the view at `at` (`/` or a
    /// directory of a view of its own).
    pub fn args(&self, at: &Path) -> Vec<OsString> {
        let mut args: Vec<OsString> = Vec::new();
        let inside = |path: &str| at.join(path.trim_start_matches('/'));
        let mut push = |items: &[&dyn AsRef<std::ffi::OsStr>]| {
            args.extend(items.iter().map(|i| i.as_ref().to_owned()));
        };
        push(&[&"--bind", &self.root.tree, &at]);
        push(&[
            &"--proc",
            &inside("proc"),
            &"--dev",
            &inside("dev"),
            &"--bind",
            &self.root.shm,
            &inside("dev/shm"),
        ]);
        let hosts = self.root.hosts();
        if hosts.exists() {
            push(&[&"--ro-bind", &hosts, &inside("etc/hosts")]);
        }
        // Directories under /dev (MIG's nvidia-caps) are made readable:
        // bubblewrap would make them root's alone.
        let mut dirs: Vec<&Path> = self
            .devices
            .iter()
            .filter_map(|d| d.inside.parent())
            .filter(|dir| *dir != Path::new("/dev"))
            .collect();
        dirs.sort_unstable();
        dirs.dedup();
        for dir in dirs {
            push(&[
                &"--perms",
                &"0755",
                &"--dir",
                &inside(&dir.display().to_string()),
            ]);
        }
        for device in self.devices {
            push(&[
                &"--dev-bind",
                &device.host,
                &inside(&device.inside.display().to_string()),
            ]);
        }
        if !self.devices.is_empty() {
            for file in self.driver {
                push(&[
                    &"--ro-bind",
                    &file.host,
                    &inside(&file.inside.display().to_string()),
                ]);
            }
        }
        // Read-only, as container runtimes show it (CUDA and NVML read PCI
        // topology there), with none of the node's cgroups but its own.
        push(&[
            &"--ro-bind-try",
            &"/sys",
            &inside("sys"),
            &"--tmpfs",
            &inside("sys/fs/cgroup"),
        ]);
        for dir in self.cgroups {
            let controller = controller_of(dir);
            push(&[
                &"--ro-bind",
                dir,
                &inside(&format!("sys/fs/cgroup/{controller}")),
            ]);
        }
        push(&[&"--remount-ro", &inside("sys/fs/cgroup")]);
        if let Some(lxcfs) = self.lxcfs {
            for file in LXCFS_FILES {
                push(&[&"--ro-bind-try", &lxcfs.join(file), &inside(file)]);
            }
        }
        args
    }
}

/// The controller a v1 group directory belongs to (`…/memory/gantry/x`),
/// or the empty name of the v2 tree, shown as the whole directory.
fn controller_of(dir: &Path) -> String {
    let parts: Vec<String> = dir
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    parts
        .iter()
        .position(|p| p == "gantry")
        .and_then(|at| at.checked_sub(1))
        .and_then(|at| parts.get(at))
        .filter(|name| *name != "cgroup")
        .cloned()
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_is_shown_under_its_controller() {
        assert_eq!(
            controller_of(Path::new("/sys/fs/cgroup/memory/gantry/abc-1")),
            "memory"
        );
        assert_eq!(controller_of(Path::new("/sys/fs/cgroup/gantry/abc-1")), "");
    }
}
