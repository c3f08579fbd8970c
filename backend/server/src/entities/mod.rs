//! sea-orm entities, one per table of the `migrations` crate.

pub mod api_key;
pub mod audit_log;
pub mod idempotency_key;
pub mod membership;
pub mod organization;
pub mod project;
pub mod user;
