//! Prices and who may spend: rating usage against the prices in force
//! (`rating`), the price books and region clocks it reads (`book`), rating
//! storage per GiB-month (`storage`), and the admission checks of prepaid
//! balances and capped budgets (`spending`).
//! Billing, reservations and orders all stand on it.

pub mod book;
pub mod rating;
pub mod spending;
pub mod storage;
