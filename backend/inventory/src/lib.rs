//! The inventory: nodes and their GPUs, as drivers report them and
//! operators manage them.

pub mod nodes;
pub mod reserved;
pub mod telemetry;
