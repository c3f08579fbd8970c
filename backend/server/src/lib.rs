//! Gantry's control plane: the REST API, tenancy and access, and (as the
//! product grows) the scheduling loop, provisioning, metering and billing.

pub mod app;
pub mod audit;
pub mod auth;
pub mod config;
pub mod db;
pub mod digest;
pub mod entities;
pub mod error;
pub mod health;
pub mod http;
pub mod openapi;
pub mod operators;
pub mod tenancy;
pub mod validate;
