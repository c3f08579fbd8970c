//! The agent as a node runs it, in one test binary: real agent processes
//! against a real server (`agent`, `jobs`, `instances`), a tenant's
//! workload attacking the node and its neighbours (`isolation`, `fabric`,
//! `networks`), RDMA devices handed to workloads (`rdma`), and volumes
//! local to a node (`volumes`) or on a shared file system
//! (`shared_volumes`). `lab` starts agents; `node` prepares a node for
//! instances.

mod lab;
mod node;

mod agent;
mod fabric;
mod instances;
mod isolation;
mod jobs;
mod networks;
mod rdma;
mod shared_volumes;
mod vms;
mod volumes;

use gantry_test_support as support;
