//! Gantry's scheduling engine.
//!
//! A pure library: no I/O, no async, no SQL and no clock reads. Time comes in
//! as an argument and the same input always yields the same decisions, so the
//! server's scheduling loop and the trace simulator drive exactly the same
//! code.
//!
//! This first step places pending workloads in priority order onto exact
//! GPUs: GPU-model, region and label constraints, CPU and memory fit, gangs
//! placed all-or-nothing, and topology preference (one node, one NVLink
//! domain, one rack) with best-fit packing. Every workload left waiting gets
//! its reasons, with numbers. A capacity report shows, per GPU model, free
//! versus schedulable slots per shape and a fragmentation index. Preemption,
//! quotas, fair share, backfill and reservations build on this model.

mod cluster;
mod placement;
mod report;
mod schedule;
mod workload;

pub use cluster::{Cluster, Gpu, Node};
pub use report::{CapacityReport, ModelCapacity, SHAPES, ShapeSlots, capacity_report};
pub use schedule::{Decisions, PendingReason, Placement, Start, WaitingWorkload, schedule};
pub use workload::{Allocation, Workload};
