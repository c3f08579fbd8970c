//! The node's GPU telemetry in Prometheus's text format, on an address of
//! the agent's own, the way NVIDIA's DCGM exporter serves each node: one
//! series per GPU and measurement, labelled with the node, the GPU's index
//! and the organization holding it (empty when free), in DCGM's units.
//! The labels name tenants: bind the address to an interface only
//! Prometheus reaches.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context;
use metrics::{Unit, describe_gauge, gauge};
use metrics_exporter_prometheus::PrometheusBuilder;
use metrics_util::MetricKindMask;
use uuid::Uuid;

use crate::client::{Action, Assignment};
use crate::discovery::Sample;

pub const UTILIZATION: &str = "gantry_gpu_utilization_ratio";
pub const MEMORY_USED: &str = "gantry_gpu_memory_used_bytes";
pub const TEMPERATURE: &str = "gantry_gpu_temperature_celsius";
pub const POWER: &str = "gantry_gpu_power_watts";

/// Serves `/metrics` on `address` for the life of the process; call from
/// within the agent's runtime. Readings come every `interval`: a series
/// whose labels no longer apply (its GPU changed hands) leaves the output
/// after five of them without one, so a sum by organization never counts
/// a GPU twice for long.
pub fn serve(address: SocketAddr, interval: Duration) -> anyhow::Result<()> {
    let idle = (interval * 5).max(Duration::from_secs(1));
    PrometheusBuilder::new()
        .with_http_listener(address)
        .idle_timeout(MetricKindMask::GAUGE, Some(idle))
        .install()
        .with_context(|| format!("serving metrics on {address}"))?;
    describe_gauge!(
        UTILIZATION,
        "Share of time the GPU was busy over the last sample, 0 to 1"
    );
    describe_gauge!(MEMORY_USED, Unit::Bytes, "GPU memory in use");
    describe_gauge!(TEMPERATURE, "GPU temperature in degrees Celsius");
    describe_gauge!(POWER, "GPU power draw in watts");
    Ok(())
}

/// Who holds a GPU: its organization's id and name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub id: Uuid,
    pub name: String,
}

/// The organizations holding this node's GPUs, by GPU index, from the
/// assignments that run (a GPU shared by fractions shows its first).
pub fn holders(assignments: &[Assignment]) -> HashMap<i32, Holder> {
    let mut held = HashMap::new();
    for assignment in assignments.iter().filter(|a| a.action == Action::Run) {
        let Some(id) = assignment.org_id else {
            continue;
        };
        for gpu in &assignment.gpu_ids {
            held.entry(i32::try_from(*gpu).unwrap_or(i32::MAX))
                .or_insert_with(|| Holder {
                    id,
                    name: assignment.organization.clone(),
                });
        }
    }
    held
}

/// Sets the gauges of the node's GPUs from one sample each.
pub fn record(node: &str, samples: &[Sample], holders: &HashMap<i32, Holder>) {
    for sample in samples {
        let (organization, organization_id) = holders
            .get(&sample.index)
            .map_or((String::new(), String::new()), |h| {
                (h.name.clone(), h.id.to_string())
            });
        let labels = [
            ("node", node.to_owned()),
            ("gpu", sample.index.to_string()),
            ("organization", organization),
            ("organization_id", organization_id),
        ];
        gauge!(UTILIZATION, &labels).set(f64::from(sample.utilization_pct) / 100.0);
        gauge!(MEMORY_USED, &labels).set(sample.memory_used_mib as f64 * 1024.0 * 1024.0);
        gauge!(TEMPERATURE, &labels).set(f64::from(sample.temperature_c));
        gauge!(POWER, &labels).set(f64::from(sample.power_w));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assignment(org: u128, name: &str, action: &str, gpus: &[u32]) -> Assignment {
        serde_json::from_value(serde_json::json!({
            "order_id": Uuid::from_u128(org * 100),
            "org_id": (org > 0).then(|| Uuid::from_u128(org)),
            "organization": name,
            "action": action,
            "gpu_ids": gpus,
            "env": {},
        }))
        .expect("an assignment")
    }

    #[test]
    fn a_gpu_is_held_by_the_organization_whose_work_runs_on_it() {
        let held = holders(&[
            assignment(1, "alpha", "run", &[0, 1]),
            // Stopping work no longer holds its GPU for the figures.
            assignment(2, "bravo", "stop", &[2]),
            // A fraction beside another on GPU 1: the first one names it.
            assignment(3, "charlie", "run", &[1, 3]),
            // A control plane that does not say whose it is.
            assignment(0, "", "run", &[4]),
        ]);
        let name = |gpu: i32| held.get(&gpu).map(|h| h.name.as_str());
        assert_eq!(name(0), Some("alpha"));
        assert_eq!(name(1), Some("alpha"));
        assert_eq!(name(2), None);
        assert_eq!(name(3), Some("charlie"));
        assert_eq!(name(4), None);
        assert_eq!(held[&3].id, Uuid::from_u128(3));
    }
}
