//! Builds the state every handler is given: the database (migrated), the
//! session keys, the caches and handles, and with `demo` on the demo
//! installation in an empty database.

use gantry_core::auth::identity::IdentityCache;
use gantry_core::auth::login_throttle::LoginThrottle;
use gantry_core::auth::password::PasswordHasher;
use gantry_core::auth::session::{self, SessionKeys};
use gantry_core::config::Config;
use gantry_core::handles::scheduler::SchedulerHandle;
use gantry_core::http::rate_limit::RateLimits;

use gantry_core::state::{AppState, Shared};

/// Connects to the database, applies pending migrations, loads (or creates)
/// the session signing secret and, with `demo` on, seeds an empty database
/// with the demo installation.
pub async fn start(config: Config) -> anyhow::Result<AppState> {
    let scheduler = SchedulerHandle::default();
    let db = gantry_core::db::connect(
        &config.database_url(),
        config.database_max_connections,
        &gantry_world::notify::application_name(scheduler.holder()),
    )
    .await?;
    gantry_core::db::migrate(&db).await?;
    let secret = session::load_or_create_secret(config.jwt_secret.as_deref(), &config.data_dir)?;
    let passwords = PasswordHasher::new()?;
    let trusted_proxies =
        gantry_core::http::client_address::TrustedProxies::parse(&config.trusted_proxies)?;
    let webhook_targets = gantry_core::handles::webhook_targets::Targets::new(
        gantry_core::http::client_address::networks(
            &config.webhook_allowed_networks,
            "webhook network",
        )?,
        config.webhook_allow_http,
    );
    if config.demo && crate::demo::seed(&db, &passwords).await? {
        tracing::info!("seeded the demo catalog, simulated cluster and logins");
    }
    let intake = gantry_core::handles::intake::Intake::start(db.clone(), config.max_waiting_orders);
    let beats = gantry_core::handles::beats::Beats::start(db.clone());
    Ok(AppState::from(Shared {
        db,
        sessions: SessionKeys::new(&secret, config.jwt_ttl_seconds)?,
        passwords,
        identities: IdentityCache::new(config.auth_cache_seconds),
        login_throttle: LoginThrottle::new(config.login_max_failures),
        rate_limits: RateLimits::new(
            config.rate_limit_per_second,
            config.rate_limit_burst,
            config.failed_auth_per_minute,
        ),
        scheduler,
        intake,
        beats,
        catalog: gantry_core::catalog::CatalogCache::default(),
        networks: gantry_core::handles::networks::Cache::default(),
        clock: gantry_types::clock::Clock::default(),
        trusted_proxies,
        webhook_targets,
        registry_sealer: gantry_core::sealing::Sealer::new(
            &secret,
            gantry_access::tenancy::registry_credentials::PURPOSE,
        )?,
        secret_env_sealer: gantry_core::sealing::Sealer::new(
            &secret,
            gantry_workload::jobs::SECRETS_PURPOSE,
        )?,
        config,
    }))
}
