//! Billing: usage rated against versioned prices into invoices.

pub mod api;
pub mod budgets;
pub mod invoices;
pub mod prepaid;
pub mod rating;
pub mod spend;
