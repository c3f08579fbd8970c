//! Gantry's control plane: the REST API, tenancy and access, and (as the
//! product grows) the scheduling loop, provisioning, metering and billing.

pub mod agents;
pub mod app;
pub mod audit;
pub mod auth;
pub mod billing;
pub mod catalog;
pub mod config;
pub mod db;
pub mod demo;
pub mod error;
pub mod health;
pub mod http;
pub mod inventory;
pub mod jobs;
pub mod metering;
pub mod monitoring;
pub mod networks;
pub mod openapi;
pub mod operators;
pub mod orders;
pub mod provisioning;
pub mod queue_limits;
pub mod quotas;
pub mod reservations;
pub mod scheduling;
pub mod sealing;
pub mod sla;
pub mod ssh_keys;
pub mod tenancy;
pub mod validate;
pub mod webhooks;

pub use gantry_entities as entities;
pub use gantry_types::{classes, clock, digest};
