//! The device nodes a workload's GPUs need, as NVIDIA's container toolkit
//! maps them: `/dev/nvidiaN` for each of its GPUs, plus the shared control
//! and unified-memory nodes. Simulated GPUs get stand-ins in the agent's
//! state directory (character devices that behave like `/dev/null`), so
//! that what a workload can open is tested on machines without GPUs.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Nodes every GPU workload gets besides its GPUs' own.
const SHARED: &[&str] = &[
    "nvidiactl",
    "nvidia-uvm",
    "nvidia-uvm-tools",
    "nvidia-modeset",
];

/// One device node: where it is on the node, where the workload sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceNode {
    pub host: PathBuf,
    pub inside: PathBuf,
}

impl DeviceNode {
    /// Its `major:minor`, when it is a character device.
    pub fn number(&self) -> Option<(u32, u32)> {
        let meta = std::fs::metadata(&self.host).ok()?;
        if !meta.file_type().is_char_device() {
            return None;
        }
        let rdev = meta.rdev();
        Some((libc::major(rdev), libc::minor(rdev)))
    }
}

/// Where this node's GPU device nodes are.
#[derive(Debug, Clone)]
pub struct GpuDevices {
    dir: PathBuf,
    /// The `/dev/nvidiaN` number of each GPU index (NVML's minor number,
    /// which need not equal the index).
    minors: Vec<u32>,
}

impl GpuDevices {
    /// The real nodes under `/dev`.
    pub fn real(minors: Vec<u32>) -> Self {
        Self {
            dir: PathBuf::from("/dev"),
            minors,
        }
    }

    /// Stand-ins for `count` simulated GPUs under `state_dir/dev`.
    pub fn simulated(state_dir: &Path, count: usize) -> std::io::Result<Self> {
        let dir = state_dir.join("dev");
        std::fs::create_dir_all(&dir)?;
        let names = (0..count)
            .map(|i| format!("nvidia{i}"))
            .chain(SHARED[..2].iter().map(|s| (*s).to_owned()));
        for name in names {
            stand_in(&dir.join(name))?;
        }
        Ok(Self {
            dir,
            minors: (0..u32::try_from(count).unwrap_or(0)).collect(),
        })
    }

    /// The node of the GPU with this index, if present.
    pub fn gpu(&self, index: u32) -> Option<DeviceNode> {
        let minor = self.minors.get(index as usize)?;
        self.node(&format!("nvidia{minor}"))
    }

    /// The control and unified-memory nodes present on this machine.
    pub fn shared(&self) -> Vec<DeviceNode> {
        SHARED.iter().filter_map(|name| self.node(name)).collect()
    }

    /// The nodes of the GPUs with these indices, shared ones included;
    /// nodes absent on this machine are left out.
    pub fn for_gpus(&self, indices: &[u32]) -> Vec<DeviceNode> {
        if indices.is_empty() {
            return Vec::new();
        }
        let own = indices.iter().filter_map(|i| self.gpu(*i));
        own.chain(self.shared()).collect()
    }

    fn node(&self, name: &str) -> Option<DeviceNode> {
        let host = self.dir.join(name);
        host.exists().then(|| DeviceNode {
            host,
            inside: Path::new("/dev").join(name),
        })
    }
}

/// A character device with `/dev/null`'s number (anyone may open it), or
/// an empty file where this process may not make devices.
fn stand_in(path: &Path) -> std::io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::PermissionsExt;
    if path.exists() {
        return Ok(());
    }
    let name = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::other("a device path holds a NUL byte"))?;
    // SAFETY: mknod(2) reads the NUL-terminated path and nothing else.
    let made = unsafe { libc::mknod(name.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) };
    if made != 0 {
        std::fs::write(path, "")?;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workload_gets_its_own_gpus_and_the_shared_nodes_only() {
        let dir = std::env::temp_dir().join(format!("gantry-devices-{}", uuid::Uuid::now_v7()));
        let devices = GpuDevices::simulated(&dir, 4).expect("stand-ins");
        let inside: Vec<String> = devices
            .for_gpus(&[1, 3])
            .iter()
            .map(|d| d.inside.display().to_string())
            .collect();
        assert_eq!(
            inside,
            [
                "/dev/nvidia1",
                "/dev/nvidia3",
                "/dev/nvidiactl",
                "/dev/nvidia-uvm"
            ]
        );
        assert!(devices.for_gpus(&[]).is_empty(), "no GPUs, no GPU devices");
        assert!(
            devices
                .for_gpus(&[9])
                .iter()
                .all(|d| !d.inside.ends_with("nvidia9"))
        );
        std::fs::remove_dir_all(dir).ok();
    }
}
