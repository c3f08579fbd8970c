//! HTTP plumbing shared by every route: extractors that speak our error
//! shape, pagination, and the middleware stack.

pub mod client_address;
pub mod console;
pub mod csv;
pub mod docs;
pub mod extract;
pub mod idempotency;
pub mod outbound;
pub mod pagination;
pub mod problem;
pub mod rate_limit;
pub mod request_id;
