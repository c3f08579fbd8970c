//! What every domain of Gantry's control plane stands on: configuration,
//! the database connection, the one error type and its problem+json
//! mapping, the HTTP layers and extractors, the caller's identity, the
//! audit log writer, and the state handlers are given.

pub mod audit;
pub mod auth;
pub mod catalog;
pub mod config;
pub mod db;
pub mod error;
pub mod handles;
pub mod http;
pub mod sealing;
pub mod state;
pub mod validate;
