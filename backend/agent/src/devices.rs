//! The device nodes a workload's GPUs need, as NVIDIA's container toolkit
//! maps them: `/dev/nvidiaN` for each of its GPUs, plus the shared control
//! and unified-memory nodes. A MIG instance's workload also gets the
//! `/dev/nvidia-caps/nvidia-capN` nodes of its own GPU and compute
//! instance, which the driver requires to open it, and none of another's.
//! Simulated GPUs get stand-ins in the agent's state directory (character
//! devices that behave like `/dev/null`), so that what a workload can open
//! is tested on machines without GPUs.

use std::collections::HashMap;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::discovery::Gpu;

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
    /// The capability minors of each MIG instance, by its UUID.
    caps: HashMap<String, Vec<u32>>,
}

/// The capability minors of every MIG instance of these GPUs.
fn mig_caps(gpus: &[Gpu]) -> HashMap<String, Vec<u32>> {
    gpus.iter()
        .flat_map(|g| &g.mig_devices)
        .map(|d| (d.uuid.clone(), d.caps.clone()))
        .collect()
}

impl GpuDevices {
    /// The real nodes under `/dev`.
    pub fn real(minors: Vec<u32>, gpus: &[Gpu]) -> Self {
        Self {
            dir: PathBuf::from("/dev"),
            minors,
            caps: mig_caps(gpus),
        }
    }

    /// Stand-ins for simulated GPUs (and their MIG instances' capability
    /// nodes) under `state_dir/dev`.
    pub fn simulated(state_dir: &Path, gpus: &[Gpu]) -> std::io::Result<Self> {
        let dir = state_dir.join("dev");
        std::fs::create_dir_all(dir.join("nvidia-caps"))?;
        let caps = mig_caps(gpus);
        let names = (0..gpus.len())
            .map(|i| format!("nvidia{i}"))
            .chain(SHARED[..2].iter().map(|s| (*s).to_owned()))
            .chain(caps.values().flatten().map(|minor| cap(*minor)));
        for name in names {
            stand_in(&dir.join(name))?;
        }
        Ok(Self {
            dir,
            minors: (0..u32::try_from(gpus.len()).unwrap_or(0)).collect(),
            caps,
        })
    }

    /// How many GPUs the node has.
    pub fn count(&self) -> usize {
        self.minors.len()
    }

    /// Whether these are stand-ins for simulated GPUs.
    pub fn is_simulated(&self) -> bool {
        self.dir != Path::new("/dev")
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

    /// The nodes of a workload: with MIG instances, their GPUs' nodes and
    /// the instances' own capability nodes; else its whole GPUs'.
    pub fn for_launch(&self, indices: &[u32], mig_devices: &[String]) -> Vec<DeviceNode> {
        let mut nodes = self.for_gpus(indices);
        nodes.extend(mig_devices.iter().flat_map(|uuid| self.caps(uuid)));
        nodes
    }

    /// The capability nodes of one MIG instance; none for an unknown one.
    pub fn caps(&self, mig_device: &str) -> Vec<DeviceNode> {
        self.caps
            .get(mig_device)
            .into_iter()
            .flatten()
            .filter_map(|minor| self.node(&cap(*minor)))
            .collect()
    }

    fn node(&self, name: &str) -> Option<DeviceNode> {
        let host = self.dir.join(name);
        host.exists().then(|| DeviceNode {
            host,
            inside: Path::new("/dev").join(name),
        })
    }
}

/// The path of a capability node under the device directory.
fn cap(minor: u32) -> String {
    format!("nvidia-caps/nvidia-cap{minor}")
}

/// A character device with `/dev/null`'s number (anyone may open it), or
/// an empty file where this process may not make devices.
pub(crate) fn stand_in(path: &Path) -> std::io::Result<()> {
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
        let gpus = crate::discovery::simulated("4xH100-SXM-80GB").expect("GPUs");
        let devices = GpuDevices::simulated(&dir, &gpus).expect("stand-ins");
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

    #[test]
    fn a_mig_workload_gets_its_own_instances_capabilities_only() {
        let dir = std::env::temp_dir().join(format!("gantry-devices-{}", uuid::Uuid::now_v7()));
        let gpus = crate::discovery::simulated("1xH100-SXM-80GB:mig=3g.40gb*2").expect("GPUs");
        let devices = GpuDevices::simulated(&dir, &gpus).expect("stand-ins");
        let [first, second] = [&gpus[0].mig_devices[0], &gpus[0].mig_devices[1]];
        let inside = |uuid: &str| -> Vec<String> {
            devices
                .for_launch(&[0], &[uuid.to_owned()])
                .iter()
                .map(|d| d.inside.display().to_string())
                .collect()
        };
        let mine = inside(&first.uuid);
        let theirs = inside(&second.uuid);
        for minor in &first.caps {
            let path = format!("/dev/nvidia-caps/nvidia-cap{minor}");
            assert!(mine.contains(&path));
            assert!(
                !theirs.contains(&path),
                "another tenant's instance is not visible"
            );
        }
        assert!(
            mine.contains(&"/dev/nvidia0".to_owned()),
            "the parent GPU is shared"
        );
        std::fs::remove_dir_all(dir).ok();
    }
}
