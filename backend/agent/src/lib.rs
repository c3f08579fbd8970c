//! Gantry's node agent.
//!
//! It runs on every GPU server: it discovers the GPUs through NVML (or
//! simulates them for development), registers with a join token, heartbeats
//! telemetry, and starts and stops the workloads assigned to its node with
//! `CUDA_VISIBLE_DEVICES` set to exactly their GPUs.

pub mod client;
pub mod discovery;
pub mod output;
pub mod supervisor;
