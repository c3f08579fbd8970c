//! Gantry's node agent.
//!
//! It runs on every GPU server: it discovers the GPUs through NVML (or
//! simulates them for development), registers with a join token, heartbeats
//! telemetry, and starts and stops the workloads assigned to its node,
//! each isolated by the node's runtime with exactly its GPUs.

pub mod cgroup;
pub mod client;
pub mod cpus;
pub mod devices;
pub mod discovery;
pub mod disk;
pub mod driver;
pub mod exporter;
pub mod fabric;
pub mod images;
pub mod mounts;
pub mod names;
pub mod network;
pub mod output;
pub mod rdma;
pub mod root;
pub mod runtime;
pub mod shared;
pub mod ssh;
pub mod supervisor;
pub mod userns;
pub mod view;
pub mod volumes;
