//! Gantry's control plane: the REST API, tenancy and access, and (as the
//! product grows) the scheduling loop, provisioning, metering and billing.

pub mod agents;
pub mod app;
pub mod auth;
pub mod billing;
pub mod demo;
pub mod health;
pub mod http;
pub mod inventory;
pub mod jobs;
pub mod metering;
pub mod openapi;
pub mod orders;
pub mod provisioning;
pub mod queue_limits;
pub mod quotas;
pub mod reservations;
pub mod scheduling;
pub mod sla;

pub use gantry_access::{audit, operators, ssh_keys, tenancy};
pub use gantry_catalog as catalog;
pub use gantry_core::{config, db, error, sealing, validate};
pub use gantry_entities as entities;
pub use gantry_monitoring as monitoring;
pub use gantry_networks as networks;
pub use gantry_types::{classes, clock, digest};
pub use gantry_webhooks as webhooks;
