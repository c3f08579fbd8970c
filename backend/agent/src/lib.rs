//! Gantry's node agent.
//!
//! It runs on every GPU server, discovers the GPUs through NVML, registers
//! with a join token, heartbeats telemetry and starts the workloads assigned to
//! its node. The agent API it speaks lands together with provisioning.
