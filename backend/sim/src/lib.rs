//! Gantry's trace simulator.
//!
//! Replays workload traces through the real scheduling engine
//! (`gantry-scheduler`, the code the server runs) in two modes: the
//! arrival-only fill protocol of placement studies ([`fill`]) and a
//! time-driven replay of arrivals, runs and departures ([`replay`]).
//! Adapters read the Alibaba GPU cluster trace 2023 ([`alibaba`]), the
//! Standard Workload Format ([`swf`]) and Gantry's own CSV formats
//! ([`csv`]). Everything is deterministic for a seed.

pub mod alibaba;
pub mod csv;
pub mod defrag;
pub mod experiment;
pub mod fill;
pub mod replay;
pub mod rng;
pub mod stats;
pub mod sun;
pub mod swf;
mod trace;
pub mod whatif;

pub use trace::TraceError;
