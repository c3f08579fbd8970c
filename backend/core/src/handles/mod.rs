//! The long-lived objects the state holds for every request: the way to
//! the scheduling loop, the order and heartbeat writers, and caches of rows
//! that rarely change (the catalog's is in `catalog`).

pub mod beats;
pub mod intake;
pub mod networks;
pub mod scheduler;
pub mod waiting;
pub mod webhook_targets;
