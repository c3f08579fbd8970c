//! What GPUs this node has: from NVML on a machine with an NVIDIA driver,
//! or from `--simulate-gpus 8xH100-SXM-80GB` for development. A GPU in MIG
//! mode comes with its MIG instances (`…:mig=1g.10gb*7` simulates them),
//! each with the capability device minors that grant access to it.

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
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mig_devices: Vec<MigDevice>,
}

/// One MIG instance of a GPU.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct MigDevice {
    /// What CUDA knows it by: `MIG-…`.
    pub uuid: String,
    /// NVIDIA's profile name, such as `1g.10gb`.
    pub profile: String,
    /// Minors of `/dev/nvidia-caps/nvidia-cap*` that open its GPU instance
    /// and compute instance: a workload given these, and no others, can
    /// use this instance and no other on the GPU.
    #[serde(skip)]
    pub caps: Vec<u32>,
}

/// Compute slices of a GPU in MIG mode.
const MIG_SLICES: u32 = 7;

/// The first capability minor a simulated MIG instance gets; the driver
/// keeps 1 and 2 for its `config` and `monitor` capabilities.
const FIRST_SIMULATED_CAP: u32 = 3;

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

/// NVML's bus id (`00000000:18:00.0`) as sysfs names the device
/// (`0000:18:00.0`): a domain of four digits, lower case.
fn pci_address(bus_id: &str) -> String {
    let lower = bus_id.to_lowercase();
    match lower.split_once(':') {
        Some((domain, rest)) if domain.len() > 4 => {
            format!("{}:{rest}", &domain[domain.len() - 4..])
        }
        _ => lower,
    }
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

    /// Each GPU's PCI address (`0000:18:00.0`), in index order: empty for
    /// simulated GPUs, which have none to pass through.
    pub fn pci_addresses(&self) -> Vec<String> {
        match self {
            Self::Simulated(gpus) => vec![String::new(); gpus.len()],
            Self::Nvml(nvml) => (0..nvml.device_count().unwrap_or(0))
                .map(|i| {
                    nvml.device_by_index(i)
                        .and_then(|d| d.pci_info())
                        .map(|p| pci_address(&p.bus_id))
                        .unwrap_or_default()
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
/// `8xH100-SXM-80GB:mig=1g.10gb*7` puts each in MIG mode with seven
/// `1g.10gb` instances.
pub fn simulated(spec: &str) -> anyhow::Result<Vec<Gpu>> {
    let (spec, mig) = match spec.split_once(':') {
        Some((gpus, options)) => (gpus, Some(mig_option(options)?)),
        None => (spec, None),
    };
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
    let mut next_cap = FIRST_SIMULATED_CAP;
    Ok((0..count)
        .map(|index| Gpu {
            index,
            model: model.to_owned(),
            uuid: format!("GPU-sim-{}", uuid::Uuid::new_v4()),
            memory_mib: memory_gib * 1024,
            nvlink_domain: 0,
            mig_enabled: mig.is_some(),
            mig_devices: mig
                .as_ref()
                .map(|(profile, instances)| {
                    (0..*instances)
                        .map(|_| {
                            // A GPU instance and its compute instance.
                            let caps = vec![next_cap, next_cap + 1];
                            next_cap += 2;
                            MigDevice {
                                uuid: format!("MIG-sim-{}", uuid::Uuid::new_v4()),
                                profile: profile.clone(),
                                caps,
                            }
                        })
                        .collect()
                })
                .unwrap_or_default(),
        })
        .collect())
}

/// `mig=PROFILE*COUNT`: the instances each simulated GPU is split into.
fn mig_option(options: &str) -> anyhow::Result<(String, u32)> {
    let usage = "--simulate-gpus takes COUNTxMODEL:mig=PROFILE*COUNT, such as \
                 8xH100-SXM-80GB:mig=1g.10gb*7";
    let layout = options.strip_prefix("mig=").context(usage)?;
    let (profile, instances) = layout.split_once('*').unwrap_or((layout, "1"));
    let slices: u32 = profile
        .split_once("g.")
        .and_then(|(slices, memory)| {
            memory.strip_suffix("gb")?.parse::<u32>().ok()?;
            slices.parse().ok()
        })
        .filter(|s| (1..=MIG_SLICES).contains(s))
        .with_context(|| format!("{profile:?} is not a MIG profile such as 1g.10gb; {usage}"))?;
    let instances: u32 = instances
        .parse()
        .ok()
        .filter(|n| *n >= 1 && n * slices <= MIG_SLICES)
        .with_context(|| {
            format!("a GPU has {MIG_SLICES} MIG slices: {instances} × {profile} do not fit")
        })?;
    Ok((profile.to_owned(), instances))
}

/// The driver's table of MIG capability minors, `gpu0/gi1/access 12` and
/// `gpu0/gi1/ci0/access 13` per line, by path.
const MIG_MINORS: &str = "/proc/driver/nvidia-caps/mig-minors";

fn parse_cap_minors(table: &str) -> std::collections::HashMap<String, u32> {
    table
        .lines()
        .filter_map(|line| {
            let (path, minor) = line.split_once(' ')?;
            Some((path.to_owned(), minor.trim().parse().ok()?))
        })
        .collect()
}

/// The MIG instances of a GPU in MIG mode: UUID, profile (the end of the
/// instance's NVML name, `… MIG 1g.10gb`), and the capability minors of
/// its GPU and compute instance.
fn instances(
    nvml: &Nvml,
    device: &nvml_wrapper::Device<'_>,
    gpu_minor: u32,
    cap_minors: &std::collections::HashMap<String, u32>,
) -> Vec<MigDevice> {
    let slots = device.mig_device_count().unwrap_or(0);
    (0..slots)
        .filter_map(|slot| device.mig_device_by_index(slot).ok())
        .filter_map(|mig| {
            let name = mig.name().ok()?;
            let profile = name.rsplit_once("MIG ")?.1.trim().to_owned();
            let (gi, ci) = instance_ids(nvml, &mig)?;
            let caps = [
                format!("gpu{gpu_minor}/gi{gi}/access"),
                format!("gpu{gpu_minor}/gi{gi}/ci{ci}/access"),
            ]
            .iter()
            .filter_map(|path| cap_minors.get(path).copied())
            .collect();
            Some(MigDevice {
                uuid: mig.uuid().ok()?,
                profile,
                caps,
            })
        })
        .collect()
}

/// A MIG device's GPU instance and compute instance ids, which
/// nvml-wrapper does not wrap.
fn instance_ids(nvml: &Nvml, mig: &nvml_wrapper::Device<'_>) -> Option<(u32, u32)> {
    let lib = nvml.lib();
    let gpu_instance = lib.nvmlDeviceGetGpuInstanceId.as_ref().ok()?;
    let compute_instance = lib.nvmlDeviceGetComputeInstanceId.as_ref().ok()?;
    let (mut gi, mut ci) = (0, 0);
    // SAFETY: the handle is a live MIG device of this NVML; each call
    // writes one unsigned int through the pointer it is given.
    let ok = unsafe {
        gpu_instance(mig.handle(), &raw mut gi) == 0
            && compute_instance(mig.handle(), &raw mut ci) == 0
    };
    ok.then_some((gi, ci))
}

fn discover(nvml: &Nvml) -> anyhow::Result<Vec<Gpu>> {
    let count = nvml.device_count().context("counting GPUs")?;
    let cap_minors = parse_cap_minors(&std::fs::read_to_string(MIG_MINORS).unwrap_or_default());
    let mut gpus = Vec::new();
    let mut buses = Vec::new();
    for index in 0..count {
        let device = nvml
            .device_by_index(index)
            .with_context(|| format!("opening GPU {index}"))?;
        let name = device.name().context("reading the GPU name")?;
        let memory = device.memory_info().context("reading GPU memory")?;
        let mig_enabled = device.mig_mode().is_ok_and(|mode| mode.current == 1);
        let mig_devices = if mig_enabled {
            let minor = device.minor_number().unwrap_or(index);
            instances(nvml, &device, minor, &cap_minors)
        } else {
            Vec::new()
        };
        buses.push(device.pci_info().map(|p| p.bus_id).unwrap_or_default());
        gpus.push(Gpu {
            index: i32::try_from(index).unwrap_or(i32::MAX),
            model: catalog_name(&name),
            uuid: device.uuid().context("reading the GPU UUID")?,
            memory_mib: i64::try_from(memory.total / (1024 * 1024)).unwrap_or(0),
            nvlink_domain: i32::try_from(index).unwrap_or(i32::MAX),
            mig_enabled,
            mig_devices,
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
    fn nvml_bus_ids_become_sysfs_addresses() {
        assert_eq!(pci_address("00000000:18:00.0"), "0000:18:00.0");
        assert_eq!(pci_address("00000001:AB:00.1"), "0001:ab:00.1");
        assert_eq!(pci_address("0000:2a:00.0"), "0000:2a:00.0");
    }

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
    fn simulated_gpus_may_be_split_into_mig_instances() {
        let gpus = simulated("2xH100-SXM-80GB:mig=1g.10gb*7").expect("valid");
        assert!(
            gpus.iter()
                .all(|g| g.mig_enabled && g.mig_devices.len() == 7)
        );
        let all: Vec<&MigDevice> = gpus.iter().flat_map(|g| &g.mig_devices).collect();
        assert!(
            all.iter()
                .all(|d| d.uuid.starts_with("MIG-") && d.profile == "1g.10gb")
        );
        let mut caps: Vec<u32> = all.iter().flat_map(|d| d.caps.clone()).collect();
        caps.sort_unstable();
        caps.dedup();
        assert_eq!(caps.len(), 28, "every instance has caps of its own");
        assert_eq!(
            simulated("1xH100-SXM-80GB:mig=3g.40gb*2").expect("valid")[0]
                .mig_devices
                .len(),
            2
        );
        assert!(simulated("1xH100:mig=3g.40gb*3").is_err(), "nine slices");
        assert!(simulated("1xH100:mig=big*1").is_err());
        assert!(simulated("1xH100:mig=8g.90gb").is_err());
        assert!(simulated("1xH100:ecc=on").is_err());
    }

    #[test]
    fn mig_capability_minors_are_read_from_the_drivers_table() {
        let table =
            parse_cap_minors("config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\n");
        assert_eq!(table.get("gpu0/gi1/access"), Some(&12));
        assert_eq!(table.get("gpu0/gi1/ci0/access"), Some(&13));
        assert_eq!(table.len(), 4);
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
