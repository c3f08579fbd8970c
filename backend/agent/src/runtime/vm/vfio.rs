//! Passing a VM's GPUs through by VFIO. Before the VM starts, each GPU
//! (with the other functions of its slot, such as its audio device) is
//! taken from its host driver and bound to `vfio-pci`; after the VM ends it
//! is handed back. A device can only be passed through with its whole
//! IOMMU group, so a group that holds anything else (another tenant's GPU,
//! a NIC) is refused before anything is touched. The plan is read from
//! sysfs under a root given here, so it is tested against a tree shaped
//! like a real server's.

use std::path::{Path, PathBuf};

/// The PCI class of bridges, which an IOMMU group may hold beside the
/// devices passed through (they stay with the host).
const BRIDGE_CLASS: &str = "0x0604";

/// One PCI function to pass through.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Function {
    pub address: String,
    /// The driver it had before (`nvidia`), given back after.
    pub driver: Option<String>,
    pub group: String,
}

/// One write to sysfs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    pub file: PathBuf,
    pub value: String,
}

/// The slot of a PCI address: `0000:18:00.1` → `0000:18:00`.
fn slot(address: &str) -> &str {
    address.rsplit_once('.').map_or(address, |(slot, _)| slot)
}

fn link_name(path: &Path) -> Option<String> {
    std::fs::read_link(path)
        .ok()
        .and_then(|target| target.file_name().map(|n| n.to_string_lossy().into_owned()))
}

/// What to pass through for GPUs at `addresses`, or why it cannot be.
pub fn plan(sysfs: &Path, addresses: &[String]) -> Result<Vec<Function>, String> {
    let devices = sysfs.join("bus/pci/devices");
    let slots: Vec<&str> = addresses.iter().map(|a| slot(a)).collect();
    let mut functions: Vec<Function> = Vec::new();
    for address in addresses {
        let device = devices.join(address);
        if !device.exists() {
            return Err(format!("no PCI device {address} on this node"));
        }
        let group = link_name(&device.join("iommu_group")).ok_or_else(|| {
            format!(
                "PCI device {address} is in no IOMMU group: turn the IOMMU on \
                 (intel_iommu=on or amd_iommu=on on the kernel's command line) to pass GPUs \
                 to VMs"
            )
        })?;
        let members = sysfs
            .join("kernel/iommu_groups")
            .join(&group)
            .join("devices");
        let mut members: Vec<String> = std::fs::read_dir(&members)
            .map_err(|e| format!("reading IOMMU group {group}: {e}"))?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        members.sort();
        for member in members {
            if functions.iter().any(|f| f.address == member) {
                continue;
            }
            if slots.contains(&slot(&member)) {
                functions.push(Function {
                    driver: link_name(&devices.join(&member).join("driver")),
                    address: member,
                    group: group.clone(),
                });
                continue;
            }
            let class =
                std::fs::read_to_string(devices.join(&member).join("class")).unwrap_or_default();
            if !class.trim().starts_with(BRIDGE_CLASS) {
                return Err(format!(
                    "GPU {address} shares IOMMU group {group} with {member}, which is not \
                     this order's: it cannot be passed through alone"
                ));
            }
        }
    }
    Ok(functions)
}

/// The writes that bind `functions` to `vfio-pci`.
pub fn bind(sysfs: &Path, functions: &[Function]) -> Vec<Write> {
    let devices = sysfs.join("bus/pci/devices");
    let mut writes = Vec::new();
    for f in functions {
        let device = devices.join(&f.address);
        writes.push(Write {
            file: device.join("driver_override"),
            value: "vfio-pci".into(),
        });
        if f.driver.is_some() {
            writes.push(Write {
                file: device.join("driver/unbind"),
                value: f.address.clone(),
            });
        }
        writes.push(Write {
            file: sysfs.join("bus/pci/drivers_probe"),
            value: f.address.clone(),
        });
    }
    writes
}

/// The writes that give `functions` back to their host drivers.
pub fn release(sysfs: &Path, functions: &[Function]) -> Vec<Write> {
    let devices = sysfs.join("bus/pci/devices");
    let mut writes = Vec::new();
    for f in functions {
        writes.push(Write {
            file: devices.join(&f.address).join("driver_override"),
            value: "\n".into(),
        });
        writes.push(Write {
            file: sysfs.join("bus/pci/drivers/vfio-pci/unbind"),
            value: f.address.clone(),
        });
        if f.driver.is_some() {
            writes.push(Write {
                file: sysfs.join("bus/pci/drivers_probe"),
                value: f.address.clone(),
            });
        }
    }
    writes
}

/// Makes the writes in order; the first failure stops them.
pub fn apply(writes: &[Write]) -> Result<(), String> {
    for write in writes {
        std::fs::write(&write.file, &write.value).map_err(|e| {
            format!(
                "writing {:?} to {}: {e}",
                write.value.trim(),
                write.file.display()
            )
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A sysfs tree: each device with its group, class and driver.
    fn tree(devices: &[(&str, &str, &str, Option<&str>)]) -> PathBuf {
        let root = std::env::temp_dir().join(format!("gantry-sysfs-{}", uuid::Uuid::now_v7()));
        let sys = root.as_path();
        for (address, group, class, driver) in devices {
            let real = sys.join("devices/pci0000:00").join(address);
            std::fs::create_dir_all(&real).expect("device");
            std::fs::write(real.join("class"), format!("{class}\n")).expect("class");
            let groups = sys.join("kernel/iommu_groups").join(group);
            std::fs::create_dir_all(groups.join("devices")).expect("group");
            symlink(&groups, real.join("iommu_group")).expect("link");
            symlink(&real, groups.join("devices").join(address)).expect("member");
            if let Some(driver) = driver {
                let dir = sys.join("bus/pci/drivers").join(driver);
                std::fs::create_dir_all(&dir).expect("driver");
                symlink(&dir, real.join("driver")).expect("driver link");
            }
            std::fs::create_dir_all(sys.join("bus/pci/devices")).expect("devices");
            symlink(&real, sys.join("bus/pci/devices").join(address)).expect("bus link");
        }
        root
    }

    #[test]
    fn a_gpu_goes_with_its_audio_function_and_comes_back_to_its_driver() {
        let root = tree(&[
            ("0000:18:00.0", "40", "0x030200", Some("nvidia")),
            ("0000:18:00.1", "40", "0x040300", Some("snd_hda_intel")),
            ("0000:17:00.0", "40", "0x060400", Some("pcieport")),
            ("0000:2a:00.0", "41", "0x030200", Some("nvidia")),
        ]);
        let sys = root.as_path();
        let functions = plan(sys, &["0000:18:00.0".into()]).expect("a plan");
        assert_eq!(
            functions,
            vec![
                Function {
                    address: "0000:18:00.0".into(),
                    driver: Some("nvidia".into()),
                    group: "40".into(),
                },
                Function {
                    address: "0000:18:00.1".into(),
                    driver: Some("snd_hda_intel".into()),
                    group: "40".into(),
                },
            ]
        );
        let shown: Vec<String> = bind(sys, &functions[..1])
            .iter()
            .map(|w| {
                format!(
                    "{}={}",
                    w.file.strip_prefix(sys).expect("under sysfs").display(),
                    w.value
                )
            })
            .collect();
        assert_eq!(
            shown,
            [
                "bus/pci/devices/0000:18:00.0/driver_override=vfio-pci",
                "bus/pci/devices/0000:18:00.0/driver/unbind=0000:18:00.0",
                "bus/pci/drivers_probe=0000:18:00.0",
            ]
        );
        let back: Vec<String> = release(sys, &functions[..1])
            .iter()
            .map(|w| {
                format!(
                    "{}={}",
                    w.file.strip_prefix(sys).expect("under sysfs").display(),
                    w.value.trim()
                )
            })
            .collect();
        assert_eq!(
            back,
            [
                "bus/pci/devices/0000:18:00.0/driver_override=",
                "bus/pci/drivers/vfio-pci/unbind=0000:18:00.0",
                "bus/pci/drivers_probe=0000:18:00.0",
            ]
        );
        std::fs::remove_dir_all(&root).ok();
    }

    #[test]
    fn a_group_shared_with_another_device_or_no_iommu_is_refused() {
        let root = tree(&[
            ("0000:18:00.0", "40", "0x030200", Some("nvidia")),
            ("0000:19:00.0", "40", "0x020000", Some("mlx5_core")),
        ]);
        let why = plan(&root, &["0000:18:00.0".into()]).expect_err("shared group");
        assert!(
            why.contains("shares IOMMU group 40 with 0000:19:00.0"),
            "{why}"
        );
        // Both in the order: the group goes whole.
        let both =
            plan(&root, &["0000:18:00.0".into(), "0000:19:00.0".into()]).expect("the whole group");
        assert_eq!(both.len(), 2);
        let missing = plan(&root, &["0000:99:00.0".into()]).expect_err("absent");
        assert!(missing.contains("no PCI device 0000:99:00.0"), "{missing}");
        std::fs::remove_file(root.join("devices/pci0000:00/0000:18:00.0/iommu_group"))
            .expect("unlink");
        let off = plan(&root, &["0000:18:00.0".into()]).expect_err("no IOMMU");
        assert!(off.contains("turn the IOMMU on"), "{off}");
        std::fs::remove_dir_all(&root).ok();
    }
}
