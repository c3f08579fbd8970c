//! Billing: usage rated against versioned prices into invoices.

pub mod api;
pub mod invoices;
pub mod rating;
