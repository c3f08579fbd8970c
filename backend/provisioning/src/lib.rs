//! Provisioning drivers: what brings placed work up on its nodes and takes
//! it down again. A driver reports progress by writing the order's state,
//! so a crash at any point resumes from the database: the scheduling loop
//! hands every order still being brought up or stopped to its driver again.

pub mod simulated;
pub mod slurm;

use chrono::{DateTime, Utc};
use uuid::Uuid;

pub trait Driver: Send + Sync {
    /// Brings up an order that the loop placed on this driver's nodes.
    /// Doing it twice for one order is harmless.
    fn start(&self, order_id: Uuid);
    /// Stops an order's work by `stop_at` and then frees its GPUs.
    /// Doing it twice for one order is harmless.
    fn stop(&self, order_id: Uuid, stop_at: DateTime<Utc>);
}
