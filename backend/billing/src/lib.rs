//! Billing: usage rated against versioned prices into invoices, budgets,
//! prepaid balances, spend, and the SLA credits invoices carry (`sla`).

pub mod api;
pub mod budgets;
pub mod invoices;
pub mod prepaid;
pub mod sla;
pub mod spend;

use gantry_pricing::rating;
