//! What GPUs this node has: from NVML on a machine with an NVIDIA driver,
//! or from `--simulate-gpus 8xH100-SXM-80GB` for development.

use anyhow::{Context, bail};
use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::TemperatureSensor;
use serde::Serialize;

/// NVML's limit on NVLink links per GPU.
const NVLINK_MAX_LINKS: u32 = 18;

#[derive(Debug, Clone, Serialize)]
pub struct Gpu {
    pub index: i32,
    pub model: String,
    pub uuid: String,
    pub memory_mib: i64,
    pub nvlink_domain: i32,
    pub mig_enabled: bool,
}

/// One GPU's measurements now.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    pub index: i32,
    pub utilization_pct: i16,
    pub memory_used_mib: i64,
    pub temperature_c: i16,
    pub power_w: i32,
    pub healthy: bool,
}

/// Where GPU facts come from.
pub enum Source {
    Nvml(Box<Nvml>),
    Simulated(Vec<Gpu>),
}

impl Source {
    /// NVML, or a clear error naming the way out when there is no driver.
    pub fn open(simulate: Option<&str>) -> anyhow::Result<Self> {
        if let Some(spec) = simulate {
            return Ok(Self::Simulated(simulated(spec)?));
        }
        match Nvml::init() {
            Ok(nvml) => Ok(Self::Nvml(Box::new(nvml))),
            Err(error) => bail!(
                "no NVIDIA driver found on this machine (NVML could not be loaded: {error}); \
                 to develop without GPUs, start the agent with --simulate-gpus 8xH100-SXM-80GB"
            ),
        }
    }

    /// The GPUs, in index order. `model` renames every GPU to a catalog
    /// model name when NVML's names differ from the catalog's.
    pub fn gpus(&self, model: Option<&str>) -> anyhow::Result<Vec<Gpu>> {
        match self {
            Self::Simulated(gpus) => Ok(gpus.clone()),
            Self::Nvml(nvml) => {
                let mut gpus = discover(nvml)?;
                if let Some(name) = model {
                    for gpu in &mut gpus {
                        name.clone_into(&mut gpu.model);
                    }
                }
                Ok(gpus)
            }
        }
    }

    /// The `/dev/nvidiaN` number of each GPU, in index order.
    pub fn minor_numbers(&self) -> Vec<u32> {
        match self {
            Self::Simulated(gpus) => (0..u32::try_from(gpus.len()).unwrap_or(0)).collect(),
            Self::Nvml(nvml) => (0..nvml.device_count().unwrap_or(0))
                .map(|i| {
                    nvml.device_by_index(i)
                        .and_then(|d| d.minor_number())
                        .unwrap_or(i)
                })
                .collect(),
        }
    }

    /// Telemetry per GPU; simulated GPUs are busy when work holds them.
    pub fn samples(&self, busy: &[u32]) -> Vec<Sample> {
        match self {
            Self::Simulated(gpus) => gpus
                .iter()
                .map(|g| {
                    let used = busy.contains(&u32::try_from(g.index).unwrap_or(u32::MAX));
                    Sample {
                        index: g.index,
                        utilization_pct: if used { 97 } else { 0 },
                        memory_used_mib: if used { g.memory_mib * 9 / 10 } else { 0 },
                        temperature_c: if used { 71 } else { 34 },
                        power_w: if used { 640 } else { 72 },
                        healthy: true,
                    }
                })
                .collect(),
            Self::Nvml(nvml) => nvml_samples(nvml),
        }
    }
}

/// `8xH100-SXM-80GB`: eight GPUs of that model, NVLinked together; the
/// memory is read from a trailing `<n>GB` when the name has one.
pub fn simulated(spec: &str) -> anyhow::Result<Vec<Gpu>> {
    let (count, model) = spec
        .split_once('x')
        .context("--simulate-gpus takes COUNTxMODEL, such as 8xH100-SXM-80GB")?;
    let count: i32 = count
        .parse()
        .ok()
        .filter(|c| (1..=64).contains(c))
        .context("the GPU count of --simulate-gpus must be 1 to 64")?;
    if model.is_empty() {
        bail!("--simulate-gpus needs a model name after the count");
    }
    let memory_gib: i64 = model
        .rsplit('-')
        .next()
        .and_then(|last| last.strip_suffix("GB"))
        .and_then(|n| n.parse().ok())
        .unwrap_or(80);
    Ok((0..count)
        .map(|index| Gpu {
            index,
            model: model.to_owned(),
            uuid: format!("GPU-sim-{}", uuid::Uuid::new_v4()),
            memory_mib: memory_gib * 1024,
            nvlink_domain: 0,
            mig_enabled: false,
        })
        .collect())
}

fn discover(nvml: &Nvml) -> anyhow::Result<Vec<Gpu>> {
    let count = nvml.device_count().context("counting GPUs")?;
    let mut gpus = Vec::new();
    let mut buses = Vec::new();
    for index in 0..count {
        let device = nvml
            .device_by_index(index)
            .with_context(|| format!("opening GPU {index}"))?;
        let name = device.name().context("reading the GPU name")?;
        let memory = device.memory_info().context("reading GPU memory")?;
        let mig_enabled = device.mig_mode().is_ok_and(|mode| mode.current == 1);
        buses.push(device.pci_info().map(|p| p.bus_id).unwrap_or_default());
        gpus.push(Gpu {
            index: i32::try_from(index).unwrap_or(i32::MAX),
            model: catalog_name(&name),
            uuid: device.uuid().context("reading the GPU UUID")?,
            memory_mib: i64::try_from(memory.total / (1024 * 1024)).unwrap_or(0),
            nvlink_domain: i32::try_from(index).unwrap_or(i32::MAX),
            mig_enabled,
        });
    }
    // GPUs joined by an active NVLink share a domain: the smallest index
    // reachable through links names it.
    let mut domain: Vec<usize> = (0..gpus.len()).collect();
    for index in 0..count {
        let Ok(device) = nvml.device_by_index(index) else {
            continue;
        };
        for link in 0..NVLINK_MAX_LINKS {
            let wrapper = device.link_wrapper_for(link);
            if !wrapper.is_active().unwrap_or(false) {
                continue;
            }
            let Ok(remote) = wrapper.remote_pci_info() else {
                continue;
            };
            if let Some(peer) = buses.iter().position(|b| *b == remote.bus_id) {
                let (a, b) = (root(&mut domain, index as usize), root(&mut domain, peer));
                domain[a.max(b)] = a.min(b);
            }
        }
    }
    for (i, gpu) in gpus.iter_mut().enumerate() {
        gpu.nvlink_domain = i32::try_from(root(&mut domain, i)).unwrap_or(0);
    }
    Ok(gpus)
}

fn root(parent: &mut [usize], mut i: usize) -> usize {
    while parent[i] != i {
        parent[i] = parent[parent[i]];
        i = parent[i];
    }
    i
}

/// `NVIDIA H100 80GB HBM3` becomes `H100-80GB-HBM3`.
fn catalog_name(nvml_name: &str) -> String {
    nvml_name
        .trim_start_matches("NVIDIA ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join("-")
}

fn nvml_samples(nvml: &Nvml) -> Vec<Sample> {
    let count = nvml.device_count().unwrap_or(0);
    (0..count)
        .map(|index| match nvml.device_by_index(index) {
            Ok(device) => Sample {
                index: i32::try_from(index).unwrap_or(i32::MAX),
                utilization_pct: device
                    .utilization_rates()
                    .map_or(0, |u| i16::try_from(u.gpu.min(100)).unwrap_or(0)),
                memory_used_mib: device
                    .memory_info()
                    .map_or(0, |m| i64::try_from(m.used / (1024 * 1024)).unwrap_or(0)),
                temperature_c: device
                    .temperature(TemperatureSensor::Gpu)
                    .map_or(0, |t| i16::try_from(t.min(150)).unwrap_or(0)),
                power_w: device
                    .power_usage()
                    .map_or(0, |mw| i32::try_from((mw / 1000).min(5000)).unwrap_or(0)),
                healthy: true,
            },
            // A GPU NVML can no longer open has fallen off the bus.
            Err(_) => Sample {
                index: i32::try_from(index).unwrap_or(i32::MAX),
                utilization_pct: 0,
                memory_used_mib: 0,
                temperature_c: 0,
                power_w: 0,
                healthy: false,
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simulated_gpus_parse_count_model_and_memory() {
        let gpus = simulated("8xH100-SXM-80GB").expect("valid");
        assert_eq!(gpus.len(), 8);
        assert_eq!(gpus[7].index, 7);
        assert_eq!(gpus[0].model, "H100-SXM-80GB");
        assert_eq!(gpus[0].memory_mib, 80 * 1024);
        assert!(simulated("0xH100").is_err());
        assert!(simulated("H100").is_err());
        assert!(simulated("4x").is_err());
    }

    #[test]
    fn nvml_names_become_catalog_names() {
        assert_eq!(catalog_name("NVIDIA H100 80GB HBM3"), "H100-80GB-HBM3");
        assert_eq!(catalog_name("NVIDIA L40S"), "L40S");
    }

    #[test]
    fn nvlink_domains_join_transitively() {
        let mut parent = vec![0, 1, 2, 3];
        parent[3] = 2;
        parent[2] = 1;
        assert_eq!(root(&mut parent, 3), 1);
        assert_eq!(root(&mut parent, 0), 0);
    }
}
