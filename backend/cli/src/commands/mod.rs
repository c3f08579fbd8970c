//! One module per group of commands.

pub mod account;
pub mod jobs;
pub mod login;
pub mod logs;
pub mod operator;
pub mod orders;
pub mod ssh;
pub mod volumes;
