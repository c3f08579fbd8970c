//! Shared GPUs: what an instance type sells of a GPU (whole GPUs, a
//! fraction, or one MIG instance), NVIDIA's MIG profiles per GPU memory
//! size, and the share of a GPU each is metered and billed by.

use gantry_scheduler as engine;

use crate::validate::Fields;

/// Fractions are sold in eighths of a GPU: fine enough for notebooks and
/// small inference servers, coarse enough that an MPS thread percentage
/// and a memory limit follow from it exactly.
pub const FRACTION_STEP: i32 = 125;

/// Compute slices of a whole GPU in MIG mode (A100, H100, H200).
pub const MIG_SLICES: u8 = 7;

/// Thousandths of a GPU in a whole GPU.
pub const WHOLE_MILLI: i32 = 1000;

/// One MIG profile as NVIDIA names it: `<slices>g.<memory>gb`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MigProfile {
    pub name: &'static str,
    pub slices: u8,
}

const fn profile(name: &'static str, slices: u8) -> MigProfile {
    MigProfile { name, slices }
}

/// NVIDIA's MIG profiles by the GPU's memory, from its MIG user guide's
/// supported-profiles tables: A100 40 GB; A100 and H100 80 GB; H100 NVL
/// 94 GB; GH200 96 GB; H200 141 GB.
const PROFILES: &[(i32, &[MigProfile])] = &[
    (
        40,
        &[
            profile("1g.5gb", 1),
            profile("1g.10gb", 1),
            profile("2g.10gb", 2),
            profile("3g.20gb", 3),
            profile("4g.20gb", 4),
            profile("7g.40gb", 7),
        ],
    ),
    (
        80,
        &[
            profile("1g.10gb", 1),
            profile("1g.20gb", 1),
            profile("2g.20gb", 2),
            profile("3g.40gb", 3),
            profile("4g.40gb", 4),
            profile("7g.80gb", 7),
        ],
    ),
    (
        94,
        &[
            profile("1g.12gb", 1),
            profile("1g.24gb", 1),
            profile("2g.24gb", 2),
            profile("3g.47gb", 3),
            profile("4g.47gb", 4),
            profile("7g.94gb", 7),
        ],
    ),
    (
        96,
        &[
            profile("1g.12gb", 1),
            profile("1g.24gb", 1),
            profile("2g.24gb", 2),
            profile("3g.48gb", 3),
            profile("4g.48gb", 4),
            profile("7g.96gb", 7),
        ],
    ),
    (
        141,
        &[
            profile("1g.18gb", 1),
            profile("1g.35gb", 1),
            profile("2g.35gb", 2),
            profile("3g.71gb", 3),
            profile("4g.71gb", 4),
            profile("7g.141gb", 7),
        ],
    ),
];

/// The MIG profiles of a GPU with this much memory.
pub fn profiles(memory_gib: i32) -> &'static [MigProfile] {
    PROFILES
        .iter()
        .find(|(memory, _)| *memory == memory_gib)
        .map_or(&[], |(_, list)| list)
}

/// The compute slices of a profile name on any GPU: the number before `g`.
pub fn slices_of(profile: &str) -> Option<u8> {
    profile
        .split_once("g.")
        .and_then(|(slices, _)| slices.parse().ok())
        .filter(|s| (1..=MIG_SLICES).contains(s))
}

/// One MIG instance of a GPU, as its node's agent found it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MigDevice {
    /// The UUID CUDA knows it by (`MIG-…`).
    #[schema(min_length = 5, max_length = 64)]
    pub uuid: String,
    /// Its profile, such as `1g.10gb`.
    #[schema(min_length = 4, max_length = 16)]
    pub profile: String,
}

/// The MIG instances stored on a GPU row.
pub fn mig_devices(stored: Option<&str>) -> Vec<MigDevice> {
    stored
        .and_then(|json| serde_json::from_str(json).ok())
        .unwrap_or_default()
}

/// The instances a GPU's MIG work is placed on: those of the size most of
/// them have (the engine packs one size per GPU; NVIDIA's single-strategy
/// layouts are all alike), with that size in slices.
pub fn mig_layout(devices: &[MigDevice]) -> Option<(u8, Vec<&MigDevice>)> {
    let mut counts = [0usize; MIG_SLICES as usize + 1];
    for d in devices {
        if let Some(s) = slices_of(&d.profile) {
            counts[usize::from(s)] += 1;
        }
    }
    let size = (1..=MIG_SLICES).max_by_key(|s| (counts[usize::from(*s)], *s))?;
    let chosen: Vec<&MigDevice> = devices
        .iter()
        .filter(|d| slices_of(&d.profile) == Some(size))
        .collect();
    (!chosen.is_empty()).then_some((size, chosen))
}

/// Checks the MIG instances an agent reports for one GPU.
pub fn check_devices(fields: &mut Fields, field: &str, devices: &[MigDevice]) {
    let mut slices = 0u32;
    for (i, d) in devices.iter().enumerate() {
        if !d.uuid.starts_with("MIG-")
            || d.uuid.len() > 64
            || d.uuid.chars().any(char::is_whitespace)
        {
            fields.push(
                &format!("{field}[{i}].uuid"),
                "a MIG device UUID starts with MIG- and has at most 64 characters",
            );
        }
        match slices_of(&d.profile) {
            Some(s) if d.profile.len() <= 16 => slices += u32::from(s),
            _ => fields.push(
                &format!("{field}[{i}].profile"),
                format!("{:?} is not a MIG profile such as 1g.10gb", d.profile),
            ),
        }
    }
    if slices > u32::from(MIG_SLICES) {
        fields.push(
            field,
            format!("a GPU has {MIG_SLICES} MIG slices; these instances take {slices}"),
        );
    }
}

/// What an instance type, and so each order of it, gets of its GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GpuShape<'a> {
    /// Whole GPUs per node, never shared.
    Whole(i32),
    /// A fraction of one GPU, in thousandths.
    Fraction(i32),
    /// One MIG instance of this profile.
    Mig(&'a str),
}

impl<'a> GpuShape<'a> {
    pub fn new(gpus_per_node: i32, gpu_milli: Option<i32>, mig_profile: Option<&'a str>) -> Self {
        match (gpu_milli, mig_profile) {
            (_, Some(profile)) => Self::Mig(profile),
            (Some(milli), None) => Self::Fraction(milli),
            (None, None) => Self::Whole(gpus_per_node),
        }
    }

    /// What an instance type sells.
    pub fn of_type(t: &'a gantry_entities::instance_type::Model) -> Self {
        Self::new(t.gpus_per_node, t.gpu_milli, t.mig_profile.as_deref())
    }

    /// What an order holds, as it was ordered.
    pub fn of_order(o: &'a gantry_entities::order::Model) -> Self {
        Self::new(o.gpus_per_node, o.gpu_milli, o.mig_profile.as_deref())
    }

    /// What the scheduling engine packs.
    pub fn request(self) -> engine::GpuRequest {
        match self {
            Self::Whole(gpus) => engine::GpuRequest::Whole(u32::try_from(gpus).unwrap_or(0)),
            Self::Fraction(milli) => engine::GpuRequest::Milli(u32::try_from(milli).unwrap_or(0)),
            Self::Mig(profile) => engine::GpuRequest::Mig(slices_of(profile).unwrap_or(MIG_SLICES)),
        }
    }

    /// The share of each GPU held, in thousandths, which GPU-seconds are
    /// weighted by: a MIG instance counts its slices of seven, rounded
    /// down (1g is 142).
    pub fn milli(self) -> i32 {
        match self {
            Self::Whole(_) => WHOLE_MILLI,
            Self::Fraction(milli) => milli,
            Self::Mig(profile) => {
                i32::from(slices_of(profile).unwrap_or(MIG_SLICES)) * WHOLE_MILLI
                    / i32::from(MIG_SLICES)
            }
        }
    }

    pub fn is_shared(self) -> bool {
        !matches!(self, Self::Whole(_))
    }
}

/// Checks an instance type's share against its GPU model: a fraction in
/// eighths, or a MIG profile the model has; either sells one GPU.
pub fn check(
    fields: &mut Fields,
    model: &gantry_entities::gpu_model::Model,
    gpus_per_node: i32,
    gpu_milli: Option<i32>,
    mig_profile: Option<&str>,
) {
    if gpu_milli.is_some() && mig_profile.is_some() {
        fields.push(
            "mig_profile",
            "an instance type sells either a fraction of a GPU or a MIG instance, not both",
        );
        return;
    }
    if (gpu_milli.is_some() || mig_profile.is_some()) && gpus_per_node != 1 {
        fields.push(
            "gpus_per_node",
            "an instance type with a shared GPU has gpus_per_node 1",
        );
    }
    if let Some(milli) = gpu_milli
        && (milli % FRACTION_STEP != 0 || !(FRACTION_STEP..WHOLE_MILLI).contains(&milli))
    {
        fields.push(
            "gpu_milli",
            format!(
                "a GPU fraction is a multiple of {FRACTION_STEP} thousandths below a whole GPU \
                 (125, 250, 375, 500, 625, 750 or 875), not {milli}"
            ),
        );
    }
    if let Some(profile) = mig_profile {
        let known = profiles(model.memory_gib);
        if !model.mig_capable || known.is_empty() {
            fields.push(
                "mig_profile",
                format!("GPU model {} does not support MIG", model.name),
            );
        } else if !known.iter().any(|p| p.name == profile) {
            let names: Vec<&str> = known.iter().map(|p| p.name).collect();
            fields.push(
                "mig_profile",
                format!(
                    "{} has no MIG profile {profile:?}; its profiles are {}",
                    model.name,
                    names.join(", ")
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_follow_nvidias_names() {
        assert_eq!(slices_of("1g.10gb"), Some(1));
        assert_eq!(slices_of("3g.40gb"), Some(3));
        assert_eq!(slices_of("7g.141gb"), Some(7));
        assert_eq!(slices_of("8g.90gb"), None);
        assert_eq!(slices_of("big"), None);
        assert!(profiles(80).iter().any(|p| p.name == "3g.40gb"));
        assert!(profiles(141).iter().any(|p| p.name == "7g.141gb"));
        assert!(profiles(48).is_empty());
    }

    #[test]
    fn a_gpus_mig_layout_is_its_most_common_size() {
        let device = |n: usize, profile: &str| MigDevice {
            uuid: format!("MIG-{n}"),
            profile: profile.into(),
        };
        let alike: Vec<MigDevice> = (0..7).map(|n| device(n, "1g.10gb")).collect();
        let (size, chosen) = mig_layout(&alike).expect("a layout");
        assert_eq!((size, chosen.len()), (1, 7));
        let mixed = [
            device(0, "3g.40gb"),
            device(1, "3g.40gb"),
            device(2, "1g.10gb"),
        ];
        let (size, chosen) = mig_layout(&mixed).expect("a layout");
        assert_eq!((size, chosen.len()), (3, 2));
        assert!(mig_layout(&[]).is_none());
        let mut fields = Fields::default();
        check_devices(
            &mut fields,
            "mig",
            &[device(0, "7g.80gb"), device(1, "1g.10gb")],
        );
        assert!(
            fields.finish().is_err(),
            "eight slices on a seven-slice GPU"
        );
    }

    #[test]
    fn shares_weight_gpu_seconds() {
        assert_eq!(GpuShape::new(8, None, None).milli(), 1000);
        assert_eq!(GpuShape::new(1, Some(250), None).milli(), 250);
        assert_eq!(GpuShape::new(1, None, Some("1g.10gb")).milli(), 142);
        assert_eq!(GpuShape::new(1, None, Some("3g.40gb")).milli(), 428);
        assert_eq!(GpuShape::new(1, None, Some("7g.80gb")).milli(), 1000);
        assert_eq!(
            GpuShape::new(1, None, Some("3g.40gb")).request(),
            engine::GpuRequest::Mig(3)
        );
        assert_eq!(
            GpuShape::new(1, Some(500), None).request(),
            engine::GpuRequest::Milli(500)
        );
    }
}
