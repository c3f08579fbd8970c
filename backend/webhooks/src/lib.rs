//! Webhooks after the Standard Webhooks specification: organizations
//! register endpoints; events (an order's life, a job's failed attempt,
//! budgets, balances, invoices, SLA credits) go into an outbox in the
//! transaction that caused them; the replica holding the delivery lease
//! signs and sends them, retrying on a schedule, and keeps a log.

pub mod api;
pub mod delivery;
pub mod events;
pub mod signing;
use gantry_core::handles::webhook_targets as target;

pub use api::routes;
