//! HTTP plumbing shared by every route: extractors that speak our error
//! shape, pagination, and the middleware stack.

pub mod console;
pub mod docs;

pub use gantry_core::http::{
    client_address, csv, extract, idempotency, outbound, pagination, problem, rate_limit,
    request_id,
};
