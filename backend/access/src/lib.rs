//! Who may act where: accounts and sign-in, organizations with their
//! members, roles, invitations, projects, API keys and registry
//! credentials, users' SSH keys, operators, and the audit log's reading
//! side. `tenancy::access` decides organization access in one place for
//! every domain above.

pub mod audit;
pub mod auth;
pub mod operators;
pub mod ssh_keys;
pub mod tenancy;
