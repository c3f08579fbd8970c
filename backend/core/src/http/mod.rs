//! The layers every request meets and the extractors handlers use.

pub mod client_address;
pub mod csv;
pub mod extract;
pub mod idempotency;
pub mod outbound;
pub mod pagination;
pub mod problem;
pub mod rate_limit;
pub mod request_id;
