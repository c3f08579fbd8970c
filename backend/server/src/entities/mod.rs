//! sea-orm entities, one per table of the `migrations` crate.

pub mod allocation;
pub mod api_key;
pub mod audit_log;
pub mod billing_account;
pub mod gpu;
pub mod gpu_claim;
pub mod gpu_model;
pub mod gpu_telemetry;
pub mod idempotency_key;
pub mod instance_type;
pub mod invoice;
pub mod invoice_line;
pub mod join_token;
pub mod lease;
pub mod membership;
pub mod node;
pub mod node_event;
pub mod order;
pub mod organization;
pub mod price;
pub mod project;
pub mod quota;
pub mod region;
pub mod usage_record;
pub mod user;
