//! The `gantry` server: it builds the state (`state`), assembles every
//! crate's routes into one application with its OpenAPI document
//! (`router`), and runs a replica (`serve`). The domains live in crates of
//! their own, below it.

pub mod demo;
pub mod health;
pub mod http;
pub mod openapi;
pub mod router;
pub mod serve;
pub mod state;
