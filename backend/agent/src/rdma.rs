//! RDMA devices (InfiniBand HCAs and RoCE NICs) for work that spans
//! nodes: NCCL moves a gang's tensors over them instead of TCP. A
//! workload needs each device's verbs node (`/dev/infiniband/uverbsN`) and
//! the connection manager's (`rdma_cm`). A port's partition keys
//! (InfiniBand) and VLANs (RoCE) belong to the node, not to a workload,
//! so nothing on the node could keep two tenants sharing a port apart:
//! only a workload that holds every GPU of the node gets the devices.

use std::path::Path;

use crate::devices::DeviceNode;

/// Where the kernel lists verbs devices, each with the name of its device.
pub const SYS_VERBS: &str = "/sys/class/infiniband_verbs";
/// Where their nodes are.
pub const DEV: &str = "/dev/infiniband";
const CM: &str = "rdma_cm";

/// The node's RDMA devices.
#[derive(Debug, Clone, Default)]
pub struct Rdma {
    /// Each device's name (`mlx5_0`) and verbs node.
    devices: Vec<(String, DeviceNode)>,
    cm: Option<DeviceNode>,
}

fn node(dev: &Path, name: &str) -> Option<DeviceNode> {
    let host = dev.join(name);
    host.exists().then(|| DeviceNode {
        host,
        inside: Path::new(DEV).join(name),
    })
}

impl Rdma {
    /// The devices listed under `sys` (`uverbsN`, whose `ibdev` names its
    /// device) whose nodes are under `dev`.
    pub fn discover(sys: &Path, dev: &Path) -> Self {
        let mut devices: Vec<(String, DeviceNode)> = std::fs::read_dir(sys)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| {
                let verbs = entry.file_name().to_str()?.to_owned();
                let name = std::fs::read_to_string(entry.path().join("ibdev")).ok()?;
                Some((name.trim().to_owned(), node(dev, &verbs)?))
            })
            .collect();
        devices.sort_by(|a, b| a.0.cmp(&b.0));
        let cm = if devices.is_empty() {
            None
        } else {
            node(dev, CM)
        };
        Rdma { devices, cm }
    }

    /// Stand-ins for `count` devices (`sim_ib0`, …) under
    /// `state_dir/dev/infiniband`, for simulated nodes.
    pub fn simulated(state_dir: &Path, count: usize) -> std::io::Result<Self> {
        if count == 0 {
            return Ok(Self::default());
        }
        let dev = state_dir.join("dev/infiniband");
        let sys = state_dir.join("sys/infiniband_verbs");
        for i in 0..count {
            let verbs = sys.join(format!("uverbs{i}"));
            std::fs::create_dir_all(&verbs)?;
            std::fs::write(verbs.join("ibdev"), format!("sim_ib{i}\n"))?;
        }
        std::fs::create_dir_all(&dev)?;
        let names = (0..count)
            .map(|i| format!("uverbs{i}"))
            .chain([CM.to_owned()]);
        for name in names {
            crate::devices::stand_in(&dev.join(name))?;
        }
        Ok(Self::discover(&sys, &dev))
    }

    pub fn is_empty(&self) -> bool {
        self.devices.is_empty()
    }

    /// Every node a workload that uses the devices needs.
    pub fn nodes(&self) -> Vec<DeviceNode> {
        self.devices
            .iter()
            .map(|(_, node)| node.clone())
            .chain(self.cm.clone())
            .collect()
    }

    /// `NCCL_IB_HCA`: the devices NCCL may use.
    pub fn hca_list(&self) -> String {
        self.devices
            .iter()
            .map(|(name, _)| name.as_str())
            .collect::<Vec<_>>()
            .join(",")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_are_found_with_their_names_and_the_connection_manager() {
        let dir = std::env::temp_dir().join(format!("gantry-rdma-{}", uuid::Uuid::now_v7()));
        let rdma = Rdma::simulated(&dir, 2).expect("stand-ins");
        assert_eq!(rdma.hca_list(), "sim_ib0,sim_ib1");
        let inside: Vec<String> = rdma
            .nodes()
            .iter()
            .map(|n| n.inside.display().to_string())
            .collect();
        assert_eq!(
            inside,
            [
                "/dev/infiniband/uverbs0",
                "/dev/infiniband/uverbs1",
                "/dev/infiniband/rdma_cm"
            ]
        );
        // A verbs device whose node is missing is left out, and with no
        // device there is no connection manager either.
        std::fs::remove_file(dir.join("dev/infiniband/uverbs0")).expect("remove");
        let one = Rdma::discover(
            &dir.join("sys/infiniband_verbs"),
            &dir.join("dev/infiniband"),
        );
        assert_eq!(one.hca_list(), "sim_ib1");
        let none = Rdma::discover(&dir.join("nowhere"), &dir.join("dev/infiniband"));
        assert!(none.is_empty() && none.nodes().is_empty());
        std::fs::remove_dir_all(dir).ok();
    }
}
