//! Tenancy: organizations (the tenants), their members, projects, API
//! keys and registry credentials, and the one place that decides who may act in which organization.

pub mod access;
pub mod api_keys;
pub mod invitations;
pub mod members;
pub mod orgs;
pub mod projects;
pub mod registry_credentials;

use gantry_types::roles;
