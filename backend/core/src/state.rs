//! The state every request handler may use, cheap to clone. The server
//! builds it (`gantry-server`'s `state.rs`); the crates above this one only
//! read it.

use std::ops::Deref;
use std::sync::Arc;

use gantry_types::clock::Clock;
use sea_orm::DatabaseConnection;

use crate::auth::identity::IdentityCache;
use crate::auth::login_throttle::LoginThrottle;
use crate::auth::password::PasswordHasher;
use crate::auth::session::SessionKeys;
use crate::catalog::CatalogCache;
use crate::config::Config;
use crate::handles::beats::Beats;
use crate::handles::intake::Intake;
use crate::handles::scheduler::SchedulerHandle;
use crate::handles::webhook_targets::Targets;
use crate::http::client_address::TrustedProxies;
use crate::http::rate_limit::RateLimits;
use crate::sealing::Sealer;

pub const REQUEST_ID_HEADER: &str = "x-request-id";
pub const API_PREFIX: &str = "/api/v1";

/// Everything a request handler may need, cheap to clone.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

pub struct Shared {
    pub db: DatabaseConnection,
    pub sessions: SessionKeys,
    pub passwords: PasswordHasher,
    pub identities: IdentityCache,
    pub login_throttle: LoginThrottle,
    pub rate_limits: RateLimits,
    pub scheduler: SchedulerHandle,
    pub intake: Intake,
    pub beats: Beats,
    pub catalog: CatalogCache,
    pub networks: crate::handles::networks::Cache,
    pub clock: Clock,
    pub trusted_proxies: TrustedProxies,
    /// Where webhook deliveries may go.
    pub webhook_targets: Targets,
    /// Seals organizations' registry passwords.
    pub registry_sealer: Sealer,
    /// Seals jobs' secret variables.
    pub secret_env_sealer: Sealer,
    pub config: Config,
}

impl From<Shared> for AppState {
    fn from(shared: Shared) -> Self {
        Self(Arc::new(shared))
    }
}

impl Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}
