//! Per-GPU telemetry as agents report it, labelled with the node, the GPU's
//! index and the organization holding it (empty when free), in the units
//! DCGM's exporter uses, so the same dashboards read both.

use std::collections::HashMap;

use metrics::{Unit, describe_gauge, gauge};
use uuid::Uuid;

pub const UTILIZATION: &str = "gantry_gpu_utilization_ratio";
pub const MEMORY_USED: &str = "gantry_gpu_memory_used_bytes";
pub const TEMPERATURE: &str = "gantry_gpu_temperature_celsius";
pub const POWER: &str = "gantry_gpu_power_watts";

pub fn describe() {
    describe_gauge!(
        UTILIZATION,
        "Share of time the GPU was busy over the agent's last sample, 0 to 1"
    );
    describe_gauge!(MEMORY_USED, Unit::Bytes, "GPU memory in use");
    describe_gauge!(TEMPERATURE, "GPU temperature in degrees Celsius");
    describe_gauge!(POWER, "GPU power draw in watts");
}

/// One GPU's latest reading.
pub struct Reading {
    pub index: i32,
    pub utilization_pct: i16,
    pub memory_used_mib: i64,
    pub temperature_c: i16,
    pub power_w: i32,
}

/// The organization holding a GPU: its id, and its name for people.
pub struct Holder {
    pub id: Uuid,
    pub name: String,
}

/// Sets the gauges of one node's GPUs; `holders` by GPU index.
pub fn record(node: &str, readings: &[Reading], holders: &HashMap<i32, Holder>) {
    for r in readings {
        let (organization, organization_id) = holders
            .get(&r.index)
            .map_or((String::new(), String::new()), |h| {
                (h.name.clone(), h.id.to_string())
            });
        let labels = [
            ("node", node.to_owned()),
            ("gpu", r.index.to_string()),
            ("organization", organization),
            ("organization_id", organization_id),
        ];
        gauge!(UTILIZATION, &labels).set(f64::from(r.utilization_pct) / 100.0);
        gauge!(MEMORY_USED, &labels).set(r.memory_used_mib as f64 * 1024.0 * 1024.0);
        gauge!(TEMPERATURE, &labels).set(f64::from(r.temperature_c));
        gauge!(POWER, &labels).set(f64::from(r.power_w));
    }
}
