//! The workload: orders (validation, admission, lifecycle, names), jobs
//! (commands, arrays, dependencies, attempts, output) and reservations
//! (advance reservations, the calendar, maintenance windows), with the
//! per-organization quotas and queue limits admission weighs. They change
//! one another's rows in one transaction, so they are one crate.

pub mod jobs;
pub mod orders;
pub mod queue_limits;
pub mod quotas;
pub mod reservations;
